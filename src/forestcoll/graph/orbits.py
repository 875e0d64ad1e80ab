"""Orbits of the group that declared generators span, without importing numpy for small fabrics.

:func:`orbits` is all ``forestcoll bound`` of a built-in cluster needs from the symmetries, and numpy's import
(~0.08 s CPU) was most of that command's start-up: a fabric whose generators move few points in all is done in
plain Python (union-find), a larger one in numpy (label propagation).  Both give the same labels.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PYTHON_POINTS", "orbits"]

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
