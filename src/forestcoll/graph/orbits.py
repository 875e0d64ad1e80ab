"""Orbits of the group that declared generators span, without importing numpy for small fabrics.

:func:`orbits` is all ``forestcoll bound`` of a built-in cluster needs from the symmetries, and numpy's import
(~0.08 s CPU) was most of that command's start-up: a fabric whose generators move few points in all is done in
plain Python (union-find), a larger one in numpy (label propagation).  Both give the same labels.  Where the
declared generators leave several rank orbits (mi250's GCD positions), ``bound`` also needs
:func:`colour_refinement` and :func:`orbit_cycles` (plain Python too), and bliss only when refinement does not
settle the orbits (:func:`forestcoll.bound.automorphisms.automorphism_orbits`).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

__all__ = ["PYTHON_POINTS", "Perm", "colour_refinement", "orbit_cycles", "orbits"]

Perm = tuple[int, ...]  # p[i] is the image of node i

PYTHON_POINTS = 4096  # points x generators at most done in plain Python (<= ~0.5 ms there; numpy above)


def orbits(n: int, generators: Sequence[Sequence[int]]) -> list[int]:
    """Orbit id of each of ``n`` points under the group the generators span (smallest member as id).

    The orbits are the connected components of the graph with an edge i - p(i) for every generator p and every
    point it moves.  Up to :data:`PYTHON_POINTS` points x generators: union-find in which a union keeps the
    smaller root, so every root is its set's smallest member.  Above: :func:`_orbits_numpy`."""
    if len(generators) == 0:
        return list(range(n))
    if n * len(generators) > PYTHON_POINTS:
        return _orbits_numpy(n, generators)
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = x = parent[parent[x]]  # path halving: roots never change
        return x

    for perm in generators:
        if len(perm) != n:
            raise ValueError(f"a generator of {len(perm)} points, expected {n}")
        for i, j in enumerate(map(int, perm)):  # ints: a generator may be a numpy row
            if i != j:
                a, b = root(i), root(j)
                if a < b:
                    parent[b] = a
                elif b < a:
                    parent[a] = b
    return [root(i) for i in range(n)]


def _orbits_numpy(n: int, generators: Sequence[Sequence[int]]) -> list[int]:
    """:func:`orbits` by label propagation in numpy.  Labels start as the points themselves; each round every edge
    lowers the labels of its ends and of their labels to the smaller label of the two, then labels jump to their
    label's label until stable.  Every label stays a member of the point's orbit and no larger than the point; at
    the fixpoint the labels are constant on orbits, so each is its orbit's smallest member.  One round costs the
    points moved in all, not n per generator."""
    import numpy as np

    gens = np.asarray(generators, dtype=np.int64).reshape(len(generators), n)
    which, src = np.nonzero(gens != np.arange(n, dtype=np.int64))
    dst = gens[which, src]
    label = np.arange(n, dtype=np.int64)
    while True:
        a, b = label[src], label[dst]
        low = np.minimum(a, b)
        new = label.copy()
        for ends in (src, dst, a, b):
            np.minimum.at(new, ends, low)
        while True:
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, label):
            return label.tolist()
        label = new


def colour_refinement(n: int, is_compute: Sequence[bool], arcs: Sequence[tuple[int, int, Fraction]]) -> list[int]:
    """The coarsest equitable partition refining the node kinds (1-dimensional Weisfeiler-Leman): a class id per
    node.  Nodes are split, until nothing splits, by their class and the multisets of (bandwidth, class) over
    their out-arcs and over their in-arcs.  Every automorphism maps each node into its own class, so each orbit
    lies inside one class; when the classes are exactly the orbits of known automorphisms, those orbits are the
    whole group's (no search needed)."""
    out: list[list[tuple[Fraction, int]]] = [[] for _ in range(n)]
    into: list[list[tuple[Fraction, int]]] = [[] for _ in range(n)]
    for u, v, bw in arcs:
        out[u].append((bw, v))
        into[v].append((bw, u))
    colour = [0 if c else 1 for c in is_compute]
    count = len(set(colour))
    while True:
        sigs = [(colour[i], tuple(sorted((bw, colour[v]) for bw, v in out[i])),
                 tuple(sorted((bw, colour[u]) for bw, u in into[i]))) for i in range(n)]
        ids: dict[tuple, int] = {}
        new = [ids.setdefault(sig, len(ids)) for sig in sigs]
        if len(ids) == count:
            return new
        colour, count = new, len(ids)


def orbit_cycles(orbit: Sequence[int]) -> Perm:
    """A permutation whose cycles are the given orbits (each orbit's members in increasing order, one cycle):
    joined with other generators it spans the same orbits as the group the labelling came from."""
    members: dict[int, list[int]] = {}
    for i, label in enumerate(map(int, orbit)):  # ints: a labelling may be a numpy row
        members.setdefault(label, []).append(i)  # increasing within each orbit
    perm = list(range(len(orbit)))
    for cycle in members.values():
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            perm[a] = b
    return tuple(perm)
