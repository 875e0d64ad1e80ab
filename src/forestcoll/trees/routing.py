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


def _allocate(bundle: dict[Path, int], need: int) -> list[tuple[Path, int]]:
    """Take ``need`` units from a path bundle, preferring one path that covers them all (best fit)."""
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
        single = [_allocate(bundles[(compute[x], compute[y])], m) for x, y in tree.arcs]
        if all(len(a) == 1 for a in single):  # one route per arc, the tree stays whole
            yield compute[tree.root], m, [edge(compute[x], compute[y], a[0][0]) for (x, y), a in zip(tree.arcs, single)]
            continue
        allocations = []
        cuts = {0, tree.multiplicity}
        for alloc in single:
            allocations.append(alloc)
            acc = 0
            for _, a in alloc:
                acc += a
                cuts.add(acc)
        bounds = sorted(cuts)
        for lo, hi in zip(bounds, bounds[1:]):
            edges = []
            for (x, y), alloc in zip(tree.arcs, allocations):
                acc = 0
                for p, a in alloc:
                    if acc <= lo < acc + a:
                        edges.append(edge(compute[x], compute[y], p))
                        break
                    acc += a
            yield compute[tree.root], hi - lo, edges
    for m, uses in sorted(counted.items()):
        for (x, y), times in uses.items():
            bundle = bundles[(compute[x], compute[y])]
            ((p, a),) = bundle.items()
            assert a >= m * times, "a logical arc ran out of physical paths"
            if a == m * times:
                del bundle[p]
            else:
                bundle[p] = a - m * times
