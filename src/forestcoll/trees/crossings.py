"""Fewer network hops in a row: swap parents between packed trees so no root-leaf chain crosses boxes more than it must.

A hop between boxes (GPU -> NIC -> network -> NIC -> GPU) costs far more latency
than a hop inside one (H100 dump: 18 us against 1.4 us through the NVSwitch), so
at small and middle sizes an allreduce ends with its trees whose chains cross
boxes most often: on H100 x 4 (rail) two 1-chunk trees crossed three times
(box 0 -> 1 -> 3 -> 2) where every other tree crossed at most twice.

A *swap* exchanges the parents of one node v between two trees A and B of the
same multiplicity: A's v hangs from B's parent of v and B's from A's.  Every arc
keeps the units the trees take of it, so link loads, the packing's capacities,
exact optimality and the certificate stay as they were; each tree stays a
spanning tree when neither new parent lies below v in its new tree.  The search
(:func:`fewer_crossings`) takes the trees with the most crossings on a chain and
swaps where both trees then have fewer, neither above the trees' largest height
in hops; it stops when no such tree can be helped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from forestcoll.trees.packing import Tree

__all__ = ["fewer_crossings"]


@dataclass
class _Shape:
    """A tree's parent links, children, hop depths and crossings from the root (``crossed[v]``: box crossings on
    the chain root -> v)."""

    root: int
    parent: dict[int, int]
    children: dict[int, list[int]]
    depth: dict[int, int]
    crossed: dict[int, int]


def _shape(root: int, parent: dict[int, int], crosses: Callable[[int, int], bool]) -> _Shape:
    """Depths and crossings of the tree given by ``parent`` (child -> parent), walking from the root."""
    children: dict[int, list[int]] = {}
    for v, p in parent.items():
        children.setdefault(p, []).append(v)
    for kids in children.values():
        kids.sort()
    depth, crossed = {root: 0}, {root: 0}
    stack = [root]
    while stack:
        u = stack.pop()
        for v in children.get(u, ()):
            depth[v] = depth[u] + 1
            crossed[v] = crossed[u] + crosses(u, v)
            stack.append(v)
    return _Shape(root, parent, children, depth, crossed)


def _below(shape: _Shape, v: int) -> list[int]:
    """v and every node under it."""
    out, stack = [v], [v]
    while stack:
        for c in shape.children.get(stack.pop(), ()):
            out.append(c)
            stack.append(c)
    return out


def _after(shape: _Shape, v: int, new_parent: int, under: Sequence[int], crosses: Callable[[int, int], bool],
           whole: bool) -> tuple[int, int]:
    """(most crossings, height) of ``shape`` once v hangs from ``new_parent`` (``under``: v's subtree, which must
    not hold new_parent): over v's subtree only, or over the whole tree with ``whole`` (the rest keeps its own)."""
    old = shape.parent[v]
    dc = shape.crossed[new_parent] + crosses(new_parent, v) - shape.crossed[old] - crosses(old, v)
    dd = shape.depth[new_parent] - shape.depth[old]
    most = max(shape.crossed[u] for u in under) + dc
    high = max(shape.depth[u] for u in under) + dd
    if whole:
        inside = set(under)
        most = max(most, max((c for u, c in shape.crossed.items() if u not in inside), default=0))
        high = max(high, max((d for u, d in shape.depth.items() if u not in inside), default=0))
    return most, high


def _arcs(shape: _Shape) -> tuple[tuple[int, int], ...]:
    """The tree's arcs parents first (breadth-first, children in node order)."""
    out, queue = [], [shape.root]
    for u in queue:
        for v in shape.children.get(u, ()):
            out.append((u, v))
            queue.append(v)
    return tuple(out)


