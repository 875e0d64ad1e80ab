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
(:func:`forestcoll.symmetry.detect_automorphisms`); G_r from bliss again, with
r pinned by a marker arc whose bandwidth no real arc has.  Every generator is
checked to be an automorphism (and to fix r) before it is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from forestcoll.symmetry import detect_automorphisms, orbits
from forestcoll.topology.model import Topology

Perm = tuple[int, ...]


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

    @property
    def num_ranks(self) -> int:
        return int(self.is_compute.sum())


def _colour_of_caps(caps: Sequence[Fraction]) -> np.ndarray:
    colour: dict[Fraction, int] = {}
    return np.fromiter((colour.setdefault(c, len(colour)) for c in caps), dtype=np.int64, count=len(caps))


class ArcIndex:
    """Arc (tail, head) -> position, vectorised; and the image of every arc under a node permutation."""

    def __init__(self, n: int, tails: np.ndarray, heads: np.ndarray) -> None:
        self.n = n
        keys = tails * n + heads
        self.order = np.argsort(keys, kind="stable")
        self.sorted = keys[self.order]
        self.tails, self.heads = tails, heads

    def image(self, perm: np.ndarray) -> np.ndarray | None:
        """Position of (perm[tail], perm[head]) for every arc, or None if some image is not an arc."""
        keys = perm[self.tails] * self.n + perm[self.heads]
        pos = np.searchsorted(self.sorted, keys)
        pos = np.minimum(pos, len(self.sorted) - 1)
        if not np.array_equal(self.sorted[pos], keys):
            return None
        return self.order[pos]


def verified(perms: Sequence[Sequence[int]], arcs: ArcIndex, colour: np.ndarray, kinds: np.ndarray) -> list[np.ndarray]:
    """The permutations that are automorphisms (kinds kept, every arc onto an arc of equal bandwidth)."""
    good = []
    n = arcs.n
    for p in perms:
        perm = np.asarray(p, dtype=np.int64)
        if perm.shape != (n,) or not np.array_equal(np.sort(perm), np.arange(n)):
            continue
        if not np.array_equal(kinds[perm], kinds):
            continue
        img = arcs.image(perm)
        if img is None or not np.array_equal(colour[img], colour):
            continue
        if not np.array_equal(perm, np.arange(n)):
            good.append(perm)
    return good


def _transversal(rep: int, gens: Sequence[np.ndarray], n: int) -> tuple[list[int], np.ndarray]:
    """Breadth-first orbit of ``rep`` with, for each member s, a group element g (product of generators) with g[rep] = s."""
    found = {rep: np.arange(n, dtype=np.int64)}
    order = [rep]
    frontier = [rep]
    while frontier:
        nxt = []
        for s in frontier:
            t = found[s]
            for g in gens:
                s2 = int(g[s])
                if s2 not in found:
                    found[s2] = g[t]  # i -> g[t[i]]
                    order.append(s2)
                    nxt.append(s2)
        frontier = nxt
    return order, np.stack([found[s] for s in order])


def _classes(m: int, images: Sequence[np.ndarray]) -> np.ndarray:
    """Orbit id (smallest member) of each of ``m`` points under the permutations ``images``."""
    return np.asarray(orbits(m, list(images)), dtype=np.int64)  # type: ignore[arg-type]


def reduce_topology(topo: Topology, symmetry: bool = True) -> Reduction:
    """The orbit structure of ``topo`` (trivial when ``symmetry`` is False)."""
    n = len(topo.nodes)
    arcs = topo.arcs
    tails = np.array([u for u, _, _ in arcs], dtype=np.int64)
    heads = np.array([v for _, v, _ in arcs], dtype=np.int64)
    caps = tuple(bw for _, _, bw in arcs)
    kinds = np.array(topo.is_compute, dtype=bool)
    m = len(arcs)
    index = ArcIndex(n, tails, heads)
    colour = _colour_of_caps(caps)
    gens: list[np.ndarray] = []
    if symmetry:
        candidates = list(topo.symmetries) + list(detect_automorphisms(n, topo.is_compute, arcs))
        gens = verified(candidates, index, colour, kinds)
    arc_images = [index.image(g) for g in gens]
    arc_orbit = _classes(m, arc_images)  # type: ignore[arg-type]
    node_orbit = _classes(n, gens)
    ranks = [i for i in range(n) if kinds[i]]
    sources = []
    seen: set[int] = set()
    for r in ranks:
        if node_orbit[r] in seen:
            continue
        seen.add(int(node_orbit[r]))
        members, trans = _transversal(r, gens, n)
        stab = _stabiliser(topo, r, index, colour, kinds) if gens else []
        arc_class = _classes(m, [index.image(g) for g in stab])  # type: ignore[misc]
        node_class = _classes(n, stab)
        sources.append(SourceClass(r, tuple(members), trans, arc_class, node_class, len(stab)))
    return Reduction(n, tails, heads, caps, kinds, arc_orbit, tuple(sources), len(gens), bool(gens))


def _stabiliser(topo: Topology, r: int, index: ArcIndex, colour: np.ndarray, kinds: np.ndarray) -> list[np.ndarray]:
    """Generators of the automorphisms that fix rank ``r``: bliss on the fabric plus a marker arc r -> extra node."""
    n = len(topo.nodes)
    arcs = list(topo.arcs)
    marker = sum((bw for _, _, bw in arcs), Fraction(1))  # larger than any arc: a bandwidth no arc has
    extra = arcs + [(r, n, marker)]
    found = detect_automorphisms(n + 1, list(topo.is_compute) + [False], extra)
    gens = [p[:n] for p in found if p[n] == n]
    good = verified(gens, index, colour, kinds)
    return [g for g in good if g[r] == r]
