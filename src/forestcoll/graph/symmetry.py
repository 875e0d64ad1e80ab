"""Automorphisms of a fabric: closure of declared generators, orbits, and detection with bliss.

A permutation is a tuple ``p`` with ``p[i]`` the image of node ``i``.  Every
automorphism maps compute nodes to compute nodes and preserves each arc's
bandwidth, so max-flow values from a symmetric super-source to ``v`` and to
``p[v]`` are equal; algorithms therefore test one node per orbit.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import igraph
import numpy as np

__all__ = ["Perm", "detect_automorphisms", "element_orbits", "free_subgroup", "group_elements", "orbits"]

Perm = tuple[int, ...]


def orbits(n: int, generators: Sequence[Perm]) -> list[int]:
    """Orbit id of each of ``n`` points under the group the generators span (smallest member as id)."""
    if not generators:
        return list(range(n))
    src = np.tile(np.arange(n), len(generators))
    dst = np.concatenate([np.asarray(p, dtype=np.int64) for p in generators])
    moved = src != dst
    graph = igraph.Graph(n=n, edges=np.column_stack([src[moved], dst[moved]]).tolist(), directed=False)
    membership = graph.connected_components().membership
    smallest: dict[int, int] = {}
    for i, m in enumerate(membership):
        smallest.setdefault(m, i)
    return [smallest[m] for m in membership]


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
    graph = igraph.Graph(n=len(colours), edges=edges, directed=True)
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


def _moved(p: np.ndarray) -> np.ndarray:
    return np.flatnonzero(p != np.arange(len(p)))


def _semiregular_on(p: np.ndarray, points: np.ndarray) -> bool:
    """True when ``p`` moves every point of ``points`` in cycles of one common length (so <p> acts freely)."""
    length = np.ones(len(points), dtype=np.int64)
    cur = p[points]
    while True:
        done = cur == points
        if done.all():
            return bool(length[0] > 1) and bool((length == length[0]).all())
        if done.any() and not done.all():
            return False
        cur = p[cur]
        length += 1


def _product(perms: Sequence[np.ndarray], n: int) -> np.ndarray:
    out = np.arange(n, dtype=np.int64)
    for p in perms:
        out = p[out]  # apply out first, then p
    return out


def _free_elements(gens: Sequence[np.ndarray], n: int, compute: np.ndarray) -> np.ndarray | None:
    """All elements of <gens> as rows (identity first) when the group acts freely on ``compute``, else None."""
    elems = group_elements([tuple(g.tolist()) for g in gens], n, len(compute))
    if elems is None:
        return None
    arr = np.asarray(elems, dtype=np.int64)
    if (arr[1:][:, compute] == compute).any():
        return None
    return arr


def _spread(c: np.ndarray, elems: np.ndarray) -> np.ndarray | None:
    """The product of the distinct conjugates h c h^-1 (h in the group ``elems``) when their supports are disjoint
    (then the product commutes with every h), else None."""
    n = len(c)
    seen: set[bytes] = set()
    used = np.zeros(n, dtype=bool)
    out = np.arange(n, dtype=np.int64)
    for h in elems:
        inv = np.empty(n, dtype=np.int64)
        inv[h] = np.arange(n)
        conj = h[c[inv]]
        key = conj.tobytes()
        if key in seen:
            continue
        seen.add(key)
        moved = _moved(conj)
        if used[moved].any():
            return None
        used[moved] = True
        out[moved] = conj[moved]
    return out


def free_subgroup(n: int, is_compute: Sequence[bool], generators: Sequence[Perm], max_tries: int = 400) -> list[Perm]:
    """Generators of a subgroup H of <generators> that acts freely on the compute nodes, as large as the
    heuristic finds (the splitter and the symmetric packer need a free action; bliss returns the whole group,
    e.g. every transposition of identical GPUs).

    Candidates: the product of each class of generators (same number of moved points, connected supports) --
    a product of transpositions along a tree is one long cycle -- then each candidate spread over H (the
    product of its conjugates, when disjoint) and products of two candidates.  A candidate is kept when the
    group it spans with H still acts freely and is larger; H is checked element by element, so whatever is
    returned is correct even when the heuristic misses a larger H.
    """
    compute = np.flatnonzero(np.asarray(is_compute, dtype=bool))
    if not generators or len(compute) < 2:
        return []
    gens = [np.asarray(g, dtype=np.int64) for g in generators]
    # classes: equal support size, connected supports (union-find on points)
    by_size: dict[int, list[np.ndarray]] = {}
    for g in gens:
        by_size.setdefault(len(_moved(g)), []).append(g)
    cands: list[np.ndarray] = []
    for size in sorted(by_size, reverse=True):
        group = by_size[size]
        parent = list(range(len(group)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        owner: dict[int, int] = {}
        for i, g in enumerate(group):
            for pt in _moved(g).tolist():
                if pt in owner:
                    parent[find(i)] = find(owner[pt])
                else:
                    owner[pt] = i
        comps: dict[int, list[np.ndarray]] = {}
        for i, g in enumerate(group):
            comps.setdefault(find(i), []).append(g)
        for members in comps.values():
            cands.append(_product(members, n))
            cands.extend(members)
    if len(gens) <= 16:  # small groups (rings, tori, cubes): rotations are products of reflections
        cands.append(_product(gens, n))
        for i, a in enumerate(gens):
            for b in gens[i + 1:]:
                cands.append(_product([a, b], n))
                inv = np.empty(n, dtype=np.int64)
                inv[b] = np.arange(n)
                cands.append(b[a[inv]])
    chosen: list[np.ndarray] = []
    elems = np.arange(n, dtype=np.int64)[None, :]
    tries = 0
    rejected: list[np.ndarray] = []
    for c in cands:
        if len(elems) >= len(compute):
            break
        options = [c]
        spread = _spread(c, elems)
        if spread is not None:
            options.insert(0, spread)
        options += [_product([c, r], n) for r in rejected[-8:]]
        if spread is not None:
            options += [_product([spread, s], n) for r in rejected[-8:] if (s := _spread(r, elems)) is not None]
        kept = False
        for o in options:
            if tries >= max_tries:
                break
            if not np.isin(_moved(o), compute).any():
                continue
            tries += 1
            bigger = _free_elements(chosen + [o], n, compute)
            if bigger is not None and len(bigger) > len(elems):
                chosen.append(o)
                elems = bigger
                kept = True
                break
        if not kept:
            rejected.append(c)
    return [tuple(int(x) for x in g) for g in chosen]
