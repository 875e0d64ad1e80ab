"""Integer tree capacities of one phase: the number of trees k per unit weight, the time scale U, floor(U*b).

With ``k=None`` the smallest exactly optimal k and ``U = k/x*``; with a given k
the smallest U for it (:mod:`forestcoll.bound.fixed_k`).  A switch cannot copy,
so after rounding down every switch must still receive at least what it may
send: :func:`~forestcoll.trees.splitting.trim_switch_excess` removes the excess
out-capacity one arc at a time, each by the largest amount that keeps the cut
condition.  When some excess cannot go, the next k (or the next breakpoint of
U at which a capacity grows) is tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from forestcoll.bound.automorphisms import usable_symmetries
from forestcoll.bound.fixed_k import floor_caps, min_scale_for_k, next_breakpoint, smallest_optimal_k
from forestcoll.bound.optimal import PreparedPhase
from forestcoll.errors import TopologyError, UsageError
from forestcoll.rational import format_rational
from forestcoll.topology.model import Topology
from forestcoll.trees.splitting import trim_switch_excess

__all__ = ["DEFAULT_MAX_K", "invariant_symmetries", "phase_capacities"]

DEFAULT_MAX_K = 100_000


def invariant_symmetries(topo: Topology, weights: Sequence[int]) -> list[tuple[int, ...]]:
    """Automorphisms of ``topo`` acting freely on its compute nodes (declared, or detected when that pays:
    :func:`~forestcoll.bound.automorphisms.usable_symmetries`) that preserve the root weights."""
    n = len(topo.nodes)
    return [p for p in usable_symmetries(topo) if all(weights[p[i]] == weights[i] for i in range(n))]


MAX_SCALE_STEPS = 10_000


def phase_capacities(
    prep: PreparedPhase, weights: Sequence[int], k: int | None, max_k: int = DEFAULT_MAX_K,
    stretch: Fraction = Fraction(1),
) -> tuple[int, Fraction, list[tuple[int, int, int]]]:
    """k, the scale U and the integer arcs (floor(U*b), switch excess trimmed) of one phase.

    With ``k=None``: the smallest exactly optimal k.  Otherwise the smallest U
    for that k, times ``stretch`` >= 1 (a slower rate: more room per tree, which
    :func:`forestcoll.generate.generate` spends on lower trees).  When a switch's excess out-capacity cannot be trimmed without
    breaking the condition (only possible after rounding down, or with one-way
    links), the next k, or the next scale at which a capacity grows, is tried.
    """
    fabric, oracle, rate = prep.fabric, prep.oracle, prep.rate.rate
    names = [node.name for node in fabric.nodes]
    n = len(fabric.nodes)
    total = sum(weights)
    if k is not None and k < 1:
        raise UsageError(f"k must be >= 1, got {k}")
    auto_k = k is None
    k = smallest_optimal_k(oracle, rate, max_k) if auto_k else k
    if k is None:
        raise UsageError(f"the exactly optimal schedule needs more than {max_k} trees per root; pass --k K for the best with K")
    scale = Fraction(k) / rate if auto_k else min_scale_for_k(oracle, k, rate)
    if stretch != 1 and not auto_k:
        if stretch < 1:
            raise UsageError(f"stretch must be >= 1, got {stretch}")
        scale *= stretch  # floors only grow with U, so the cut condition still holds
    for _ in range(MAX_SCALE_STEPS):
        floors = floor_caps(oracle, scale)
        arcs, stuck = trim_switch_excess(
            n, [(u, v, c) for (u, v, _), c in zip(fabric.arcs, floors)], fabric.is_compute, [k * w for w in weights], k * total
        )
        if arcs is not None:
            return k, scale, arcs
        if auto_k:
            k = smallest_optimal_k(oracle, rate, max_k, start=k + 1)
            if k is None:
                raise TopologyError(
                    f"switch {names[stuck]!r} can send more than it receives, and a switch cannot copy: no tree "
                    f"schedule reaches the bound {format_rational(total * rate)} GB/s; pass --k K for the best "
                    "schedule forestcoll can build with K trees per root"
                )
            scale = Fraction(k) / rate
        else:
            scale = min_scale_for_k(oracle, k, rate, start=next_breakpoint(oracle, scale))
    raise TopologyError(f"switch {names[stuck]!r} can send more than it receives; no schedule with k={k} was found")
