"""Schedules with exactly k trees per unit of root weight: the best time scale, and the smallest exact k.

With ``k`` trees per unit weight each tree moves M/(D*k) bytes; with time
``U*M/(D*k)`` link ``a`` may carry ``floor(U*b_a)`` trees, so the best
k-tree schedule has the smallest U whose floors keep the cut condition with
demand ``k*w`` (:func:`min_scale_for_k`: start at k/x*; for each failing cut
jump exactly to the smallest U at which its floor sum reaches its demand; a
search over the cut's breakpoints j/b_a), and algbw ``D*k/U``.  The optimum
``U = k/x*`` is reached exactly when those floors keep the condition
(:func:`smallest_optimal_k`: the lcm of the denominators of b/x* always works;
smaller k are screened first against every cut that refused an earlier k).
:func:`fixed_k_algbw` is the resulting bound for a whole collective.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

from forestcoll import collectives
from forestcoll.bound.optimal import prepare_phase, root_weights
from forestcoll.errors import UsageError
from forestcoll.rational import lcm_of_denominators
from forestcoll.topology.model import Topology

if TYPE_CHECKING:  # annotations only: the max-flow stack (numpy, ortools) loads with the oracle that is passed
    from forestcoll.bound.oracle import Oracle

__all__ = ["fixed_k_algbw", "floor_caps", "min_scale_for_k", "next_breakpoint", "smallest_optimal_k"]


def floor_caps(oracle: Oracle, scale: Fraction) -> list[int]:
    """floor(U * b_a) for every arc, exactly."""
    return [math.floor(scale * bw) for _, _, bw in oracle.topo.arcs]


def next_breakpoint(oracle: Oracle, scale: Fraction) -> Fraction:
    """The smallest U > scale at which some floor(U * b_a) grows."""
    return min(Fraction(math.floor(scale * bw) + 1) / bw for _, _, bw in oracle.topo.arcs)


def _min_scale_for_cut(oracle: Oracle, mask: Sequence[bool], demand: int, lower: Fraction) -> Fraction:
    """Smallest U >= lower with sum over arcs leaving ``mask`` of floor(U*b) >= demand."""
    bws = [bw for u, v, bw in oracle.topo.arcs if mask[u] and not mask[v]]
    total = sum(bws, Fraction(0))
    lo = max(lower, Fraction(demand) / total)
    hi = Fraction(demand + len(bws)) / total
    points = sorted({Fraction(j) / bw for bw in bws for j in range(math.ceil(lo * bw), math.floor(hi * bw) + 1)} | {lo})
    values = [sum(math.floor(u * bw) for bw in bws) for u in points]
    pos = bisect.bisect_left(values, demand)
    assert pos < len(points), "the cut's floor sum must reach the demand by its upper bound"
    return points[pos]


def min_scale_for_k(oracle: Oracle, k: int, rate: Fraction, start: Fraction | None = None) -> Fraction:
    """Smallest U (>= start) such that floor(U*b) capacities carry k trees per unit weight (exact)."""
    if k < 1:
        raise UsageError(f"k must be >= 1, got {k}")
    scale = Fraction(k) / rate if start is None else max(start, Fraction(k) / rate)
    root_caps = [k * oracle.weights[r] for r in oracle.roots]
    need = k * oracle.total_weight
    while True:
        violated = oracle.violated_cuts(floor_caps(oracle, scale), root_caps, need)
        if not violated:
            return scale
        new = scale
        for _, mask in violated:
            demand = k * sum(w for w, m in zip(oracle.weights, mask) if m)
            new = max(new, _min_scale_for_cut(oracle, mask, demand, scale))
        assert new > scale
        scale = new


def smallest_optimal_k(oracle: Oracle, rate: Fraction, max_k: int | None = None, start: int = 1) -> int | None:
    """The smallest k whose floor(k*b/x*) capacities keep the condition (exactly optimal), or None past max_k.

    k = lcm of the denominators of b/x* always works; candidates below it are
    first screened against every cut that already refused a smaller k.
    """
    ratios = [bw / rate for _, _, bw in oracle.topo.arcs]
    k_exact = lcm_of_denominators(ratios)
    limit = k_exact if max_k is None else min(k_exact, max_k)
    root_caps_unit = [oracle.weights[r] for r in oracle.roots]
    known: list[tuple[list[Fraction], int]] = []  # (ratios of arcs leaving the cut, weight of the cut)
    k = start
    while k <= limit:
        if any(sum(math.floor(k * r) for r in rs) < k * w for rs, w in known):
            k += 1
            continue
        caps = [math.floor(k * r) for r in ratios]
        violated = oracle.violated_cuts(caps, [k * w for w in root_caps_unit], k * oracle.total_weight, all_targets=False)
        if not violated:
            return k
        for _, mask in violated:
            rs = [ratios[i] for i, (u, v, _) in enumerate(oracle.topo.arcs) if mask[u] and not mask[v]]
            known.append((rs, sum(w for w, m in zip(oracle.weights, mask) if m)))
        k += 1
    return None



def fixed_k_algbw(
    topo: Topology, collective: str = "allgather", k: int = 1, root: str | None = None, symmetry: bool = True
) -> Fraction:
    """The best algbw any schedule with exactly ``k`` trees per root can reach (no trees are built).

    An upper bound for every k-tree schedule; :func:`forestcoll.generate` reaches it whenever every switch
    still receives at least what it can send after capacities are rounded down (always so when
    each switch's links have the same bandwidth both ways).
    """
    coll = collectives.tree_collective(collective)
    if k < 1:
        raise UsageError(f"k must be >= 1, got {k}")
    weights = root_weights(topo, coll, root)
    total_time = Fraction(0)
    for ph in coll.phases:
        prep = prepare_phase(topo, weights, ph.reversed, symmetry)
        total_time += min_scale_for_k(prep.oracle, k, prep.rate.rate) / k
    return sum(weights) / total_time
