"""The best allreduce shard weights, exactly: a linear program over the cut bounds of both phases.

Allreduce is reduce-scatter then allgather with root weights p (rank i owns the
share p_i / sum(p) of the buffer).  Each phase's rate per unit weight is a
minimum over cuts (ForestColl, Theorem 1; :mod:`forestcoll.bound.dinkelbach`):
over node sets S missing some rank, with B+(S) the bandwidth leaving S on the
phase's fabric (the reverse for reduce-scatter, so B-(S) on the fabric),

    1/x_ag(p) = max_S p(S) / B+(S),     1/x_rs(p) = max_S p(S) / B-(S),

and the phases run one after the other, so

    algbw(p) = sum(p) / (1/x_rs(p) + 1/x_ag(p))            (bound/shards.py)

is homogeneous of degree 0 in p.  Fixing the time 1/x_rs + 1/x_ag <= 1, the
best weights solve the linear program

    maximise sum(p)  subject to  p(S) <= a B-(S)  and  p(S) <= b B+(S)  for every S,
                                 a + b <= 1,  p, a, b >= 0,

whose optimum is the best algbw itself (a and b are the two phases' times per
unit of buffer).  It has one row per cut, exponentially many, so it is solved by
cutting planes: solve it exactly (a small simplex in Fractions, Bland's rule) on
the cuts found so far; test the solution's rates 1/a and 1/b with the bound's own
max-flow oracle (every violated min cut, one per target, becomes a row); stop
when none is violated.  Then every cut holds, so the solution is feasible, and
the relaxation's optimum is an upper bound, so it is the exact optimum over all
real (hence rational) weights.  The objective is convex in the two phase times
and invariant under the fabric's automorphisms, so the average of an optimum
over its orbit is an optimum: one variable per orbit of ranks (a fabric whose
ranks form one orbit has equal shards optimal, with nothing to solve).

There is no closed form per cut family in general: box weights (1/(ranks in
box)) are optimal where the box cuts bind and the NICs are shared alike (the
uneven example), and per-rank NIC bandwidth is not (sweep seed 12: its GPUs all
have a quarter of a NIC, yet box weights beat equal shards); the program weighs
every cut, the boxes' and the GPUs' own, at once.

The contract needs positive integer weights and k x D chunks (D = sum of the
weights) must stay practical, so the optimum is scaled to the smallest integers
(lcm of denominators, gcd removed) and taken where D <= ``D_PER_RANK`` x N; else
(or where the optimum gives some rank no share: the best is then a supremum that positive weights only
approach) the fastest of its roundings to D <= ``D_PER_RANK`` x N with every weight at least 1 is kept, found by
branch and bound (each rounding's rate on the cuts found is an upper bound of its exact rate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

from forestcoll.topology.model import Topology

__all__ = ["BestShards", "D_PER_RANK", "MIN_GAIN", "auto_shard_weights", "best_shard_weights", "solve_lp"]

D_PER_RANK = 8  # largest D = sum of the weights taken, per rank (box weights of 8- and 6-GPU boxes: D = 3.4 N)
# the best weights must beat equal and box shards by more than this to be taken: they cut the buffer into k x D
# chunks with D up to 8 N, which can raise k (sweep seed 3: +1.3 % bound, k 1167 -> 5883, its MSCCL file 6 % slower)
MIN_GAIN = Fraction(1, 50)
MAX_ROUNDS = 200  # cutting-plane rounds (each adds at least one new row; the sweep's fabrics need 2-10)


@dataclass(frozen=True)
class BestShards:
    """The best allreduce over root weights: the exact optimum ``algbw`` (any real weights) and integer ``weights``
    per node (0 on switches) whose exact rate is ``reached`` (= ``algbw`` unless rounding was needed)."""

    algbw: Fraction
    weights: tuple[int, ...]
    reached: Fraction
    rounds: int
    cuts: int


def solve_lp(objective: Sequence[Fraction], rows: Sequence[Sequence[Fraction]],
             rhs: Sequence[Fraction]) -> tuple[list[Fraction], Fraction]:
    """max objective . x subject to rows x <= rhs, x >= 0, with every rhs >= 0 (the origin is feasible): the
    exact optimum (x, value) by the simplex method in Fractions with Bland's rule (no cycling).  ValueError if
    unbounded."""
    m, n = len(rows), len(objective)
    width = n + m
    table = [[Fraction(v) for v in row] + [Fraction(int(i == j)) for j in range(m)] + [Fraction(rhs[i])]
             for i, row in enumerate(rows)]
    if any(t[-1] < 0 for t in table):
        raise ValueError("solve_lp needs rhs >= 0")
    cost = [-Fraction(v) for v in objective] + [Fraction(0)] * (m + 1)
    basis = [n + i for i in range(m)]
    while True:
        enter = next((j for j in range(width) if cost[j] < 0), None)
        if enter is None:
            break
        leave = None
        for i in range(m):
            a = table[i][enter]
            if a > 0:
                ratio = table[i][-1] / a
                if leave is None or ratio < leave[0] or (ratio == leave[0] and basis[i] < basis[leave[1]]):
                    leave = (ratio, i)
        if leave is None:
            raise ValueError("unbounded linear program")
        r = leave[1]
        prow = table[r]
        piv = prow[enter]
        if piv != 1:
            prow[:] = [v / piv for v in prow]
        nz = [j for j, v in enumerate(prow) if v]
        for i in range(m):
            f = table[i][enter]
            if i != r and f:
                row = table[i]
                for j in nz:
                    row[j] -= f * prow[j]
        f = cost[enter]
        for j in nz:
            cost[j] -= f * prow[j]
        basis[r] = enter
    x = [Fraction(0)] * n
    for i, b in enumerate(basis):
        if b < n:
            x[b] = table[i][-1]
    return x, cost[-1]


def _rank_orbits(topo: Topology) -> list[list[int]]:
    """The compute nodes grouped by orbit of the whole automorphism group, in node order."""
    from forestcoll.bound.automorphisms import automorphism_orbits

    orbit = automorphism_orbits(topo)
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(topo.is_compute):
        if c:
            groups.setdefault(orbit[i], []).append(i)
    return list(groups.values())


def _node_weights(topo: Topology, classes: list[list[int]], q: Sequence[Fraction]) -> tuple[int, ...]:
    """Per-orbit rationals as the smallest proportional integers per node (0 where the share is 0 and on
    switches)."""
    lcm = math.lcm(*(v.denominator for v in q))
    ints = [int(v * lcm) for v in q]
    g = math.gcd(*ints)
    out = [0] * len(topo.nodes)
    for members, v in zip(classes, ints):
        for i in members:
            out[i] = v // g
    return tuple(out)


def best_shard_weights(topo: Topology) -> BestShards | None:
    """The exact best allreduce root weights (module docstring); None where the ranks form one orbit (equal shards
    are optimal) or the fabric has fewer than two ranks.  RuntimeError where the cutting planes do not converge in
    MAX_ROUNDS or the program's rates need more digits than 64-bit max-flow holds (callers keep the rules before)."""
    from forestcoll.errors import ForestCollError

    try:
        return _best_shard_weights(topo)
    except (ForestCollError, OverflowError) as exc:  # the weights' rates over the bandwidths' denominators: more
        raise RuntimeError(f"best_shard_weights: {exc}") from exc  # digits than check_capacities or int64 take


