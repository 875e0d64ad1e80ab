"""Packing spanning out-trees with multiplicities on a switch-free graph (Edmonds, constructively).

Input: nodes ``0..N-1``, integer arc capacities ``c``, and a demand ``R[r]`` of
trees rooted at each node.  Edmonds' branching theorem: the trees exist iff
every non-empty set X has in-capacity >= sum of R[r] over roots r outside X.

Trees are built one at a time (Lovász's constructive proof, with
multiplicities).  The roots' unbuilt trees form a *pool*; the tree being grown
has vertex set V, multiplicity C and already holds C units on each of its arcs.
The invariant is

    rho_res(X) >= sum_{r not in X} pool[r] + C*[V and X disjoint]    for every X.

Adding arc x->y (x in V, y not in V) with multiplicity c keeps it iff c is at
most the slack of every X that contains y and meets V but not x.  One max-flow
gives that bound: from a node z with arcs z->x (unbounded) and z->r (pool[r])
to y in the residual graph; the answer is min(C, res(x,y), flow - sum(pool)).
When c < C, the remainder C-c goes back to the pool and its units are released
on the tree's arcs, which keeps the invariant (every set that the partial tree
enters is entered at least once).

Each tree grows breadth-first from its root (so trees stay shallow), first
taking only arcs that admit its whole multiplicity (so trees rarely split);
only when none does is the arc admitting the largest part taken.

References: J. Edmonds, "Edge-disjoint branchings", Combinatorial Algorithms,
1973; L. Lovász, "On two minimax theorems in graph", J. Combin. Theory B 21,
1976 (the constructive proof); ForestColl (arXiv 2402.06787), tree packing.  The symmetric packing, one base tree
per orbit of a group of automorphisms, is :mod:`forestcoll.trees.symmetric`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from forestcoll.graph.maxflow import FlowNetwork, check_capacities
from forestcoll.progress import Progress, report

__all__ = ["PackResult", "Packer", "PackingError", "Tree", "pack_trees"]


class PackingError(RuntimeError):
    """Internal: Edmonds' condition failed although the input satisfied it (a bug)."""


@dataclass(frozen=True)
class Tree:
    """An out-tree on nodes 0..N-1: ``arcs`` are (parent, child) pairs, parents first."""

    root: int
    multiplicity: int
    arcs: tuple[tuple[int, int], ...]


@dataclass
class PackResult:
    trees: list[Tree]
    stats: dict[str, int] = field(default_factory=dict)


