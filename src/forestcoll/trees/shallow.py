"""Lower trees after packing: rip up the deepest trees and grow them again under a height limit.

Any set of complete trees can be given back to the pool at any time: a tree of
root r with multiplicity C enters every node set X without r at least once, so
returning its C units to r's pool and to its arcs raises rho_res(X) by >= C
while the demand outside X rises by exactly C; the packing invariant of
:mod:`.packing` survives.  Growing them again with the exact one-max-flow arc
test keeps it, so whatever this module does, the trees stay within the integer
capacities and every root keeps its k*w(r) trees: an exactly optimal packing
stays exactly optimal, with the same certificate.

The height comes from the choices.  Repeatedly: take a tree of the largest
height H, give it back and grow it breadth-first with every node at depth
<= H - 1 (:meth:`~.packing.Packer.grow` with ``max_height``).  When the tree
cannot keep that height, the trees that hold the arcs leaving its shallow part
are given back too (the *blockers*), the deep tree is grown first and the
blockers after it, each within height H.  A move is kept when the heights
improve (fewer trees of height H, or a lower sum of heights), else it is undone.
The search is deterministic and bounded by a number of max-flows; it stops
early at the radius of the graph (no tree of root r is lower than r's
eccentricity).  This is the rip-up-and-reroute idea of VLSI routing applied to
Lovász's construction; it finds low packings, not provably the lowest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from forestcoll.topology.model import Topology
from forestcoll.trees.packing import Packer, Tree

__all__ = ["LowerResult", "eccentricities", "lower_trees", "rank_eccentricities", "tree_height"]


def tree_height(tree: Tree) -> int:
    """Edges on the longest root-leaf chain (``arcs`` list parents first)."""
    depth = {tree.root: 0}
    for x, y in tree.arcs:
        depth[y] = depth[x] + 1
    return max(depth.values())


def eccentricities(n: int, caps: dict[tuple[int, int], int]) -> list[int]:
    """Each node's eccentricity over the arcs with capacity (n when some node is unreachable)."""
    out: list[list[int]] = [[] for _ in range(n)]
    for (a, b), c in caps.items():
        if c > 0:
            out[a].append(b)
    result = []
    for r in range(n):
        dist = {r: 0}
        queue = deque([r])
        while queue:
            u = queue.popleft()
            for v in out[u]:
                if v not in dist:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        result.append(max(dist.values()) if len(dist) == n else n)
    return result


def rank_eccentricities(topo: Topology, reverse: bool = False) -> dict[int, int]:
    """Each rank's eccentricity in hops between ranks (a path through switches counts once), out of the rank
    (or into it, ``reverse``): no out-tree (in-tree) of that root is lower.  Node index -> hops."""
    idx = topo.index
    out: dict[int, list[int]] = {}
    for lk in topo.links:
        a, b = (idx[lk.dst], idx[lk.src]) if reverse else (idx[lk.src], idx[lk.dst])
        out.setdefault(a, []).append(b)
    compute = topo.is_compute
    ranks = [i for i in range(len(topo.nodes)) if compute[i]]
    result = {}
    for r in ranks:
        hops = {r: 0}
        queue = deque([r])
        while queue:  # 0-1 breadth-first search: entering a switch is free, entering a rank costs a hop
            u = queue.popleft()
            for v in out.get(u, []):
                d = hops[u] + (1 if compute[v] else 0)
                if v not in hops or d < hops[v]:
                    hops[v] = d
                    if compute[v]:
                        queue.append(v)
                    else:
                        queue.appendleft(v)
        result[r] = max((hops.get(v, len(ranks)) for v in ranks), default=0)
    return result


@dataclass
class LowerResult:
    """Trees after :func:`lower_trees` (identical trees merged) and what the search did."""

    trees: list[Tree]
    reached: bool  # every tree within the target height (or at the radius)
    stats: dict[str, int] = field(default_factory=dict)


def _merge(trees: Sequence[Tree]) -> list[Tree]:
    """One tree per (root, arc set), multiplicities added; first occurrence order."""
    merged: dict[tuple, Tree] = {}
    for t in trees:
        key = (t.root, frozenset(t.arcs))
        if key in merged:
            old = merged[key]
            merged[key] = Tree(old.root, old.multiplicity + t.multiplicity, old.arcs)
        else:
            merged[key] = t
    return list(merged.values())


