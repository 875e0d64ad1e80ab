"""Symmetry reduction of the all-to-all flow problem.

Let G be the automorphism group of the fabric (node permutations that keep
node kinds and every arc's bandwidth).  The max-concurrent-flow LP is
G-invariant, so averaging any optimum over G gives an optimum with
``f[g(s)][g(e)] = f[s][e]``.  Pick one representative rank r per G-orbit of
ranks; its flow may further be taken invariant under the stabiliser G_r.  Then

* r's flow is constant on the G_r-orbits of arcs ("arc classes") and needs one
  conservation equation per G_r-orbit of nodes ("node classes");
* every other rank s = g(r) of r's orbit sends ``g(f[r])`` (any g with g(r) = s
  gives the same flow, by G_r-invariance), so one element per s (a
  *transversal*) rebuilds all flows;
* the load of arc e is ``sum_r |orbit(r)| / |O_e| * sum_{e' in O_e} f[r][e']``
  with O_e the G-orbit of e: one capacity row per G-orbit of arcs.

G comes from the topology's declared symmetries and bliss
(:func:`forestcoll.graph.symmetry.detect_automorphisms`); G_r from bliss again, with
r pinned by a marker arc whose bandwidth no real arc has.  Every generator is
checked to be an automorphism (and to fix r) before it is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from forestcoll.graph.symmetry import detect_automorphisms
from forestcoll.topology.model import Topology

Perm = tuple[int, ...]
BLISS_RANKS = 1024  # above this many ranks, a declared group that acts regularly on the ranks is used without bliss


@dataclass(frozen=True)
class SourceClass:
    """One G-orbit of ranks: its representative, members, transversal and the representative's classes."""

    rep: int  # node index of the representative rank
    members: tuple[int, ...]  # node indices of the orbit's ranks (rep first)
    transversal: np.ndarray  # (len(members), n): row i is a permutation g with g[rep] == members[i]
    arc_class: np.ndarray  # class of each arc (topology.arcs order) under the stabiliser of rep
    node_class: np.ndarray  # class of each node under the stabiliser of rep
    stabiliser_generators: int


@dataclass(frozen=True)
class Reduction:
    """The fabric as arrays plus the orbit structure the reduced LP is built from."""

    n: int
    tails: np.ndarray
    heads: np.ndarray
    caps: tuple[Fraction, ...]
    is_compute: np.ndarray
    arc_orbit: np.ndarray  # G-orbit id of every arc (smallest arc index in it)
    sources: tuple[SourceClass, ...]
    generators: int  # verified generators of G in use
    symmetric: bool  # whether symmetry was used
    method: str = "none"  # where G came from: "bliss" (with declared), "declared (regular on the ranks)", "none"

    @property
    def num_ranks(self) -> int:
        return int(self.is_compute.sum())


def _colour_of_caps(caps: Sequence[Fraction]) -> np.ndarray:
    colour: dict[Fraction, int] = {}
    return np.fromiter((colour.setdefault(c, len(colour)) for c in caps), dtype=np.int64, count=len(caps))


class ArcIndex:
    """Arc (tail, head) -> position, vectorised; the arcs at each node; images of arcs under node permutations."""

    def __init__(self, n: int, tails: np.ndarray, heads: np.ndarray) -> None:
        self.n = n
        keys = tails * n + heads
        self.order = np.argsort(keys, kind="stable")
        self.sorted = keys[self.order]
        self.tails, self.heads = tails, heads
        ends = np.concatenate([tails, heads])
        arcs = np.concatenate([np.arange(len(tails)), np.arange(len(heads))])
        by_node = np.argsort(ends, kind="stable")
        self._at = arcs[by_node]  # arcs touching each node (CSR)
        self._ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(ends, minlength=n), out=self._ptr[1:])

    def lookup(self, tails: np.ndarray, heads: np.ndarray) -> np.ndarray | None:
        """Positions of the arcs (tails[i], heads[i]), or None if one of them is not an arc."""
        keys = tails * self.n + heads
        if not len(keys):
            return np.zeros(0, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.sorted, keys), len(self.sorted) - 1)
        if not np.array_equal(self.sorted[pos], keys):
            return None
        return self.order[pos]

    def image(self, perm: np.ndarray) -> np.ndarray | None:
        """Position of (perm[tail], perm[head]) for every arc, or None if some image is not an arc."""
        return self.lookup(perm[self.tails], perm[self.heads])

    def touching(self, nodes: np.ndarray) -> np.ndarray:
        """Every arc with an end in ``nodes`` (once each)."""
        if not len(nodes):
            return np.zeros(0, dtype=np.int64)
        starts, stops = self._ptr[nodes], self._ptr[nodes + 1]
        idx = np.concatenate([np.arange(a, b) for a, b in zip(starts.tolist(), stops.tolist())])
        return np.unique(self._at[idx])