class Packer:
    """Tree-by-tree arborescence packing with exact single-max-flow arc tests."""

    def __init__(self, n: int, caps: dict[tuple[int, int], int], demand: Sequence[int], accept: int = 1) -> None:
        self.n = n
        self.accept = accept  # breadth-first growth takes an arc admitting >= 1/accept of the multiplicity
        self.res: dict[tuple[int, int], int] = {a: c for a, c in caps.items() if c > 0}
        self.out: list[list[int]] = [[] for _ in range(n)]
        for a, b in sorted(self.res):
            self.out[a].append(b)
        self.pool = list(demand)
        self.pool_total = sum(demand)
        self.big = sum(self.res.values()) + self.pool_total + 1
        check_capacities(list(self.res.values()) + [self.big])
        self.maxflows = 0
        self.net: FlowNetwork | None = None
        self.arc_slots: dict[tuple[int, int], int] = {}
        self.capvec = np.zeros(0, dtype=np.int64)
        self.last_frontier: set[tuple[int, int]] = set()  # arcs leaving the shallow part of the last tree refused

    # ----- the flow network of the current tree ------------------------------------------
    def _rebuild(self) -> None:
        """Network: every arc that can have residual (the keys of ``res``: trees only use arcs of ``caps``), then
        z->v for every v (z = node n).  Built once; each tree refreshes the capacities (an arc at 0 carries
        nothing, so the flow values are those of the residual network)."""
        if self.net is None:
            self.arc_slots = {a: i for i, a in enumerate(sorted(self.res))}
            tails = [a for a, _ in self.arc_slots] + [self.n] * self.n  # z = n
            self.net = FlowNetwork(self.n + 1, tails, [b for _, b in self.arc_slots] + list(range(self.n)))
        # int64 array: each max-flow takes it as is (a list was converted on every call, ~40% of a small flow)
        self.capvec = np.array([*map(self.res.__getitem__, self.arc_slots), *self.pool], dtype=np.int64)

    def _use(self, x: int, y: int, amount: int) -> None:
        self.res[(x, y)] -= amount
        slot = self.arc_slots.get((x, y))
        if slot is not None:
            self.capvec[slot] = self.res[(x, y)]

    def _set_pool(self, r: int, value: int) -> None:
        self.pool_total += value - self.pool[r]
        self.pool[r] = value
        self.capvec[len(self.arc_slots) + r] = value

    def admissible(self, x: int, y: int, mult: int) -> int:
        """Largest c <= mult with which arc x->y may join the tree being grown (0 if none).  The flow is at least
        res(x, y) + pool[y] (paths z->x->y, z->y): when that covers the pool and c = min(mult, res(x, y)), the
        answer is c without a max-flow.  ``maxflows`` counts every test (the lowering's budget is in tests)."""
        r = self.res.get((x, y), 0)
        c = min(mult, r)
        if c <= 0:
            return 0
        self.maxflows += 1
        if r + self.pool[y] >= self.pool_total + c:
            return c
        assert self.net is not None
        slot = len(self.arc_slots) + x
        saved = self.capvec[slot]
        self.capvec[slot] = self.big
        flow = self.net.value(self.capvec, self.n, y)
        self.capvec[slot] = saved
        return max(0, min(c, flow - self.pool_total))

    # ----- growing one tree ---------------------------------------------------------------
    def grow(self, root: int, mult: int | None = None, max_height: int | None = None) -> Tree | None:
        """Take ``mult`` (default: all) of ``root``'s pool as one tree and grow it to span every node.

        Breadth-first: arcs out of the shallowest nodes first, first only arcs that admit the whole
        multiplicity.  With ``max_height`` no node goes deeper than that (partial arcs are then taken
        from the shallowest parent); when no admissible arc keeps the height, the tree is rewound to
        the pool and None is returned (the state is as before the call)."""
        self._rebuild()
        if mult is None:
            mult = self.pool[root]
        if not 0 < mult <= self.pool[root]:
            raise ValueError(f"root {root} has {self.pool[root]} units in the pool, not {mult}")
        self._set_pool(root, self.pool[root] - mult)
        in_tree = [False] * self.n
        in_tree[root] = True
        depth = {root: 0}
        order = [root]
        arcs: list[tuple[int, int]] = []
        cap = self.n if max_height is None else max_height

        def attach(x: int, y: int, c: int) -> None:
            nonlocal mult
            if c < mult:
                extra = mult - c
                for a, b in arcs:
                    self._use(a, b, -extra)
                self._set_pool(root, self.pool[root] + extra)
                mult = c
            self._use(x, y, mult)
            arcs.append((x, y))
            in_tree[y] = True
            depth[y] = depth[x] + 1
            order.append(y)

        while len(order) < self.n:
            # pass 1, breadth-first: arcs that keep the whole multiplicity
            added = False
            partial: dict[tuple[int, int], int] = {}
            i = 0
            while i < len(order) and len(order) < self.n:
                x = order[i]
                i += 1
                if depth[x] >= cap:
                    continue
                for y in self.out[x]:
                    if in_tree[y] or self.res[(x, y)] * self.accept < mult:
                        continue
                    c = self.admissible(x, y, mult)
                    if c * self.accept >= mult:
                        attach(x, y, c)
                        added = True
                    elif c > 0:
                        partial[(x, y)] = c
            if added:
                continue
            # pass 2: nothing takes all of it.  Nothing changed since the pass-1 tests, so their answers
            # still hold.  Unlimited: the arc that admits the largest part; limited: the shallowest parent.
            def rank(x: int, c: int) -> tuple[int, int]:
                return (c, 0) if max_height is None else (-depth[x], c)

            best = max(partial.items(), key=lambda item: (rank(item[0][0], item[1]), -item[0][0], -item[0][1]),
                       default=None)
            for x in order:
                if depth[x] >= cap:
                    continue
                for y in self.out[x]:
                    if in_tree[y] or (x, y) in partial:
                        continue
                    if best is not None and rank(x, self.res[(x, y)]) <= rank(best[0][0], best[1]):
                        continue
                    c = self.admissible(x, y, mult)
                    if c > 0 and (best is None or rank(x, c) > rank(best[0][0], best[1])):
                        best = ((x, y), c)
            if best is None:
                if max_height is None:
                    raise PackingError(f"the tree of root {root} cannot be extended")
                self.last_frontier = {(x, y) for x in order if depth[x] < cap for y in self.out[x] if not in_tree[y]}
                for a, b in arcs:
                    self._use(a, b, -mult)
                self._set_pool(root, self.pool[root] + mult)
                return None
            (x, y), c = best
            attach(x, y, c)
        return Tree(root, mult, tuple(arcs))

    def dissolve(self, tree: Tree) -> None:
        """Give a complete tree back: its units return to its root's pool and to its arcs.  The invariant
        survives (the tree enters every set without its root at least once)."""
        for a in tree.arcs:
            self.res[a] = self.res.get(a, 0) + tree.multiplicity
        self.pool[tree.root] += tree.multiplicity
        self.pool_total += tree.multiplicity

    def run(self, progress: Progress | None = None, stage: str = "packing trees") -> PackResult:
        """Every root's demand as trees; ``progress`` hears ``stage``: demand placed out of the total."""
        roots = [r for r in range(self.n) if self.pool[r] > 0]
        trees: list[Tree] = []
        total = self.pool_total
        # round-robin over roots so no root is left with only the scraps
        while self.pool_total > 0:
            for r in roots:
                if self.pool[r] > 0:
                    report(progress, stage, total - self.pool_total, total)
                    tree = self.grow(r)
                    assert tree is not None
                    trees.append(tree)
        report(progress, stage, total, total)
        return PackResult(trees, {"maxflows": self.maxflows})


def pack_trees(n: int, caps: dict[tuple[int, int], int], demand: Sequence[int], accept: int = 1,
               progress: Progress | None = None) -> PackResult:
    """Pack demand[r] spanning out-trees rooted at each r within ``caps`` (see module docstring)."""
    return Packer(n, caps, demand, accept).run(progress)
