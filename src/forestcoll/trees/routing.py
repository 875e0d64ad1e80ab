"""Packed trees back on the fabric: every logical arc u -> t replaced by physical paths through switches.

Switch removal (:mod:`.splitting`) leaves, for each logical arc between compute
nodes, a *bundle* of physical paths with multiplicities summing to the arc's
capacity.  A tree of multiplicity m that uses the arc takes m units of the
bundle; where a tree's units take different paths it is split into trees of
smaller multiplicity, each on one path per arc.  Every unit of every bundle is
used at most once, so link loads equal the capacities the packing respected.

Which tree takes which path is free, and it decides what the trees deliver.
An arc's *main* route (its most units) serves as much as it can; the *side*
routes (narrower detours, such as a GPU's path through the CPU's PCIe port)
go to the trees in which the arc leaves the root, else the shallowest node no
side route feeds yet (:func:`_assign`): the fattest trees first where the side
route is much narrower than the main one, else the thinnest (:func:`narrow_sides`).
Inside a split tree the side routes of different arcs are placed on different
units (:func:`_spread`), so no thin piece collects a chain of them.  An exact
packing fills every link; a side route deep in a thin tree idles its link until
the tree's pipeline reaches it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from fractions import Fraction
from typing import Any

from forestcoll.trees.packing import Tree
from forestcoll.trees.splitting import Path

__all__ = ["NARROW", "map_back", "narrow_sides"]


SPREAD_LIMIT = 32  # side routes per tree placed apart; a tree with more keeps them in route order


def _in_order(alloc: list[tuple[Path, int]]) -> list[tuple[int, int, Path]]:
    """Unit windows of an arc's routes in route order: route i takes [sum of the units before it, + its units)."""
    windows, acc = [], 0
    for p, a in alloc:
        windows.append((acc, acc + a, p))
        acc += a
    return windows


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
            out.append(_in_order(alloc))
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
            out.append(_in_order(alloc))
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


NARROW = 4  # a side route whose narrowest hop has at most 1/NARROW of the main route's bandwidth is narrow


def narrow_sides(bundles: Mapping[tuple[int, int], Mapping[Path, int]],
                 bandwidth: Mapping[tuple[int, int], Fraction | int]) -> set[tuple[int, int]]:
    """The arcs with a *narrow* side route: its narrowest hop has at most 1/:data:`NARROW` of the bandwidth of the
    main route's narrowest hop (main: the most units, first in path order on ties).

    Such a link carries few units, so few trees' streams, and an exact packing keeps it full all the call: with
    thin trees on it (a 1-chunk tree has 3 slices at 1 GiB) it idles whenever their few slices wait for data
    upstream, with fat trees a slice is nearly always ready.  H100 x 4 (rail): the CPUs' 6 GB/s PCIe ports
    beside the NVSwitch's 371 GB/s, busy 5.14-5.26 ms for 4.97 ms of work with the thin trees on them (allreduce
    1 GiB 203.8 GB/s), 4.98-5.10 ms with the fat ones (208.6, 0.965 of the bound).  The MI300 dump's detour through the CPUs
    (22 GB/s beside a 48 GB/s xGMI link) is not narrow: fat trees there lost at 16 MiB (allreduce 100.7 -> 97.6
    GB/s), where the thin trees' few slices are the last to end."""
    out = set()
    for arc, bundle in bundles.items():
        if len(bundle) < 2:
            continue
        main = min(bundle, key=lambda p: (-bundle[p], p))
        wide = min(bandwidth[hop] for hop in zip(main, main[1:]))
        if any(NARROW * min(bandwidth[hop] for hop in zip(p, p[1:])) <= wide for p in bundle if p != main):
            out.add(arc)
    return out