@dataclass(frozen=True)
class Generator:
    """A verified automorphism: the whole permutation, the nodes it moves and the arcs it moves (with images)."""

    perm: np.ndarray
    moved: np.ndarray
    arcs: np.ndarray
    arc_images: np.ndarray


def verified(perms: Sequence[Sequence[int]], arcs: ArcIndex, colour: np.ndarray, kinds: np.ndarray) -> list[Generator]:
    """The permutations that are automorphisms (kinds kept, every arc onto an arc of equal bandwidth); only the
    moved nodes and the arcs at them are examined, so sparse generators (a swap inside one box) are cheap."""
    good = []
    n = arcs.n
    for p in perms:
        perm = np.asarray(p, dtype=np.int64)
        if perm.shape != (n,):
            continue
        moved = np.flatnonzero(perm != np.arange(n))
        if not len(moved) or not np.array_equal(np.sort(perm[moved]), moved):
            continue  # the identity, or not a permutation
        if not np.array_equal(kinds[perm[moved]], kinds[moved]):
            continue
        at = arcs.touching(moved)
        img = arcs.lookup(perm[arcs.tails[at]], perm[arcs.heads[at]])
        if img is None or not np.array_equal(colour[img], colour[at]):
            continue
        good.append(Generator(perm, moved, at, img))
    return good


def _transversal(rep: int, gens: Sequence[Generator], n: int, size: int) -> tuple[list[int], np.ndarray]:
    """Breadth-first orbit of ``rep`` (``size`` members) with, for each member s, a group element g (a product
    of generators) with g[rep] = s; one numpy step per generator and level."""
    trans = np.empty((size, n), dtype=np.int64)
    trans[0] = np.arange(n)
    where = np.full(n, -1, dtype=np.int64)
    where[rep] = 0
    order = [rep]
    frontier = np.array([rep])
    while len(frontier):
        new = []
        for g in gens:
            imgs = g.perm[frontier]
            fresh = where[imgs] < 0
            for s, s2 in zip(frontier[fresh].tolist(), imgs[fresh].tolist()):
                if where[s2] >= 0:
                    continue
                where[s2] = len(order)
                trans[len(order)] = g.perm[trans[where[s]]]  # i -> g[t[i]]
                order.append(s2)
                new.append(s2)
        frontier = np.array(new, dtype=np.int64)
    return order, trans[: len(order)]


