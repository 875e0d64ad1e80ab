"""Packed trees back on the fabric: every logical arc u -> t replaced by physical paths through switches.

Switch removal (:mod:`.splitting`) leaves, for each logical arc between compute
nodes, a *bundle* of physical paths with multiplicities summing to the arc's
capacity.  A tree of multiplicity m that uses the arc takes m units of the
bundle, one path covering all of them when one can (best fit), else the widest
paths first; where a tree's units take different paths it is split into trees
of smaller multiplicity, each on one path per arc.  Every unit of every bundle
is used at most once, so link loads equal the capacities the packing respected.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from forestcoll.trees.packing import Tree
from forestcoll.trees.splitting import Path

__all__ = ["map_back"]


def _allocate(bundle: dict[Path, int], need: int, main: Path | None = None) -> list[tuple[Path, int]]:
    """Take ``need`` units from a path bundle, preferring one path that covers them all (best fit; ``main`` first
    when it covers them)."""
    if main is not None and bundle.get(main, 0) >= need:
        if bundle[main] == need:
            del bundle[main]
        else:
            bundle[main] -= need
        return [(main, need)]
    if len(bundle) == 1:
        ((p, a),) = bundle.items()
        assert a >= need, "a logical arc ran out of physical paths"
        if a == need:
            del bundle[p]
        else:
            bundle[p] = a - need
        return [(p, need)]
    best = None
    for p, a in bundle.items():
        if a >= need and (best is None or (a, p) < (bundle[best], best)):
            best = p
    if best is not None:
        chosen = [(best, need)]
    else:
        chosen = []
        left = need
        for p in sorted(bundle, key=lambda p: (-bundle[p], p)):
            a = min(bundle[p], left)
            chosen.append((p, a))
            left -= a
            if left == 0:
                break
        assert left == 0, "a logical arc ran out of physical paths"
    for p, a in chosen:
        bundle[p] -= a
        if bundle[p] == 0:
            del bundle[p]
    return chosen


SPREAD_LIMIT = 256  # side routes per tree placed apart; a tree with more keeps them in route order


def _spread(allocations: Sequence[list[tuple[Path, int]]], m: int) -> list[list[tuple[int, int, Path]]]:
    """Unit windows [lo, hi) of each arc's routes within a tree of multiplicity ``m``: the widest route of an arc
    (its first) fills what its other routes (*side* routes) leave, and each side route takes the window where the
    fewest side routes of other arcs already lie (earliest on ties).  A unit interval becomes one tree, so side
    routes placed apart are not chained in one thin tree: on H100 x 4 (rail) the routes through the CPUs' 6 GB/s
    PCIe ports, all placed at the end, made 1-chunk trees with 17 such hops, the last trees to finish at 1 GiB."""
    sides = sum(len(a) - 1 for a in allocations)
    placed_sides: list[tuple[int, int]] = []
    out = []
    for alloc in allocations:
        if sides > SPREAD_LIMIT or len(alloc) == 1:  # route order, one window after the other
            windows, acc = [], 0
            for p, a in alloc:
                windows.append((acc, acc + a, p))
                acc += a
            out.append(windows)
            continue
        own: list[tuple[int, int, Path]] = []
        fits = True
        for p, a in alloc[1:]:
            starts = sorted({0, m - a, *(hi for _, hi in placed_sides), *(lo - a for lo, _ in placed_sides),
                             *(hi for _, hi, _ in own)})
            best = None
            for st in starts:
                if st < 0 or st + a > m or any(st < hi and lo < st + a for lo, hi, _ in own):
                    continue
                score = sum(1 for lo, hi in placed_sides if st < hi and lo < st + a)
                if best is None or score < best[0]:
                    best = (score, st)
            if best is None:  # no free window at those starts: the first gap that holds it, if any
                gap = _first_gap(own, a, m)
                if gap is None:
                    fits = False
                    break
                best = (0, gap)
            own.append((best[1], best[1] + a, p))
        if not fits:  # some side route found no window: route order, one window after the other
            windows, acc = [], 0
            for p, a in alloc:
                windows.append((acc, acc + a, p))
                acc += a
            out.append(windows)
            continue
        placed_sides.extend((lo, hi) for lo, hi, _ in own)
        own.sort(key=lambda w: w[0])
        windows, acc = [], 0
        wide = alloc[0][0]
        for lo, hi, p in own:
            if lo > acc:
                windows.append((acc, lo, wide))
            windows.append((lo, hi, p))
            acc = hi
        if acc < m:
            windows.append((acc, m, wide))
        out.append(windows)
    return out


def _first_gap(own: Sequence[tuple[int, int, Path]], a: int, m: int) -> int | None:
    """The first start at which ``a`` units fit between the windows ``own`` in [0, m) (None: nowhere)."""
    acc = 0
    for lo, hi, _ in sorted(own, key=lambda w: w[0]):
        if lo - acc >= a:
            return acc
        acc = max(acc, hi)
    return acc if m - acc >= a else None


def map_back(
    packed: Iterable[Tree], bundles: dict[tuple[int, int], dict[Path, int]], compute: Sequence[int],
    make: Callable[[int, int, Path], Any] | None = None,
) -> Iterator[tuple[int, int, list[Any]]]:
    """Replace logical arcs by physical paths, splitting a tree where its units take different paths.

    Yields (root node, multiplicity, edges) in node indices, tree by tree (a caller that builds its own trees
    from them never holds all of them twice); an edge is ``make(src, dst, path)``, made once per distinct
    (src, dst, path) and shared (default: the triple).  ``bundles`` is used up by the time the last tree is
    yielded.

    A logical arc whose bundle has a single route gives that route to every tree (or runs out, a bug): a tree
    of such arcs only is routed by one lookup per arc, and its units are counted and taken from the bundles at
    the end, which leaves them as taking them tree by tree would (4 million tree edges at 2,048 ranks)."""
    made: dict[tuple[int, int, Path], Any] = {}

    def edge(x: int, y: int, p: Path) -> Any:
        key = (x, y, p)
        e = made.get(key)
        if e is None:
            e = made[key] = make(x, y, p) if make is not None else key
        return e

    rank = {c: i for i, c in enumerate(compute)}
    # each arc's main route: the one with the most units (first in path order on ties); the others are side routes
    main = {arc: min(bundle, key=lambda p: (-bundle[p], p)) for arc, bundle in bundles.items() if bundle}
    fast: dict[tuple[int, int], Any] = {}
    for (u, t), bundle in bundles.items():
        if len(bundle) == 1 and u in rank and t in rank:
            ((p, _),) = bundle.items()
            fast[(rank[u], rank[t])] = edge(u, t, p)
    counted: dict[int, Counter] = {}  # multiplicity -> uses of each single-route arc by fast-routed trees
    lookup = fast.__getitem__
    for tree in packed:
        m = tree.multiplicity
        try:
            routed = list(map(lookup, tree.arcs))
        except KeyError:
            pass
        else:
            uses = counted.get(m)
            if uses is None:
                uses = counted[m] = Counter()
            uses.update(tree.arcs)
            yield compute[tree.root], m, routed
            continue
        # best fit, except below a side route: a chain of side routes (thin, slow detours) in one tree pipelines
        # worst, so an arc under one takes its bundle's main route when that covers the tree
        side = {compute[tree.root]: False}
        single = []
        for x, y in tree.arcs:
            u, t = compute[x], compute[y]
            alloc = _allocate(bundles[(u, t)], m, main[(u, t)] if side[u] else None)
            single.append(alloc)
            side[t] = side[u] or any(p != main[(u, t)] for p, _ in alloc)
        if all(len(a) == 1 for a in single):  # one route per arc, the tree stays whole
            yield compute[tree.root], m, [edge(compute[x], compute[y], a[0][0]) for (x, y), a in zip(tree.arcs, single)]
            continue
        placed = _spread(single, m)
        cuts = {lo for windows in placed for lo, _hi, _p in windows} | {m}
        bounds = sorted(cuts)
        parts: dict[tuple, int] = {}  # the routes of each unit interval; equal routes: one tree, multiplicities added
        for lo, hi in zip(bounds, bounds[1:]):
            routes = tuple(next(p for a, b, p in windows if a <= lo < b) for windows in placed)
            parts[routes] = parts.get(routes, 0) + hi - lo
        for routes, mult in parts.items():
            yield compute[tree.root], mult, [edge(compute[x], compute[y], p) for (x, y), p in zip(tree.arcs, routes)]
    for m, uses in sorted(counted.items()):
        for (x, y), times in uses.items():
            bundle = bundles[(compute[x], compute[y])]
            ((p, a),) = bundle.items()
            assert a >= m * times, "a logical arc ran out of physical paths"
            if a == m * times:
                del bundle[p]
            else:
                bundle[p] = a - m * times
