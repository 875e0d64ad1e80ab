"""The exact optimal throughput of tree-based collectives and its bottleneck cut.

Roots carry integer weights ``w`` (allgather: every compute node 1; broadcast:
the root 1, the rest 0).  With ``D = sum(w)``, the best rate per unit of weight is

    x* = min over node sets S with w(S) > 0 and S missing some compute node of  B+(S) / w(S)

where ``B+(S)`` is the bandwidth of links leaving S (ForestColl, Theorem 1).  A
rate x is feasible iff, with a super-source s and arcs s->c of capacity x*w(c),
every compute node v receives max-flow(s, v) >= x*D.  :func:`optimal_rate`
finds x* exactly with Dinkelbach's (Newton's) iteration on min cuts: start at a
real cut's ratio, test it, and jump to the ratio of a violated cut until none
is violated.  Every value is a Fraction; the max-flows run on integers.

For schedules with exactly ``k`` trees per unit weight, link ``a`` may carry
``floor(U*b_a)`` trees, where ``U`` is time in units of M/(D*k); the best such
schedule has the smallest ``U`` that keeps the cut condition with demand k*w
(:func:`min_scale_for_k`), and algbw ``D*k/U``.  The optimum is reached with
``U = k/x*`` exactly when those floors keep the condition
(:func:`smallest_optimal_k`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from forestcoll import collectives
from forestcoll.collectives import Collective
from forestcoll.errors import UsageError
from forestcoll.maxflow import FlowNetwork, check_capacities
from forestcoll.rational import lcm_of_denominators
from forestcoll.symmetry import detect_automorphisms, orbits
from forestcoll.topology.model import Topology


@dataclass(frozen=True)
class Cut:
    """A node set S (indices) with its outgoing bandwidth B+(S) and root weight w(S)."""

    nodes: tuple[int, ...]
    bandwidth: Fraction
    weight: int

    @property
    def ratio(self) -> Fraction:
        return self.bandwidth / self.weight


@dataclass(frozen=True)
class RateResult:
    """x* (GB/s per unit root weight) with the cut that attains it and the work spent."""

    rate: Fraction
    cut: Cut
    iterations: int
    maxflows: int


@dataclass
class Oracle:
    """Max-flow tests of the cut condition for one topology and root weights.

    Node ``n`` (one past the topology's nodes) is the super-source.  ``targets``
    are the compute nodes that must be tested: one per orbit of the declared or
    detected automorphisms that preserve the weights.
    """

    topo: Topology
    weights: tuple[int, ...]
    targets: tuple[int, ...]
    net: FlowNetwork
    roots: tuple[int, ...]
    maxflows: int = 0
    scale: int = 1
    cuts_seen: list[tuple[bool, ...]] = field(default_factory=list)

    @classmethod
    def build(cls, topo: Topology, weights: Sequence[int], symmetry: bool = True) -> Oracle:
        n = len(topo.nodes)
        weights = tuple(int(w) for w in weights)
        if len(weights) != n or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise UsageError("root weights must be non-negative, one per node, with a positive total")
        for i, w in enumerate(weights):
            if w and not topo.is_compute[i]:
                raise UsageError(f"switch {topo.nodes[i].name!r} cannot be a root")
        roots = tuple(i for i in range(n) if weights[i] > 0)
        arcs = topo.arcs
        tails = [u for u, _, _ in arcs] + [n] * len(roots)
        heads = [v for _, v, _ in arcs] + list(roots)
        net = FlowNetwork(n + 1, tails, heads)
        targets = _orbit_targets(topo, weights, symmetry)
        scale = lcm_of_denominators(bw for _, _, bw in arcs)
        return cls(topo, weights, targets, net, roots, scale=scale)

    @property
    def total_weight(self) -> int:
        return sum(self.weights)

    def violated_cuts(
        self, arc_caps: Sequence[int], root_caps: Sequence[int], need: int, all_targets: bool = True
    ) -> list[tuple[int, tuple[bool, ...]]]:
        """Source sides (without the super-source) of min cuts below ``need``, one per failing target."""
        caps = list(arc_caps) + list(root_caps)
        check_capacities(caps)
        source = len(self.topo.nodes)
        found = []
        for v in self.targets:
            self.maxflows += 1
            if self.net.value(caps, source, v) >= need:
                continue
            value, mask = self.net.min_cut(caps, source, v)
            self.maxflows += 1
            found.append((value, tuple(mask[:-1])))
            if not all_targets:
                break
        return found

    def cut_of(self, mask: Sequence[bool]) -> Cut:
        """The Cut object (exact bandwidth and weight) of a node mask."""
        bw = sum((b for u, v, b in self.topo.arcs if mask[u] and not mask[v]), Fraction(0))
        weight = sum(w for w, m in zip(self.weights, mask) if m)
        return Cut(tuple(i for i, m in enumerate(mask) if m), bw, weight)


def _orbit_targets(topo: Topology, weights: Sequence[int], symmetry: bool) -> tuple[int, ...]:
    n = len(topo.nodes)
    compute = [i for i in range(n) if topo.is_compute[i]]
    if not symmetry:
        return tuple(compute)
    def invariant(perms):
        return [p for p in perms if all(weights[p[i]] == weights[i] for i in range(n))]

    gens = invariant(topo.symmetries)
    orbit = orbits(n, gens)
    if len({orbit[c] for c in compute}) > 1 and len(compute) > 8:
        gens += invariant(detect_automorphisms(n, topo.is_compute, topo.arcs))
        orbit = orbits(n, gens)
    seen: set[int] = set()
    targets = []
    for c in compute:
        if orbit[c] not in seen:
            seen.add(orbit[c])
            targets.append(c)
    return tuple(targets)


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


# ----------------------------------------------------------------------------------------------
# Public: bounds per collective


@dataclass(frozen=True)
class PhaseBound:
    """One tree phase: out-trees on the fabric (allgather-like) or on its reverse (reduce-like)."""

    name: str
    rate: Fraction  # GB/s per unit root weight
    cut_nodes: tuple[str, ...]
    cut_bandwidth: Fraction
    cut_weight: int
    reversed: bool
    unbalanced: tuple[str, ...] = ()  # switches that may keep trees below the bound (see unbalanced_switches)


@dataclass(frozen=True)
class Bound:
    """The optimal algbw of a collective (nccl-tests convention) with its certificate(s)."""

    collective: str
    ranks: int
    algbw: Fraction
    busbw: Fraction
    phases: tuple[PhaseBound, ...]
    root: str | None = None


def root_weights(topo: Topology, collective: str | Collective, root: str | None) -> tuple[int, ...]:
    """Root weights: every compute node 1, or just ``root`` (the first rank by default) for a rooted collective."""
    if collectives.get(collective).rooted:
        if root is None:
            root = topo.compute_nodes[0]
        if root not in topo.index:
            raise UsageError(f"unknown root {root!r}; compute nodes are e.g. {', '.join(topo.compute_nodes[:4])}")
        if topo.kind(root) != "compute":
            raise UsageError(f"root {root!r} is a switch; pick a compute node")
        return tuple(1 if n.name == root else 0 for n in topo.nodes)
    return tuple(1 if c else 0 for c in topo.is_compute)


def unbalanced_switches(fabric: Topology) -> tuple[str, ...]:
    """Switches whose links can carry more out of them than into them.

    A switch cannot copy, so trees never use more of its out-links than of its
    in-links; max-flow does not see that, so on such fabrics the cut bound is
    an upper bound that trees may not reach (the generator then tells).
    """
    into, out = fabric.node_bandwidth
    return tuple(node.name for i, node in enumerate(fabric.nodes) if not fabric.is_compute[i] and out[i] > into[i])


@dataclass
class PreparedPhase:
    """A phase's fabric (reversed for in-tree phases), its oracle, and x* with its certificate cut."""

    fabric: Topology
    oracle: Oracle
    rate: RateResult
    unbalanced: tuple[str, ...] = ()


def prepare_phase(topo: Topology, weights: Sequence[int], reverse: bool, symmetry: bool = True) -> PreparedPhase:
    """Orient the fabric for the phase and compute x* exactly."""
    fabric = topo.reversed() if reverse else topo
    oracle = Oracle.build(fabric, weights, symmetry)
    return PreparedPhase(fabric, oracle, optimal_rate(oracle), unbalanced_switches(fabric))


def phase_bound(topo: Topology, name: str, weights: Sequence[int], reverse: bool, symmetry: bool = True) -> PhaseBound:
    """The optimal rate of one phase, on the fabric or on its reverse."""
    prep = prepare_phase(topo, weights, reverse, symmetry)
    res = prep.rate
    names = tuple(prep.fabric.nodes[i].name for i in res.cut.nodes)
    return PhaseBound(name, res.rate, names, res.cut.bandwidth, res.cut.weight, reverse, prep.unbalanced)


def optimal_bound(topo: Topology, collective: str = "allgather", root: str | None = None, symmetry: bool = True) -> Bound:
    """The exact optimal algbw of ``collective`` on ``topo`` and the cut(s) that prove it.

    Each phase runs at its own x* (on the fabric for out-trees, on its reverse
    for in-trees) and the phases run one after the other, so with D = sum of
    root weights, algbw = D / sum over phases of 1/x*: allgather / reduce-scatter
    N*x*, allreduce N / (1/x_rs + 1/x_ag), broadcast / reduce x* = min over v of
    max-flow(root, v).  On a fabric equal to its reverse an in-tree phase has
    the rate and cut of the collective's out-tree phase.
    """
    coll = collectives.get(collective)
    weights = root_weights(topo, coll, root)
    found: dict[str, PhaseBound] = {}
    mirrored = []
    for ph in coll.phases:
        twin = coll.mirror_of(ph) if topo.is_symmetric() else None
        if twin is not None:
            mirrored.append((ph, twin))
        else:
            found[ph.name] = phase_bound(topo, ph.name, weights, ph.reversed, symmetry)
    for ph, twin in mirrored:
        found[ph.name] = replace(found[twin.name], name=ph.name, reversed=ph.reversed)
    phases = tuple(found[ph.name] for ph in coll.phases)
    algbw = sum(weights) / sum(1 / p.rate for p in phases)
    root_name = topo.nodes[weights.index(1)].name if coll.rooted else None
    n = topo.num_compute
    return Bound(coll.name, n, algbw, algbw * coll.bus_factor(n), phases, root_name)