def _assign(trees: Sequence[Tree], bundles: dict[tuple[int, int], dict[Path, int]], compute: Sequence[int],
            main: dict[tuple[int, int], Path], fat_first: AbstractSet[tuple[int, int]] = frozenset(),
            ) -> list[list[list[tuple[Path, int]]]]:
    """Every tree's routes on each of its arcs: [(path, units)], its largest part first.

    On an arc of several routes the main one (the most units) serves as much as it can; the units the trees need
    beyond it come from the side routes (widest first) and go, level by level from the roots down, to the trees
    in which the arc leaves the shallowest node, on units that no side route above it feeds yet; on a level the
    thinner trees first, or the fatter first on the arcs in ``fat_first`` (:func:`narrow_sides`); whatever is
    still missing is taken after that, main route first.  A side route out of a root never waits for data and
    two never chain in one tree where this can be helped: a side route deep in a thin tree waits for the tree's
    pipeline to fill while its link, a bottleneck like every link an exact packing fills, idles (H100 x 4: the
    CPUs' 6 GB/s PCIe ports)."""
    out: list[list[list[tuple[Path, int]]]] = [[[] for _ in t.arcs] for t in trees]
    need = [[t.multiplicity] * len(t.arcs) for t in trees]
    entries = []  # (depth of the arc's tail, multiplicity (negated on the arcs in fat_first), tree, arc position)
    total: dict[tuple[int, int], int] = {}
    for i, tree in enumerate(trees):
        depth = {tree.root: 0}
        for j, (x, y) in enumerate(tree.arcs):
            depth[y] = depth[x] + 1
            arc = (compute[x], compute[y])
            entries.append((depth[x], -tree.multiplicity if arc in fat_first else tree.multiplicity, i, j))
            total[arc] = total.get(arc, 0) + tree.multiplicity
    entries.sort()

    def take(arc: tuple[int, int], p: Path, amount: int, i: int, j: int) -> None:
        bundle = bundles[arc]
        if bundle[p] == amount:
            del bundle[p]
        else:
            bundle[p] -= amount
        out[i][j].append((p, amount))
        need[i][j] -= amount

    extra = {arc: max(0, t - bundles[arc].get(main[arc], 0)) for arc, t in total.items()}  # units beyond the main
    fed: list[dict[int, int]] = [{} for _ in trees]  # per tree: node -> units of the tree below a side route
    for _d, _m, i, j in entries:
        x, y = trees[i].arcs[j]
        arc = (compute[x], compute[y])
        below = fed[i].get(x, 0)
        free = trees[i].multiplicity - below  # units no side route above x feeds yet
        for p in sorted((p for p in bundles[arc] if p != main[arc]), key=lambda p: (-bundles[arc][p], p)):
            if not extra[arc] or not free:
                break
            a = min(bundles[arc][p], free, extra[arc])
            take(arc, p, a, i, j)
            extra[arc] -= a
            free -= a
            below += a
        if below:
            fed[i][y] = below
    for _d, _m, i, j in entries:
        if not need[i][j]:
            continue
        x, y = trees[i].arcs[j]
        arc = (compute[x], compute[y])
        for p in sorted(bundles[arc], key=lambda p: (p != main[arc], -bundles[arc][p], p)):
            a = min(bundles[arc][p], need[i][j])
            take(arc, p, a, i, j)
            if not need[i][j]:
                break
        assert need[i][j] == 0, "a logical arc ran out of physical paths"
    for row in out:
        for got in row:
            got.sort(key=lambda pa: -pa[1])
    return out


def map_back(
    packed: Iterable[Tree], bundles: dict[tuple[int, int], dict[Path, int]], compute: Sequence[int],
    make: Callable[[int, int, Path], Any] | None = None,
    bandwidth: Mapping[tuple[int, int], Fraction | int] | None = None,
) -> Iterator[tuple[int, int, list[Any]]]:
    """Replace logical arcs by physical paths, splitting a tree where its units take different paths.

    Yields (root node, multiplicity, edges) in node indices, tree by tree (a caller that builds its own trees
    from them never holds all of them twice); an edge is ``make(src, dst, path)``, made once per distinct
    (src, dst, path) and shared (default: the triple).  ``bundles`` is used up by the time the last tree is
    yielded.  With ``bandwidth`` (hop -> bandwidth, the fabric's arcs) the narrow side routes go to the fatter
    trees first (:func:`narrow_sides`), the others (and all without it) to the thinner first.

    A logical arc whose bundle has a single route gives that route to every tree (or runs out, a bug): a tree
    of such arcs only is routed by one lookup per arc, and its units are counted and taken from the bundles at
    the end, which leaves them as taking them tree by tree would (4 million tree edges at 2,048 ranks).  Trees
    with an arc of several routes are held until the others are out and routed together (:func:`_assign` needs
    every tree that shares a bundle), so they come last."""
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
    pending: list[Tree] = []  # trees with an arc of several routes: routed together once the others are out
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
        pending.append(tree)
    fat_first = narrow_sides(bundles, bandwidth) if bandwidth is not None and pending else set()
    for tree, single in zip(pending, _assign(pending, bundles, compute, main, fat_first)):
        m = tree.multiplicity
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
