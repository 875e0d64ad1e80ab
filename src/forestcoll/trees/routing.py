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

from collections.abc import Iterable, Iterator, Sequence

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
    packed: Iterable[Tree], bundles: dict[tuple[int, int], dict[Path, int]], compute: Sequence[int]
) -> Iterator[tuple[int, int, list[tuple[int, int, Path]]]]:
    """Replace logical arcs by physical paths, splitting a tree where its units take different paths.

    Yields (root node, multiplicity, [(src, dst, path)]) in node indices, tree by tree (a caller that builds
    its own trees from them never holds all of them twice); ``bundles`` is used up as they are yielded.
    """
    for tree in packed:
        m = tree.multiplicity
        single = [_allocate(bundles[(compute[x], compute[y])], m) for x, y in tree.arcs]
        if all(len(a) == 1 for a in single):  # the common case: one route per arc, the tree stays whole
            yield compute[tree.root], m, [(compute[x], compute[y], a[0][0]) for (x, y), a in zip(tree.arcs, single)]
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
                        edges.append((compute[x], compute[y], p))
                        break
                    acc += a
            yield compute[tree.root], hi - lo, edges
