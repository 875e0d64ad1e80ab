"""The generation pipeline: topology -> exact bound -> switch removal -> tree packing -> schedule.

One *phase* packs out-trees on the fabric (allgather, broadcast) or on the
reversed fabric (reduce-scatter, reduce: the out-trees there are in-trees
here).  Allreduce is a reduce-scatter phase followed by an allgather phase; on
a fabric whose links have equal bandwidth both ways the allgather trees,
reversed, serve as the reduce-scatter trees.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from forestcoll import collectives
from forestcoll.bound import (
    PreparedPhase,
    floor_caps,
    min_scale_for_k,
    next_breakpoint,
    prepare_phase,
    root_weights,
    smallest_optimal_k,
)
from forestcoll.errors import TopologyError, UsageError
from forestcoll.packing import Tree, pack_trees, pack_trees_symmetric
from forestcoll.rational import format_rational
from forestcoll.schedule import Edge, PhaseInfo, Schedule, ScheduleTree
from forestcoll.splitting import Path, split_switches, trim_switch_excess
from forestcoll.topology.model import Topology

DEFAULT_MAX_K = 100_000


@dataclass
class PhaseResult:
    """One packed phase before it becomes part of a schedule."""

    name: str
    k: int
    scale: Fraction  # U: the phase moves M/(D*k) bytes per tree unit in U*M/(D*k) seconds
    rate: Fraction
    total_weight: int
    trees: list[ScheduleTree]
    cut: tuple[str, ...]
    stats: dict[str, float] = field(default_factory=dict)

    load_ratio: Fraction = Fraction(0)  # max over links of (chunks carried) / bandwidth

    @property
    def algbw(self) -> Fraction:
        """algbw of this phase alone: D*k / max(load/b); equals D*k/U when the scale is tight."""
        return self.total_weight * self.k / self.load_ratio

    @property
    def bound_algbw(self) -> Fraction:
        return self.total_weight * self.rate


def _allocate(bundle: dict[Path, int], need: int) -> list[tuple[Path, int]]:
    """Take ``need`` units from a path bundle, preferring one path that covers them all (best fit)."""
    if len(bundle) == 1:
        ((p, a),) = bundle.items()
        assert a >= need, "a logical arc ran out of physical paths"
        if a == need:
            del bundle[p]
        else:
            bundle[p] = a - need
        return [(p, need)]
    best = None
    for p, a in bundle.items():
        if a >= need and (best is None or (a, p) < (bundle[best], best)):
            best = p
    if best is not None:
        chosen = [(best, need)]
    else:
        chosen = []
        left = need
        for p in sorted(bundle, key=lambda p: (-bundle[p], p)):
            a = min(bundle[p], left)
            chosen.append((p, a))
            left -= a
            if left == 0:
                break
        assert left == 0, "a logical arc ran out of physical paths"
    for p, a in chosen:
        bundle[p] -= a
        if bundle[p] == 0:
            del bundle[p]
    return chosen


def _map_back(
    packed: Sequence[Tree], bundles: dict[tuple[int, int], dict[Path, int]], compute: Sequence[int]
) -> list[tuple[int, int, list[tuple[int, int, Path]]]]:
    """Replace logical arcs by physical paths, splitting a tree where its units take different paths.

    Returns (root node, multiplicity, [(src, dst, path)]) in node indices.
    """
    out = []
    for tree in packed:
        allocations = []
        cuts = {0, tree.multiplicity}
        for x, y in tree.arcs:
            alloc = _allocate(bundles[(compute[x], compute[y])], tree.multiplicity)
            allocations.append(alloc)
            acc = 0
            for _, a in alloc:
                acc += a
                cuts.add(acc)
        bounds = sorted(cuts)
        for lo, hi in zip(bounds, bounds[1:]):
            edges = []
            for (x, y), alloc in zip(tree.arcs, allocations):
                acc = 0
                for p, a in alloc:
                    if acc <= lo < acc + a:
                        edges.append((compute[x], compute[y], p))
                        break
                    acc += a
            out.append((compute[tree.root], hi - lo, edges))
    return out


def _invariant_symmetries(topo: Topology, weights: Sequence[int]) -> list[tuple[int, ...]]:
    n = len(topo.nodes)
    return [p for p in topo.symmetries if all(weights[p[i]] == weights[i] for i in range(n))]


MAX_SCALE_STEPS = 10_000


def phase_capacities(
    prep: PreparedPhase, weights: Sequence[int], k: int | None, max_k: int = DEFAULT_MAX_K
) -> tuple[int, Fraction, list[tuple[int, int, int]]]:
    """k, the scale U and the integer arcs (floor(U*b), switch excess trimmed) of one phase.

    With ``k=None``: the smallest exactly optimal k.  Otherwise the smallest U
    for that k.  When a switch's excess out-capacity cannot be trimmed without
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