def _best_shard_weights(topo: Topology) -> BestShards | None:
    from forestcoll.bound.oracle import Oracle
    from forestcoll.bound.shards import weighted_allreduce

    classes = _rank_orbits(topo)
    if len(classes) < 2:
        return None
    fabrics = (topo.reversed(), topo)  # reduce-scatter's (in-trees: out-trees on the reverse), allgather's
    which = {i: c for c, members in enumerate(classes) for i in members}
    m = len(classes)
    rows: dict[tuple[int, tuple[int, ...]], Fraction] = {}  # (phase, ranks of S per orbit) -> least B+(S) seen

    def add(phase: int, mask: Sequence[bool]) -> bool:
        fabric = fabrics[phase]
        counts = [0] * m
        for i, inside in enumerate(mask):
            if inside and i in which:
                counts[which[i]] += 1
        if not any(counts):
            return False
        bw = sum((b for u, v, b in fabric.arcs if mask[u] and not mask[v]), Fraction(0))
        key = (phase, tuple(counts))
        if key in rows and rows[key] <= bw:
            return False
        rows[key] = bw
        return True

    n = len(topo.nodes)
    for phase in (0, 1):
        for members in classes:
            c = members[0]
            add(phase, [i == c for i in range(n)])
            add(phase, [i != c for i in range(n)])
    sizes = [Fraction(len(members)) for members in classes]
    value: Fraction | None = None  # the optimum, once the plain program has converged
    delta = Fraction(1, 1000 * n)  # weight of the smallest share in the objective of the second program
    rounds = 0
    plain: tuple[list[Fraction], tuple[int, ...]] | None = None  # the plain program's optimal weights
    while True:
        rounds += 1
        if rounds > MAX_ROUNDS:
            if plain is None:
                raise RuntimeError("best_shard_weights: the cutting planes did not converge")
            q, weights = plain  # optimal, only not the largest smallest share
            break
        q, times = _solve(rows, sizes, None if value is None else delta)
        found = sum(s * v for s, v in zip(sizes, q))
        if value is not None and found < value:
            delta /= 1000  # the smallest share was bought with rate: weigh it less
            continue
        weights = _node_weights(topo, classes, q)
        scale = Fraction(sum(weights), found)  # integer weights per unit of q
        added = False
        for phase in (0, 1):
            x_w = 1 / (times[phase] * scale)  # each cut must give B+(S) / w(S) >= x_w
            oracle = Oracle.build(fabrics[phase], weights, symmetry=True)
            p, d = x_w.numerator, x_w.denominator
            arc_caps = [int(bw * oracle.scale * d) for _, _, bw in fabrics[phase].arcs]
            root_caps = [p * oracle.scale * weights[r] for r in oracle.roots]
            for _, mask in oracle.violated_cuts(arc_caps, root_caps, p * oracle.scale * sum(weights)):
                added |= add(phase, mask)
        if added:
            continue
        if value is None:
            value, plain = found, (q, weights)  # exact optimum; now the optimal weights whose smallest share is largest
            continue
        break
    best = _integral(topo, classes, q, weights, rows)
    reached = weighted_allreduce(topo, best).algbw
    return BestShards(value, best, reached, rounds, len(rows))


