"""Exact upper bounds on the all-to-all rate lambda (per ordered pair of ranks).

* Length functions (LP duality): for any lengths l >= 0 on the arcs,
  ``lambda* <= sum_e c_e l_e / sum_{s != t ranks} dist_l(s, t)``, because every
  unit of pair demand crosses at least dist_l(s, t) of length and the arcs
  offer sum_e c_e l_e in all.  Computed exactly: lengths are scaled to
  integers and Dijkstra runs on integers.  When l is constant on the arc
  orbits of a group G (checked by the caller), dist sums over a G-orbit of
  sources equal the representative's times the orbit size.
* Cuts: every node set S gives ``lambda* <= B+(S) / (|S n ranks| * |ranks \\ S|)``
  (the pairs from S to the rest must leave S).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np


def int_lengths(lengths: Sequence[Fraction]) -> tuple[list[int], int]:
    """Integers proportional to ``lengths`` and the common scale (lcm of the denominators)."""
    scale = 1
    for v in lengths:
        scale = math.lcm(scale, Fraction(v).denominator)
    return [int(Fraction(v) * scale) for v in lengths], scale


def distances(n: int, tails: Sequence[int], heads: Sequence[int], lengths: Sequence[int], source: int) -> list[float | int]:
    """Shortest-path distances (integers; inf where unreachable) from ``source`` with non-negative integer lengths."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for u, v, w in zip(tails, heads, lengths):
        out[u].append((v, w))
    inf = math.inf
    dist: list[float | int] = [inf] * n
    dist[source] = 0
    heap = [(0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v, w in out[u]:
            nd = d + w
            if nd < dist[v]:
                dist[v] = nd
                heapq.heappush(heap, (nd, v))
    return dist


def length_bound(n: int, tails: Sequence[int], heads: Sequence[int], caps: Sequence[Fraction], is_compute: Sequence[bool],
                 lengths: Sequence[Fraction], sources: Sequence[tuple[int, int]]) -> tuple[Fraction | None, list[list[float | int]]]:
    """The length-function bound on lambda and the (integer-scaled) distances from each source.

    ``sources`` lists (rank, weight): the distance sum counts each listed rank ``weight`` times (an orbit's size),
    so passing every rank with weight 1 makes no symmetry assumption.  None when every distance is 0."""
    ints, scale = int_lengths(lengths)
    numer = sum((c * l for c, l in zip(caps, lengths)), Fraction(0))
    total = 0
    dists = []
    for s, weight in sources:
        d = distances(n, tails, heads, ints, s)
        dists.append(d)
        part = 0
        for t in range(n):
            if is_compute[t] and t != s:
                if d[t] == math.inf:
                    return None, dists
                part += d[t]
        total += weight * part
    if total == 0:
        return None, dists
    return numer / Fraction(total, scale), dists


def cut_ratio(mask: np.ndarray, tails: np.ndarray, heads: np.ndarray, caps: Sequence[Fraction], is_compute: np.ndarray) -> Fraction | None:
    """B+(S) / (|S n ranks| |ranks \\ S|) for the node set ``mask`` (None when one side has no rank)."""
    inside = int((mask & is_compute).sum())
    outside = int((~mask & is_compute).sum())
    if inside == 0 or outside == 0:
        return None
    leaving = np.flatnonzero(mask[tails] & ~mask[heads])
    return sum((caps[e] for e in leaving.tolist()), Fraction(0)) / (inside * outside)


def sweep_cut(order: Sequence[int], tails: Sequence[int], heads: Sequence[int], caps: Sequence[Fraction],
              is_compute: Sequence[bool]) -> tuple[Fraction, int] | None:
    """The best cut among the prefixes of ``order`` (nodes added one by one, B+(S) kept up to date):
    (ratio, prefix length), or None when no prefix separates two ranks."""
    n = len(is_compute)
    scale = 1
    for c in caps:
        scale = math.lcm(scale, Fraction(c).denominator)
    icap = [int(Fraction(c) * scale) for c in caps]
    out: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    into: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for u, v, c in zip(tails, heads, icap):
        out[u].append((v, c))
        into[v].append((u, c))
    total = sum(1 for x in is_compute if x)
    inside = [False] * n
    leaving = 0
    ranks_in = 0
    best: tuple[Fraction, int] | None = None
    for size, v in enumerate(order[:-1], start=1):
        inside[v] = True
        leaving += sum(c for w, c in out[v] if not inside[w]) - sum(c for u, c in into[v] if inside[u] and u != v)
        ranks_in += bool(is_compute[v])
        if 0 < ranks_in < total:
            ratio = Fraction(leaving, scale * ranks_in * (total - ranks_in))
            if best is None or ratio < best[0]:
                best = (ratio, size)
    return best