def _classes(m: int, pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Orbit id (smallest member) of each of ``m`` points joined by the (points, images) pairs."""
    from forestcoll.graph.igraph_import import import_igraph

    src = np.concatenate([a for a, _ in pairs]) if pairs else np.zeros(0, dtype=np.int64)
    dst = np.concatenate([b for _, b in pairs]) if pairs else np.zeros(0, dtype=np.int64)
    graph = import_igraph().Graph(n=m, edges=np.column_stack([src, dst]).tolist(), directed=False)
    member = np.asarray(graph.connected_components().membership, dtype=np.int64)
    smallest = np.full(member.max() + 1 if m else 0, m, dtype=np.int64)
    np.minimum.at(smallest, member, np.arange(m))
    return smallest[member]


def reduce_topology(topo: Topology, symmetry: bool = True) -> Reduction:
    """The orbit structure of ``topo`` (trivial when ``symmetry`` is False).

    Above :data:`BLISS_RANKS` ranks, when the topology's declared symmetries alone act regularly on the ranks
    (one orbit, and the transversal is the whole group), they are used as they are, with trivial stabilisers:
    bliss on a 4,096-rank fabric costs minutes and gigabytes, the declared group nothing."""
    n = len(topo.nodes)
    arcs = topo.arcs
    tails = np.array([u for u, _, _ in arcs], dtype=np.int64)
    heads = np.array([v for _, v, _ in arcs], dtype=np.int64)
    caps = tuple(bw for _, _, bw in arcs)
    kinds = np.array(topo.is_compute, dtype=bool)
    m = len(arcs)
    index = ArcIndex(n, tails, heads)
    colour = _colour_of_caps(caps)
    gens: list[Generator] = []
    if symmetry and int(kinds.sum()) > BLISS_RANKS and topo.symmetries:
        declared = verified(list(topo.symmetries), index, colour, kinds)
        regular = _regular(declared, kinds, n)
        if regular is not None:
            members, trans = regular
            return Reduction(n, tails, heads, caps, kinds, _classes(m, [(g.arcs, g.arc_images) for g in declared]),
                             (SourceClass(members[0], tuple(members), trans, np.arange(m), np.arange(n), 0),),
                             len(declared), True, "declared (regular on the ranks)")
    if symmetry:
        candidates = list(topo.symmetries) + list(detect_automorphisms(n, topo.is_compute, arcs))
        gens = verified(candidates, index, colour, kinds)
    arc_orbit = _classes(m, [(g.arcs, g.arc_images) for g in gens])
    node_orbit = _classes(n, [(g.moved, g.perm[g.moved]) for g in gens])
    ranks = [i for i in range(n) if kinds[i]]
    sources = []
    seen: set[int] = set()
    for r in ranks:
        if node_orbit[r] in seen:
            continue
        seen.add(int(node_orbit[r]))
        members, trans = _transversal(r, gens, n, int((node_orbit == node_orbit[r]).sum()))
        stab = _stabiliser(topo, r, index, colour, kinds) if gens else []
        arc_class = _classes(m, [(g.arcs, g.arc_images) for g in stab])
        node_class = _classes(n, [(g.moved, g.perm[g.moved]) for g in stab])
        sources.append(SourceClass(r, tuple(members), trans, arc_class, node_class, len(stab)))
    return Reduction(n, tails, heads, caps, kinds, arc_orbit, tuple(sources), len(gens), bool(gens),
                     "bliss" if gens else "none")


def _regular(gens: Sequence[Generator], kinds: np.ndarray, n: int) -> tuple[list[int], np.ndarray] | None:
    """(ranks, transversal) when the group the generators span has one orbit on the ranks and no more elements
    than ranks (the transversal, which holds the identity, is closed under every generator: it is the group)."""
    ranks = np.flatnonzero(kinds)
    if not gens:
        return None
    members, trans = _transversal(int(ranks[0]), gens, n, len(ranks))
    if len(members) != len(ranks):
        return None
    where = np.full(n, -1, dtype=np.int64)
    where[members] = np.arange(len(members))
    for g in gens:
        if not np.array_equal(g.perm[trans], trans[where[g.perm[members]]]):
            return None
    return members, trans


def _stabiliser(topo: Topology, r: int, index: ArcIndex, colour: np.ndarray, kinds: np.ndarray) -> list[Generator]:
    """Generators of the automorphisms that fix rank ``r``: bliss on the fabric plus a marker arc r -> extra node."""
    n = len(topo.nodes)
    arcs = list(topo.arcs)
    marker = sum((bw for _, _, bw in arcs), Fraction(1))  # larger than any arc: a bandwidth no arc has
    extra = arcs + [(r, n, marker)]
    found = detect_automorphisms(n + 1, list(topo.is_compute) + [False], extra)
    gens = [p[:n] for p in found if p[n] == n]
    good = verified(gens, index, colour, kinds)
    return [g for g in good if g.perm[r] == r]