def _solve(rows: dict[tuple[int, tuple[int, ...]], Fraction], sizes: list[Fraction],
           delta: Fraction | None) -> tuple[list[Fraction], list[Fraction]]:
    """The program on the cuts in ``rows``: (share per orbit, the two phases' times); with ``delta``, the
    objective also gains delta x the smallest share (a variable t <= every share)."""
    m = len(sizes)
    extra = 0 if delta is None else 1
    keys = sorted(rows)
    lp_rows = []
    for ph, counts in keys:
        bw = rows[(ph, counts)]
        lp_rows.append([Fraction(v) for v in counts] + [-bw if ph == 0 else Fraction(0), -bw if ph == 1 else Fraction(0)]
                       + [Fraction(0)] * extra)
    lp_rows.append([Fraction(0)] * m + [Fraction(1), Fraction(1)] + [Fraction(0)] * extra)
    rhs = [Fraction(0)] * len(keys) + [Fraction(1)]
    objective = sizes + [Fraction(0), Fraction(0)]
    if delta is not None:
        for c in range(m):
            lp_rows.append([Fraction(-int(j == c)) for j in range(m)] + [Fraction(0), Fraction(0), Fraction(1)])
            rhs.append(Fraction(0))
        objective = objective + [delta]
    x, _ = solve_lp(objective, lp_rows, rhs)
    return x[:m], x[m:m + 2]


