"""The exact optimal rate x* of one tree phase, by Dinkelbach's (Newton's) iteration on min cuts.

    x* = min over node sets S with w(S) > 0 and S missing some compute node of  B+(S) / w(S)

(ForestColl, Theorem 1; B+(S) is the bandwidth leaving S).  Start at the best
single-node cut ({c}, or everything but c) and test its ratio x with the
:class:`~forestcoll.bound.oracle.Oracle`.  When a target fails, its min cut has
``B+(S) - x*w(S) < 0``, a strictly smaller ratio: jump to it.  When none
fails, x is a cut's ratio and feasible, hence optimal, and that cut is the
certificate.  Ratios have denominators <= D, and each step lowers the slope of
the piecewise-linear min-cut function, so at most D steps are taken (1 to 3 in
practice).  Every value is a Fraction.

References: W. Dinkelbach, "On nonlinear fractional programming", Management
Science 13(7), 1967; ForestColl (arXiv 2402.06787), Theorem 1 (the bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from forestcoll.bound.oracle import Cut, Oracle

__all__ = ["RateResult", "optimal_rate"]


@dataclass(frozen=True)
class RateResult:
    """x* (GB/s per unit root weight) with the cut that attains it and the work spent."""

    rate: Fraction
    cut: Cut
    iterations: int
    maxflows: int



def _initial_cut(oracle: Oracle) -> Cut:
    """The best single-node cut: {c} (its out-bandwidth) or everything but c (its in-bandwidth)."""
    topo = oracle.topo
    n = len(topo.nodes)
    in_bw, out_bw = topo.node_bandwidth
    total = oracle.total_weight
    best: tuple[Fraction, int, bool] | None = None
    for c in range(n):
        if not topo.is_compute[c]:
            continue
        w = oracle.weights[c]
        for ratio, alone in ((out_bw[c] / w if w else None, True), (in_bw[c] / (total - w) if total > w else None, False)):
            if ratio is not None and (best is None or ratio < best[0]):
                best = (ratio, c, alone)
    assert best is not None
    _, c, alone = best
    return oracle.cut_of([(i == c) == alone for i in range(n)])


def optimal_rate(oracle: Oracle) -> RateResult:
    """x* exactly, by Dinkelbach iteration on min cuts; see the module docstring."""
    cut = _initial_cut(oracle)
    iterations = 0
    start = oracle.maxflows
    while True:
        iterations += 1
        x = cut.ratio
        p, q = x.numerator, x.denominator
        arc_caps = [bw * oracle.scale * q for _, _, bw in oracle.topo.arcs]
        assert all(c.denominator == 1 for c in arc_caps)
        arc_caps_int = [int(c) for c in arc_caps]
        root_caps = [p * oracle.scale * oracle.weights[r] for r in oracle.roots]
        need = p * oracle.scale * oracle.total_weight
        violated = oracle.violated_cuts(arc_caps_int, root_caps, need)
        if not violated:
            return RateResult(x, cut, iterations, oracle.maxflows - start)
        best = min((oracle.cut_of(mask) for _, mask in violated), key=lambda c: (c.ratio, c.nodes))
        assert best.ratio < x, "Dinkelbach step must decrease the rate"
        cut = best