def _score(heights: Sequence[int]) -> tuple[int, int, int]:
    top = max(heights)
    return top, sum(1 for h in heights if h == top), sum(heights)


def lower_trees(n: int, caps: dict[tuple[int, int], int], trees: Sequence[Tree], *, target: int | None = None,
                budget: int = 20_000, max_trees: int | None = None, blockers: int = 2, retries: int = 3) -> LowerResult:
    """Rip up and regrow ``trees`` (a packing within ``caps``) until every tree is at most ``target`` high (default:
    as low as the search gets), spending at most about ``budget`` max-flows; never more than ``max_trees`` trees
    (default: twice as many as given, at least n more)."""
    trees = _merge(trees)
    if budget <= 0 or not trees:
        top = max((tree_height(t) for t in trees), default=0)
        return LowerResult(trees, target is None or top <= target, {"moves": 0, "tried": 0, "maxflows": 0})
    packer = Packer(n, caps, [0] * n)
    for t in trees:
        for a in t.arcs:
            packer.res[a] -= t.multiplicity
            if packer.res[a] < 0:
                raise ValueError(f"the trees use arc {a} beyond its capacity")
    floor = max(eccentricities(n, caps))
    goal = max(floor, target or 0)
    limit = max_trees if max_trees is not None else max(2 * len(trees), len(trees) + n)
    heights = [tree_height(t) for t in trees]
    stats = {"moves": 0, "tried": 0}
    start = packer.maxflows
    stale = 0
    cursor = 0
    level = 0  # escalation: more blockers given back after every tree of the top height failed
    while max(heights) > goal and packer.maxflows - start < budget:
        top = max(heights)
        deep = [i for i, h in enumerate(heights) if h == top]
        i = deep[cursor % len(deep)]
        cursor += 1
        stats["tried"] += 1
        saved = (dict(packer.res), list(packer.pool), packer.pool_total, list(trees), list(heights))
        new = _move(packer, trees, heights, i, top, blockers << level, retries)
        better = new is not None and len(new[0]) <= limit and _score(new[1]) < _score(heights)
        if better:
            trees, heights = new
            stats["moves"] += 1
            stale = level = 0
            continue
        packer.res, packer.pool, packer.pool_total = saved[0], saved[1], saved[2]
        trees, heights = saved[3], saved[4]
        stale += 1
        if stale >= len(deep):  # every tree of the largest height failed since the last improvement
            if (blockers << level) >= len(trees):
                break
            level += 1
            stale = 0
    stats["maxflows"] = packer.maxflows - start
    trees = _merge(trees)
    return LowerResult(trees, target is None or max(heights) <= target, stats)


def _move(packer: Packer, trees: list[Tree], heights: list[int], i: int, top: int, blockers: int,
          retries: int) -> tuple[list[Tree], list[int]] | None:
    """Regrow tree i within height top - 1 (giving back blockers if needed) and everything it displaced within
    height top; the new (trees, heights), or None (the caller restores the state).  ``heights``: the trees'."""
    tree = trees[i]
    trees = trees[:i] + trees[i + 1:]
    heights = heights[:i] + heights[i + 1:]
    packer.dissolve(tree)
    for _ in range(retries + 1):
        grown = packer.grow(tree.root, tree.multiplicity, max_height=top - 1)
        if grown is not None:
            break
        frontier = packer.last_frontier
        # a tree's arcs are distinct: how many lie in the frontier is the size of the intersection
        users = sorted(((len(frontier.intersection(t.arcs)) * t.multiplicity, -j) for j, t in enumerate(trees)),
                       reverse=True)
        drop = sorted((-j for score, j in users[:blockers] if score > 0), reverse=True)
        if not drop:
            return None
        for j in drop:
            packer.dissolve(trees.pop(j))
            heights.pop(j)
    else:
        return None
    out = [*trees, grown]
    # the remainder of a split tree and the blockers: every root's pool, round robin, within the old height
    while packer.pool_total > 0:
        for r in range(packer.n):
            if packer.pool[r] > 0:
                t = packer.grow(r, max_height=top)
                if t is None:
                    return None
                out.append(t)
    return out, [*heights, *(tree_height(t) for t in out[len(trees):])]
