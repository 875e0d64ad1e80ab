"""Automorphisms of a fabric: closure of declared generators, orbits, and detection with bliss.

A permutation is a tuple ``p`` with ``p[i]`` the image of node ``i``.  Every
automorphism maps compute nodes to compute nodes and preserves each arc's
bandwidth, so max-flow values from a symmetric super-source to ``v`` and to
``p[v]`` are equal; algorithms therefore test one node per orbit.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from forestcoll.graph.igraph_import import import_igraph

__all__ = ["Perm", "detect_automorphisms", "element_orbits", "group_elements", "orbits"]

Perm = tuple[int, ...]


def orbits(n: int, generators: Sequence[Perm]) -> list[int]:
    """Orbit id of each of ``n`` points under the group the generators span (smallest member as id).

    Labels start as the points themselves and take, until nothing changes, the smaller of a point's and its
    images' labels, with pointer jumping (label of the label); every label stays a member of the point's orbit
    and the fixpoint is constant on orbits, so it is each orbit's smallest member (numpy only: no igraph)."""
    if not generators:
        return list(range(n))
    gens = [np.asarray(p, dtype=np.int64) for p in generators]
    label = np.arange(n, dtype=np.int64)
    while True:
        new = label.copy()
        for p in gens:
            new[p] = np.minimum(new[p], new)  # an image takes its preimage's label when smaller
            new = np.minimum(new, new[p])  # and a point its image's
        new = new[new]
        if np.array_equal(new, label):
            return label.tolist()
        label = new


def group_elements(generators: Sequence[Perm], n: int, limit: int) -> list[Perm] | None:
    """All elements of the generated group (identity first), or None when there are more than ``limit``."""
    import numpy as np

    identity = np.arange(n, dtype=np.int64)
    gens = [np.asarray(g, dtype=np.int64) for g in generators]
    seen = {identity.tobytes()}
    order = [identity]
    frontier = [identity]
    while frontier:
        nxt = []
        for g in frontier:
            for s in gens:
                h = s[g]  # i -> s[g[i]]
                key = h.tobytes()
                if key not in seen:
                    seen.add(key)
                    order.append(h)
                    nxt.append(h)
                    if len(order) > limit:
                        return None
        frontier = nxt
    return [tuple(int(x) for x in g) for g in order]


def element_orbits(elements: Sequence[Perm]) -> list[int]:
    """Orbit id (smallest member) of each point, given *all* elements of a group."""
    import numpy as np

    return np.asarray(elements, dtype=np.int64).min(axis=0).tolist()


def detect_automorphisms(
    n: int, is_compute: Sequence[bool], arcs: Sequence[tuple[int, int, Fraction]]
) -> list[Perm]:
    """Generators of the automorphism group found with bliss (via igraph).

    Arcs are subdivided by a vertex coloured by the arc's bandwidth, so the
    automorphisms found preserve bandwidths; each is re-checked before use.
    """
    bw_colour: dict[Fraction, int] = {}
    colours = [0 if c else 1 for c in is_compute]
    edges = []
    arc_colour = []
    for u, v, bw in arcs:
        mid = len(colours)
        colour = bw_colour.setdefault(bw, len(bw_colour))
        arc_colour.append(colour)
        colours.append(2 + colour)
        edges.append((u, mid))
        edges.append((mid, v))
    graph = import_igraph().Graph(n=len(colours), edges=edges, directed=True)
    tails = np.array([u for u, _, _ in arcs], dtype=np.int64)
    heads = np.array([v for _, v, _ in arcs], dtype=np.int64)
    ncol = max(len(bw_colour), 1)
    col = np.array(arc_colour, dtype=np.int64)
    keys = np.sort((tails * n + heads) * ncol + col)
    kind = np.array(is_compute, dtype=bool)
    result = []
    for gen in graph.automorphism_group(sh="fl", color=colours):
        perm = np.asarray(gen[:n], dtype=np.int64)
        if np.array_equal(perm, np.arange(n)) or not np.array_equal(kind[perm], kind):
            continue
        mapped = np.sort((perm[tails] * n + perm[heads]) * ncol + col)
        if np.array_equal(mapped, keys):
            result.append(tuple(int(i) for i in perm))
    return result