def fewer_crossings(trees: Sequence[Tree], crosses: Callable[[int, int], bool], budget: int = 200_000,
                    ) -> tuple[list[Tree], int]:
    """(``trees`` with parents swapped so the most box crossings on any chain is as low as the swaps get, the number
    of swaps).  ``crosses(u, v)``: the arc u -> v joins two boxes.  Every arc keeps its units; no tree gets higher
    (in hops) than the highest tree given; trees nothing helps are returned as given (the same objects).  The search
    looks at most ``budget`` (tree, node, partner) candidates, so it stays bounded on large packings."""
    shapes = [_shape(t.root, {y: x for x, y in t.arcs}, crosses) for t in trees]
    most = [max(s.crossed.values()) for s in shapes]
    height = max((max(s.depth.values()) for s in shapes), default=0)
    by_mult: dict[int, list[int]] = {}
    for i, t in enumerate(trees):
        by_mult.setdefault(t.multiplicity, []).append(i)
    changed: set[int] = set()
    swaps = 0
    left = [budget]  # candidates still to look at
    while shapes and left[0] > 0:
        top = max(most)
        if top <= 1:
            break
        progress = False
        for a in [i for i, c in enumerate(most) if c == top]:
            if left[0] <= 0:
                break
            if most[a] < top:
                continue
            found = _swap_for(a, shapes, most, by_mult[trees[a].multiplicity], top, height, crosses, left)
            if found is None:
                continue
            b, v = found
            sa, sb = shapes[a], shapes[b]
            pa, pb = dict(sa.parent), dict(sb.parent)
            pa[v], pb[v] = sb.parent[v], sa.parent[v]
            shapes[a], shapes[b] = _shape(sa.root, pa, crosses), _shape(sb.root, pb, crosses)
            most[a], most[b] = max(shapes[a].crossed.values()), max(shapes[b].crossed.values())
            changed.update((a, b))
            swaps += 1
            progress = True
        if not progress:
            break
    out = [Tree(t.root, t.multiplicity, _arcs(shapes[i])) if i in changed else t for i, t in enumerate(trees)]
    return out, swaps


def _swap_for(a: int, shapes: Sequence[_Shape], most: Sequence[int], partners: Sequence[int], top: int, height: int,
              crosses: Callable[[int, int], bool], left: list[int]) -> tuple[int, int] | None:
    """(partner tree, node) of a swap after which tree ``a`` and the partner both cross fewer than ``top`` times on
    every chain and stay within ``height`` hops; None when there is none or ``left[0]`` (candidates still to look
    at, counted down here) runs out.  Nodes reached by a crossing, deepest crossings first; partners in order."""
    sa = shapes[a]
    common: set[int] | None = None  # the nodes with every node of ``top`` crossings below them: only they can help
    for u in (u for u, c in sa.crossed.items() if c == top):
        chain = set()
        while u != sa.root:
            chain.add(u)
            u = sa.parent[u]
        common = chain if common is None else common & chain
    nodes = sorted((v for v in common or () if crosses(sa.parent[v], v)), key=lambda v: (-sa.crossed[v], v))
    for v in nodes:
        under_a = _below(sa, v)
        inside_a = set(under_a)
        for b in partners:
            if b == a:
                continue
            left[0] -= 1
            if left[0] < 0:
                return None
            sb = shapes[b]
            q = sb.parent.get(v)
            p = sa.parent[v]
            if q is None or q == p or q in inside_a:
                continue
            if sa.crossed[q] + crosses(q, v) >= sa.crossed[p] + crosses(p, v):  # v's subtree would not cross less
                continue
            under_b = _below(sb, v)
            if p in set(under_b):
                continue
            # outside v's subtree nothing moves: a's crossings there are below top (v holds all of a's top nodes),
            # b's too unless b has top crossings itself; no height there exceeds the largest
            most_a, high_a = _after(sa, v, q, under_a, crosses, False)
            if most_a >= top or high_a > height:
                continue
            most_b, high_b = _after(sb, v, p, under_b, crosses, most[b] >= top)
            if most_b >= top or high_b > height:
                continue
            return b, v
    return None