def _integral(topo: Topology, classes: list[list[int]], q: Sequence[Fraction], weights: tuple[int, ...],
              rows: dict[tuple[int, tuple[int, ...]], Fraction]) -> tuple[int, ...]:
    """``weights`` where every share is positive and D <= D_PER_RANK x N.  Else the fastest of the roundings of q
    to each total D' = N .. D_PER_RANK x N (every weight max(1, round(q x D' / sum q))): each rounding's rate on the
    cuts in ``rows`` is an upper bound of its exact rate, so they are rated exactly in that order until the next
    bound is no better than the best exact rate (branch and bound; ties to the smaller D)."""
    from forestcoll.bound.shards import weighted_allreduce

    ranks = sum(len(members) for members in classes)
    if all(q) and sum(weights) <= D_PER_RANK * ranks:
        return weights
    sizes = [len(members) for members in classes]
    total = sum(size * v for size, v in zip(sizes, q))
    per_orbit: dict[tuple[int, ...], Fraction] = {}
    for target in range(ranks, D_PER_RANK * ranks + 1):
        per = [max(1, round(v * target / total)) for v in q]
        g = math.gcd(*per)
        per = [v // g for v in per]
        key = tuple(per)
        if key in per_orbit or sum(size * v for size, v in zip(sizes, per)) > D_PER_RANK * ranks:
            continue
        times = [Fraction(0), Fraction(0)]
        for (phase, counts), bw in rows.items():
            times[phase] = max(times[phase], sum(c * v for c, v in zip(counts, per)) / bw)
        per_orbit[key] = sum(size * v for size, v in zip(sizes, per)) / (times[0] + times[1])
    order = sorted(per_orbit, key=lambda k: (-per_orbit[k], sum(size * v for size, v in zip(sizes, k)), k))
    best: tuple[Fraction, tuple[int, ...]] | None = None
    for key in order:
        if best is not None and per_orbit[key] <= best[0]:
            break
        out = [0] * len(topo.nodes)
        for members, v in zip(classes, key):
            for i in members:
                out[i] = v
        rate = weighted_allreduce(topo, tuple(out)).algbw
        if best is None or rate > best[0]:
            best = (rate, tuple(out))
    if best is None:  # no rounding fits D <= D_PER_RANK x N: equal shards
        return tuple(int(c) for c in topo.is_compute)
    return best[1]


def auto_shard_weights(topo: Topology, rates: Any = None) -> tuple[tuple[int, ...], str] | None:
    """The per-node root weights ``generate --shards auto`` takes and their name (``box`` or ``best``), or None
    for equal shards: the fastest by exact rate of equal shards, box weights (:func:`~forestcoll.bound.shards.
    box_shard_weights`) and :func:`best_shard_weights`' integers, ties going to the simpler (equal, then box); the
    best weights only where they beat both by more than MIN_GAIN (2 %).
    Nothing is computed where the ranks form one orbit; the box weights are rated only where boxes differ.
    ``rates``: an object with the equal-shard rate ``equal``, the box weights ``node`` and their rate ``weighted``
    computed once (:class:`forestcoll.cli.shards.ShardRates`), else they are computed here."""
    from forestcoll.bound.optimal import optimal_bound
    from forestcoll.bound.shards import box_shard_weights, weighted_allreduce

    if rates is None:
        rates = _Rates(topo, optimal_bound, box_shard_weights, weighted_allreduce)

    try:
        best = best_shard_weights(topo)
    except RuntimeError:  # the cutting planes did not converge in MAX_ROUNDS (not seen): the rules before them
        best = None
        box = rates.node
        if box is not None and rates.weighted > rates.equal:
            return box, "box"
    if best is None:
        return None
    equal = rates.equal
    if best.algbw <= equal:
        return None  # the exact optimum over all weights: equal shards reach it
    box = rates.node
    box_rate = rates.weighted if box is not None else None
    top = max(equal, box_rate or equal)
    if best.reached > top * (1 + MIN_GAIN):
        return best.weights, "best"
    if box is not None and box_rate is not None and box_rate > equal:
        return box, "box"
    return None


class _Rates:
    """The rates :func:`auto_shard_weights` compares, each computed when first asked."""

    def __init__(self, topo: Topology, optimal_bound: Any, box_shard_weights: Any, weighted_allreduce: Any) -> None:
        self._topo, self._optimal, self._weighted = topo, optimal_bound, weighted_allreduce
        self.node = box_shard_weights(topo)

    @cached_property
    def equal(self) -> Fraction:
        return self._optimal(self._topo, "allreduce").algbw

    @cached_property
    def weighted(self) -> Fraction:
        return self._weighted(self._topo, self.node).algbw