def solve_phase(
    topo: Topology,
    name: str,
    weights: Sequence[int],
    reverse: bool,
    k: int | None = None,
    symmetry: bool = True,
    max_k: int = DEFAULT_MAX_K,
) -> PhaseResult:
    """Pack the trees of one phase: optimal (smallest exact k) when ``k`` is None, else the best with k."""
    stats: dict[str, float] = {}
    t0 = time.perf_counter()
    prep = prepare_phase(topo, weights, reverse, symmetry)
    fabric, oracle, rate = prep.fabric, prep.oracle, prep.rate
    stats["bound_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    k, scale, arcs = phase_capacities(prep, weights, k, max_k)
    stats["k_search_s"] = time.perf_counter() - t0
    stats["bound_maxflows"] = oracle.maxflows
    n = len(fabric.nodes)
    total = sum(weights)
    t0 = time.perf_counter()
    trimmed = [c for _, _, c in arcs] != floor_caps(oracle, scale)
    gens = _invariant_symmetries(fabric, weights) if symmetry and not trimmed else []
    split = split_switches(n, arcs, fabric.is_compute, [k * w for w in weights], k * total, gens)
    stats["split_s"] = time.perf_counter() - t0
    stats["split_maxflows"] = split.stats["maxflows"]
    stats["split_group_order"] = len(split.group)
    compute = [i for i in range(n) if fabric.is_compute[i]]
    pos = {c: j for j, c in enumerate(compute)}
    ccaps = {(pos[u], pos[v]): c for (u, v), c in split.caps.items()}
    t0 = time.perf_counter()
    demand = [k * weights[c] for c in compute]
    if len(split.group) > 1:
        group = [[pos[g[c]] for c in compute] for g in split.group]
        packed = pack_trees_symmetric(len(compute), ccaps, demand, group)
    else:
        packed = pack_trees(len(compute), ccaps, demand)
    stats["pack_s"] = time.perf_counter() - t0
    for key, value in packed.stats.items():
        stats[f"pack_{key}"] = value
    t0 = time.perf_counter()
    routed = _map_back(packed.trees, {a: dict(b) for a, b in split.paths.items()}, compute)
    names = [node.name for node in fabric.nodes]
    name_of = names.__getitem__
    trees = []
    load: dict[tuple[int, int], int] = {}
    for root, mult, edges in routed:
        for _, _, p in edges:
            for hop in zip(p, p[1:]):
                load[hop] = load.get(hop, 0) + mult
        if reverse:
            sched_edges = tuple(Edge(names[y], names[x], tuple(map(name_of, p[::-1]))) for x, y, p in reversed(edges))
        else:
            sched_edges = tuple(Edge(names[x], names[y], tuple(map(name_of, p))) for x, y, p in edges)
        trees.append(ScheduleTree(names[root], mult, name, sched_edges))
    stats["map_s"] = time.perf_counter() - t0
    stats["packed_trees"] = len(packed.trees)
    cut = tuple(fabric.nodes[i].name for i in rate.cut.nodes)
    bandwidth = {(u, v): bw for u, v, bw in fabric.arcs}
    ratio = max(Fraction(amount) / bandwidth[hop] for hop, amount in load.items())  # max over links of chunks / bandwidth
    return PhaseResult(name, k, scale, rate.rate, total, trees, cut, stats, ratio)


def _reverse_phase(phase: PhaseResult, name: str) -> PhaseResult:
    """Out-trees on a fabric equal to its own reverse, read backwards as in-trees."""
    trees = [
        ScheduleTree(t.root, t.chunks, name, tuple(Edge(e.dst, e.src, tuple(reversed(e.path))) for e in reversed(t.edges)))
        for t in phase.trees
    ]
    return PhaseResult(
        name, phase.k, phase.scale, phase.rate, phase.total_weight, trees, phase.cut, dict(phase.stats), phase.load_ratio
    )


def generate(
    topo: Topology,
    collective: str = "allgather",
    k: int | None = None,
    root: str | None = None,
    symmetry: bool = True,
    max_k: int = DEFAULT_MAX_K,
) -> Schedule:
    """A throughput-optimal (``k=None``) or best-with-``k``-trees-per-root schedule for ``collective``.

    Raises UsageError for bad parameters; the result verifies with :func:`forestcoll.verify.verify`.
    """
    coll = collectives.get(collective)
    weights = root_weights(topo, coll, root)
    t0 = time.perf_counter()
    # millions of small objects (tree edges) are made and none is garbage: pause the cycle collector
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _generate(topo, coll, weights, k, symmetry, max_k, t0)
    finally:
        if gc_was_enabled:
            gc.enable()


def _generate(topo: Topology, coll: collectives.Collective, weights: Sequence[int], k: int | None, symmetry: bool,
              max_k: int, t0: float) -> Schedule:
    solved: dict[str, PhaseResult] = {}
    mirrored = []
    for ph in coll.phases:
        twin = coll.mirror_of(ph) if topo.is_symmetric() else None
        if twin is not None:
            mirrored.append((ph, twin))  # read backwards from the out-tree phase below
        else:
            solved[ph.name] = solve_phase(topo, ph.name, weights, ph.reversed, k, symmetry, max_k)
    for ph, twin in mirrored:
        solved[ph.name] = _reverse_phase(solved[twin.name], ph.name)
    phases = [solved[ph.name] for ph in coll.phases]
    common_k = math.lcm(*(p.k for p in phases))
    trees = []
    for p in phases:
        factor = common_k // p.k
        trees.extend(ScheduleTree(t.root, t.chunks * factor, t.phase, t.edges) for t in p.trees)
    total = phases[0].total_weight
    algbw = total / sum(p.load_ratio / p.k for p in phases)
    # the optimum: phases run one after the other, each at its own x*
    bound_algbw = total / sum(1 / p.rate for p in phases)
    stats: dict[str, float] = {"seconds": time.perf_counter() - t0}
    for p in phases:
        for key, value in p.stats.items():
            stats[f"{p.name}.{key}"] = value
    root_name = topo.nodes[weights.index(1)].name if coll.rooted else None
    return Schedule(
        collective=coll.name,
        topology=topo.name,
        ranks=topo.compute_nodes,
        k=common_k,
        algbw=algbw,
        bound_algbw=bound_algbw,
        phases=tuple(PhaseInfo(p.name, common_k, p.algbw, p.bound_algbw, p.cut) for p in phases),
        trees=tuple(trees),
        root=root_name,
        stats=stats,
    )


def fixed_k_algbw(
    topo: Topology, collective: str = "allgather", k: int = 1, root: str | None = None, symmetry: bool = True
) -> Fraction:
    """The best algbw any schedule with exactly ``k`` trees per root can reach (no trees are built).

    An upper bound for every k-tree schedule; :func:`generate` reaches it whenever every switch
    still receives at least what it can send after capacities are rounded down (always so when
    each switch's links have the same bandwidth both ways).
    """
    coll = collectives.get(collective)
    if k < 1:
        raise UsageError(f"k must be >= 1, got {k}")
    weights = root_weights(topo, coll, root)
    total_time = Fraction(0)
    for ph in coll.phases:
        prep = prepare_phase(topo, weights, ph.reversed, symmetry)
        total_time += min_scale_for_k(prep.oracle, k, prep.rate.rate) / k
    return sum(weights) / total_time
