"""The generation pipeline: topology -> exact bound -> integer capacities -> switch removal -> tree packing
-> routes -> schedule.

One *phase* packs out-trees on the fabric (allgather, broadcast) or on the
reversed fabric (reduce-scatter, reduce: the out-trees there are in-trees
here); a collective's phases come from :mod:`forestcoll.collectives`.  On a
fabric whose links have equal bandwidth both ways an in-tree phase is its
collective's out-tree phase read backwards (allreduce: the allgather trees,
reversed, serve as the reduce-scatter trees).  The schedule's algbw is exact:
D / sum over phases of max over links (chunks carried / bandwidth) / k.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from forestcoll import collectives
from forestcoll.bound.fixed_k import floor_caps, min_scale_for_k
from forestcoll.bound.optimal import prepare_phase, root_weights
from forestcoll.errors import TopologyError, UsageError
from forestcoll.progress import Progress, report
from forestcoll.rational import format_rational
from forestcoll.schedule import Edge, PhaseInfo, Schedule, ScheduleTree, TopologyRecord
from forestcoll.topology.model import Topology, fingerprint
from forestcoll.trees.capacities import DEFAULT_MAX_K, invariant_symmetries, phase_capacities
from forestcoll.trees.crossings import fewer_crossings
from forestcoll.trees.height import pack_height_limited
from forestcoll.trees.packing import PackResult, pack_trees
from forestcoll.trees.routing import map_back
from forestcoll.trees.shallow import lower_trees, rank_eccentricities
from forestcoll.trees.splitting import Path, split_switches, trim_switch_excess
from forestcoll.trees.symmetric import pack_trees_symmetric

__all__ = ["LOWERING_RANKS", "LOWEST", "PhaseResult", "check_height", "fixed_k_reach", "generate", "lowering_budget", "solve_phase"]

LOWERING_RANKS = 128  # packings with more ranks keep the packer's heights (each max-flow grows with the ranks)


LOWEST = "lowest"  # generate(max_height=LOWEST): the same schedule with its trees as low as the search finds

HEIGHT_WORK = 5.0  # deterministic seconds of CP-SAT per height-limited packing tried


class HeightNotFound(Exception):
    """Internal: the height-limited constraint program found no packing (infeasible or out of time)."""


def lowering_budget(ranks: int, packing_maxflows: int) -> int:
    """Max-flows the tree lowering may spend on a phase of ``ranks`` ranks: a few times what the packing
    spent (at least 2,000, at most 20,000; none above :data:`LOWERING_RANKS` ranks)."""
    return min(20_000, max(2_000, 4 * packing_maxflows)) if ranks <= LOWERING_RANKS else 0


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


# the steps of one phase, as solve_phase reports them to a progress callback
STEPS = ("bound", "smallest exact k", "removing switches", "packing trees", "lowering trees", "paths and loads")


def solve_phase(
    topo: Topology,
    name: str,
    weights: Sequence[int],
    reverse: bool,
    k: int | None = None,
    symmetry: bool = True,
    max_k: int = DEFAULT_MAX_K,
    stretch: Fraction = Fraction(1),
    max_height: int | None = None,
    exact_height: bool = False,
    progress: Progress | None = None,
) -> PhaseResult:
    """Pack the trees of one phase: optimal (smallest exact k) when ``k`` is None, else the best with k (its time
    scale times ``stretch``); the trees are then lowered (:func:`~forestcoll.trees.shallow.lower_trees`),
    aiming at ``max_height`` when given.  With ``exact_height`` the trees come from the constraint program of
    :mod:`forestcoll.trees.height` instead (unit trees, every one within ``max_height``); :class:`HeightNotFound`
    when it finds none.  ``progress`` hears ``"<phase>: <step>"`` for each of the steps in :data:`STEPS` (the last
    one with its count of trees)."""
    stats: dict[str, float] = {}

    def step(i: int) -> None:  # the step number out of the steps; the last step counts its trees
        report(progress, f"{name}: {STEPS[i]}", i, len(STEPS))

    step(0)
    t0 = time.perf_counter()
    prep = prepare_phase(topo, weights, reverse, symmetry)
    fabric, oracle, rate = prep.fabric, prep.oracle, prep.rate
    stats["bound_s"] = time.perf_counter() - t0
    step(1)
    t0 = time.perf_counter()
    k, scale, arcs = phase_capacities(prep, weights, k, max_k, stretch)
    stats["k_search_s"] = time.perf_counter() - t0
    stats["bound_maxflows"] = oracle.maxflows
    n = len(fabric.nodes)
    total = sum(weights)
    step(2)
    t0 = time.perf_counter()
    trimmed = [c for _, _, c in arcs] != floor_caps(oracle, scale)
    gens = invariant_symmetries(fabric, weights) if symmetry and not trimmed else []
    split = split_switches(n, arcs, fabric.is_compute, [k * w for w in weights], k * total, gens,
                           box=[node.box for node in fabric.nodes])
    stats["split_s"] = time.perf_counter() - t0
    stats["split_maxflows"] = split.stats["maxflows"]
    stats["split_group_order"] = len(split.group)
    compute = [i for i in range(n) if fabric.is_compute[i]]
    pos = {c: j for j, c in enumerate(compute)}
    ccaps = {(pos[u], pos[v]): c for (u, v), c in split.caps.items()}
    report(progress, f"{name}: {STEPS[3]}", 0, None)  # counted in demand placed by the packer
    t0 = time.perf_counter()
    demand = [k * weights[c] for c in compute]
    group = None
    if len(split.group) > 1:  # the group on the ranks, numbered 0..R-1: int32, |H| x R
        rank_of = np.full(n + 1, -1, dtype=np.int32)
        rank_of[compute] = np.arange(len(compute), dtype=np.int32)
        group = rank_of[split.group[:, compute]]
    if exact_height:
        assert max_height is not None
        status, found = pack_height_limited(len(compute), ccaps, demand, max_height,
                                            None if group is None else group.tolist(), HEIGHT_WORK)
        if found is None:
            raise HeightNotFound(f"k={k}: {status}")
        packed = PackResult(found, {"height_program": 1})
    elif group is not None:
        packed = pack_trees_symmetric(len(compute), ccaps, demand, group, progress=_prefixed(progress, name),
                                      blocks=_generator_orbits(gens, compute, n))
    else:
        packed = pack_trees(len(compute), ccaps, demand, progress=_prefixed(progress, name))
    stats["pack_s"] = time.perf_counter() - t0
    for key, value in packed.stats.items():
        stats[f"pack_{key}"] = value
    step(4)
    t0 = time.perf_counter()
    budget = 0 if exact_height else lowering_budget(len(compute), packed.stats.get("maxflows", 0)) \
        if max_height is None else 20_000
    lowered = lower_trees(len(compute), ccaps, packed.trees, target=max_height, budget=budget,
                          max_trees=len(packed.trees) + len(compute))
    packed.trees = lowered.trees
    if len(compute) <= LOWERING_RANKS:  # fewer box crossings in a row (the search grows with ranks x trees)
        box = [fabric.nodes[c].box for c in compute]
        packed.trees, stats["crossing_swaps"] = fewer_crossings(
            packed.trees, lambda u, v: box[u] is not None and box[u] != box[v])
    stats["lower_s"] = time.perf_counter() - t0
    for key, value in lowered.stats.items():
        stats[f"lower_{key}"] = value
    report(progress, f"{name}: {STEPS[5]}", 0, None)  # counted in trees below, once they are mapped back
    t0 = time.perf_counter()
    bundles = {a: dict(b) for a, b in split.paths.items()}
    stats["packed_trees"] = len(packed.trees)
    n_trees = len(packed.trees)
    packed_trees = packed.trees  # routed tree by tree and let go as they are: never two copies of N^2 edges
    packed.trees = lowered.trees = []
    packed_trees.reverse()

    def drain():
        while packed_trees:
            yield packed_trees.pop()

    names = [node.name for node in fabric.nodes]
    name_of = names.__getitem__

    # one Edge object per distinct (src, dst, path) (map_back makes each once): on a symmetric fabric N trees of
    # N-1 edges share a few thousand distinct edges, so the trees hold references, not N^2 objects
    def edge(x: int, y: int, p: Path) -> Edge:
        if reverse:
            return Edge(names[y], names[x], tuple(map(name_of, p[::-1])))
        return Edge(names[x], names[y], tuple(map(name_of, p)))

    bandwidth = {(u, v): bw for u, v, bw in fabric.arcs}
    routed = map_back(drain(), bundles, compute, edge, bandwidth)
    trees = []
    for done, (root, mult, edges) in enumerate(routed):
        if not done % 64:
            report(progress, f"{name}: {STEPS[5]}", done, n_trees)
        if reverse:
            edges.reverse()
        trees.append(ScheduleTree(names[root], mult, name, tuple(edges)))
    # link loads from what the trees took of each route (every unit taken once): distinct routes, not tree edges
    load: dict[tuple[int, int], int] = {}
    for arc, routes in split.paths.items():
        left = bundles.get(arc, {})
        for p, units in routes.items():
            used = units - left.get(p, 0)
            if used:
                for hop in zip(p, p[1:]):
                    load[hop] = load.get(hop, 0) + used
    stats["map_s"] = time.perf_counter() - t0
    report(progress, f"{name}: {STEPS[5]}", n_trees, n_trees)
    cut = tuple(fabric.nodes[i].name for i in rate.cut.nodes)
    ratio = max(Fraction(amount) / bandwidth[hop] for hop, amount in load.items())  # max over links of chunks / bandwidth
    return PhaseResult(name, k, scale, rate.rate, total, trees, cut, stats, ratio)


def _generator_orbits(gens: Sequence[Sequence[int]], compute: Sequence[int], n: int) -> list[list[int]]:
    """For each symmetry, the orbits of the group it generates on the ranks (an orbit label per rank): partitions
    the symmetric packer may feed its checks through (a box, a rail), not needed for its correctness."""
    from forestcoll.graph.symmetry import orbits

    rank_of = np.full(n + 1, -1, dtype=np.int64)
    rank_of[compute] = np.arange(len(compute))
    out = []
    for g in gens:
        on_ranks = rank_of[np.asarray(g, dtype=np.int64)[compute]]
        if (on_ranks >= 0).all():
            out.append(orbits(len(compute), [tuple(on_ranks.tolist())]))
    return out


def _prefixed(progress: Progress | None, phase: str) -> Progress | None:
    """``progress`` with the phase's name before each stage ("allgather: packing trees")."""
    if progress is None:
        return None
    return lambda stage, done, total=None: progress(f"{phase}: {stage}", done, total)


def _reverse_phase(phase: PhaseResult, name: str) -> PhaseResult:
    """Out-trees on a fabric equal to its own reverse, read backwards as in-trees (one reversed Edge per distinct
    Edge: the trees share them as the out-trees do, not 16.8M new objects at 4,096 ranks)."""
    distinct: dict[int, Edge] = {}
    for t in phase.trees:
        distinct.update(zip(map(id, t.edges), t.edges))  # C-level: a tree's edges at once
    backwards = {i: Edge(e.dst, e.src, tuple(reversed(e.path))) for i, e in distinct.items()}
    back = backwards.__getitem__
    trees = [ScheduleTree(t.root, t.chunks, name, tuple(map(back, map(id, reversed(t.edges))))) for t in phase.trees]
    return PhaseResult(
        name, phase.k, phase.scale, phase.rate, phase.total_weight, trees, phase.cut, dict(phase.stats), phase.load_ratio
    )


def fixed_k_reach(topo: Topology, collective: str, k: int, root: str | None = None,
                  symmetry: bool = True) -> tuple[Fraction, str | None]:
    """(an algbw :func:`generate` with ``k`` always reaches, the switch that keeps it below the k-tree cut bound
    :func:`~forestcoll.bound.fixed_k.fixed_k_algbw`, or None when it reaches that bound).

    Per phase the generator uses the smallest time scale U >= the cut bound's at which every switch, after
    rounding capacities down, can still pass on what it may send (:func:`phase_capacities`); its trees load no
    link beyond U, so algbw >= D / sum(U/k)."""
    coll = collectives.tree_collective(collective)
    weights = root_weights(topo, coll, root)
    total_time = Fraction(0)
    stuck: str | None = None
    for ph in coll.phases:
        prep = prepare_phase(topo, weights, ph.reversed, symmetry)
        low = min_scale_for_k(prep.oracle, k, prep.rate.rate)
        _k, scale, _arcs = phase_capacities(prep, weights, k)
        if scale != low and stuck is None:
            fabric = prep.fabric
            floors = floor_caps(prep.oracle, low)
            _none, at = trim_switch_excess(len(fabric.nodes), [(u, v, c) for (u, v, _), c in zip(fabric.arcs, floors)],
                                           fabric.is_compute, [k * w for w in weights], k * sum(weights))
            stuck = fabric.nodes[at].name if at is not None else "a switch"
        total_time += scale / k
    return sum(weights) / total_time, stuck


def generate(
    topo: Topology,
    collective: str = "allgather",
    k: int | None = None,
    root: str | None = None,
    symmetry: bool = True,
    max_k: int = DEFAULT_MAX_K,
    max_height: int | str | None = None,
    progress: Progress | None = None,
    shard_weights: Sequence[int] | None = None,
) -> Schedule:
    """A throughput-optimal (``k=None``) or best-with-``k``-trees-per-root schedule for ``collective``.

    With ``max_height`` every tree has at most that many hops: the optimal schedule when its trees can be
    lowered that far, else the fastest schedule with such trees that the search below finds (its algbw is
    exact, from its link loads, and below the bound; not proved the best possible for that height).
    ``max_height=LOWEST`` ("lowest"): the same schedule (same k, exactly the same algbw) with its trees lowered
    as far as the height search finds, one hop at a time (:func:`_lowest`; seconds where the default takes
    milliseconds, so not the default).
    Raises UsageError for bad parameters; the result verifies with :func:`forestcoll.verify.verify`.
    ``progress`` (:mod:`forestcoll.progress`) hears each phase's steps.  ``shard_weights`` (one positive int per
    compute node, allreduce / reduce_scatter / allgather): rank i's shard is w_i / sum(w) of the buffer
    (:attr:`Schedule.shard_weights`); the schedule is then optimal for those shards.
    """
    coll = collectives.tree_collective(collective)
    weights = root_weights(topo, coll, root)
    if shard_weights is not None:
        weights = _node_weights(topo, coll, shard_weights)
    if max_height is not None and max_height != LOWEST:
        check_height(topo, coll, weights, max_height)
    t0 = time.perf_counter()
    # millions of small objects (tree edges) are made and none is garbage: pause the cycle collector
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        if max_height is None:
            made = _assemble(topo, coll, weights, _phases(topo, coll, weights, k, symmetry, max_k, progress=progress), t0)
        elif max_height == LOWEST:
            made = _lowest(topo, coll, weights, k, symmetry, max_k, t0, progress)
        else:
            made = _limited(topo, coll, weights, k, symmetry, max_k, max_height, t0, progress)
        return made if symmetry else replace(made, symmetry=None)
    finally:
        if gc_was_enabled:
            gc.enable()


def _node_weights(topo: Topology, coll: collectives.Collective, shard_weights: Sequence[int]) -> tuple[int, ...]:
    """Per-node root weights from per-rank shard weights (0 on switches, :func:`forestcoll.bound.shards.node_weights`);
    UsageError when they do not fit."""
    from forestcoll.bound.shards import node_weights

    if coll.rooted:
        raise UsageError(f"shard weights are for allreduce, reduce_scatter and allgather, not {coll.name}")
    return node_weights(topo, shard_weights)


def check_height(topo: Topology, coll: collectives.Collective, weights: Sequence[int], max_height: int) -> None:
    """Refuse a height below the radius: a tree of root r has at least r's eccentricity (hops between ranks,
    a route through switches counting once)."""
    if max_height < 1:
        raise UsageError(f"--max-height must be >= 1, got {max_height}")
    tables = [rank_eccentricities(topo, reverse) for reverse in sorted({ph.reversed for ph in coll.phases})]
    roots = [i for i, w in enumerate(weights) if w > 0]
    ecc = {r: max(t[r] for t in tables) for r in roots}
    worst = max(roots, key=lambda r: (ecc[r], -r))
    if ecc[worst] > max_height:
        raise UsageError(f"no tree of height {max_height} exists: {topo.nodes[worst].name} is {ecc[worst]} hops from "
                         f"the farthest rank (hops between ranks; a path through switches counts once)")


def _phases(topo: Topology, coll: collectives.Collective, weights: Sequence[int], k: int | None, symmetry: bool,
            max_k: int, stretch: Fraction = Fraction(1), max_height: int | None = None,
            exact_height: bool = False, progress: Progress | None = None) -> list[PhaseResult]:
    solved: dict[str, PhaseResult] = {}
    mirrored = []
    for ph in coll.phases:
        twin = coll.mirror_of(ph) if topo.is_symmetric() else None
        if twin is not None:
            mirrored.append((ph, twin))  # read backwards from the out-tree phase below
        else:
            solved[ph.name] = solve_phase(topo, ph.name, weights, ph.reversed, k, symmetry, max_k, stretch, max_height,
                                          exact_height, progress)
    for ph, twin in mirrored:
        solved[ph.name] = _reverse_phase(solved[twin.name], ph.name)
    return [solved[ph.name] for ph in coll.phases]


def _height(phases: Sequence[PhaseResult]) -> int:
    return max(t.height() for p in phases for t in p.trees)


# the time scales the greedy height search tries (1 + s), then halves the gap between the last miss and the first hit
_STRETCH = [Fraction(1, 32), Fraction(1, 16), Fraction(1, 8), Fraction(1, 4), Fraction(1, 2), Fraction(1)]
_BISECT = 3


def _limited(topo: Topology, coll: collectives.Collective, weights: Sequence[int], k: int | None, symmetry: bool,
             max_k: int, max_height: int, t0: float, progress: Progress | None = None) -> Schedule:
    """The fastest schedule with trees of at most ``max_height`` hops that the search finds:

    1. the optimal (or given-k) schedule, lowered toward the height (:mod:`forestcoll.trees.shallow`);
    2. else unit trees from the constraint program (:mod:`forestcoll.trees.height`): first with that k (an
       exactly optimal schedule when the optimal k was asked for), then k = 1, 2, 4, ... below it while it finds
       them; the fastest wins;
    3. else the greedy packer with more time per tree (a slower rate, more room on every link) until the trees
       fit, then bisection between the last miss and the first hit."""
    found, tried = _height_search(topo, coll, weights, k, symmetry, max_k, max_height, progress)
    if found is None:
        raise TopologyError(f"no schedule with trees of at most {max_height} hops was found; allow more hops "
                            "(forestcoll generate without --max-height shows the optimal trees' height)")
    return _assemble(topo, coll, weights, found, t0, {"max_height": max_height, "height_search": tried})


def _height_search(topo: Topology, coll: collectives.Collective, weights: Sequence[int], k: int | None,
                   symmetry: bool, max_k: int, max_height: int, progress: Progress | None = None,
                   exact: Fraction | None = None) -> tuple[list[PhaseResult] | None, list[tuple[str, str, int | str]]]:
    """(the phases :func:`_limited` describes, or None when its search finds none; what it tried).  With ``exact``
    (an algbw) only phases of exactly that algbw count, and no k below the first is tried (it cannot reach it)."""
    def counts(cand: list[PhaseResult]) -> bool:
        return _height(cand) <= max_height and (exact is None or _algbw(cand) == exact)

    phases = _phases(topo, coll, weights, k, symmetry, max_k, max_height=max_height, progress=progress)
    tried: list[tuple[str, str, int | str]] = [(str(phases[0].k), "lowered", _height(phases))]
    if counts(phases):
        return phases, tried
    top_k = math.lcm(*(p.k for p in phases))
    best: list[PhaseResult] | None = None
    ks = [top_k] + ([] if exact is not None else [1 << i for i in range(top_k.bit_length()) if (1 << i) < top_k])
    for i, kk in enumerate(ks):
        try:
            cand = _phases(topo, coll, weights, kk, symmetry, max_k, max_height=max_height, exact_height=True,
                           progress=progress)
        except HeightNotFound as exc:
            tried.append((str(kk), "program", str(exc).split(": ")[-1]))
            if i:
                break  # a larger power of two would be harder still
            continue
        tried.append((str(kk), "program", _height(cand)))
        if exact is not None and not counts(cand):
            break
        if best is None or _algbw(cand) > _algbw(best):
            best = cand
        if i == 0:
            break  # the given (or optimal) k itself fits: nothing below it is faster
    if best is not None:
        return best, tried
    lo = Fraction(0)
    hi = None
    for s in _STRETCH:
        cand = _phases(topo, coll, weights, top_k, symmetry, max_k, 1 + s, max_height, progress=progress)
        tried.append((str(top_k), f"stretch {format_rational(1 + s)}", _height(cand)))
        if _height(cand) <= max_height:
            best, hi = cand, s
            break
        lo = s
    if best is None or hi is None:
        return None, tried
    for _ in range(_BISECT):
        mid = (lo + hi) / 2
        cand = _phases(topo, coll, weights, top_k, symmetry, max_k, 1 + mid, max_height, progress=progress)
        tried.append((str(top_k), f"stretch {format_rational(1 + mid)}", _height(cand)))
        if _height(cand) <= max_height:
            best, hi = cand, mid
        else:
            lo = mid
    return (best if counts(best) else None), tried


def _lowest(topo: Topology, coll: collectives.Collective, weights: Sequence[int], k: int | None, symmetry: bool,
            max_k: int, t0: float, progress: Progress | None = None) -> Schedule:
    """The schedule :func:`generate` makes (optimal, or the best with ``k``), then the height search of
    :func:`_limited` at H - 1, H - 2, ... hops, keeping each result of exactly the same algbw and k, down to the
    radius or the first height it does not find (``--max-height lowest``)."""
    phases = _phases(topo, coll, weights, k, symmetry, max_k, progress=progress)
    first, goal = _height(phases), _algbw(phases)
    tables = [rank_eccentricities(topo, reverse) for reverse in sorted({ph.reversed for ph in coll.phases})]
    floor = max(max(t[i] for t in tables) for i, w in enumerate(weights) if w > 0)  # no tree of root i is lower
    steps: list[tuple[int, int | None]] = []
    while _height(phases) > floor:
        target = _height(phases) - 1
        found, _tried = _height_search(topo, coll, weights, k, symmetry, max_k, target, progress, goal)
        steps.append((target, None if found is None else _height(found)))
        if found is None:
            break
        phases = found
    return _assemble(topo, coll, weights, phases, t0, {"lowest_height": {"first": first, "tried": steps}})


def _algbw(phases: Sequence[PhaseResult]) -> Fraction:
    return phases[0].total_weight / sum(p.load_ratio / p.k for p in phases)


def _assemble(topo: Topology, coll: collectives.Collective, weights: Sequence[int], phases: Sequence[PhaseResult],
              t0: float, extra: dict | None = None) -> Schedule:
    common_k = math.lcm(*(p.k for p in phases))
    trees = []
    for p in phases:
        factor = common_k // p.k
        trees.extend(ScheduleTree(t.root, t.chunks * factor, t.phase, t.edges) for t in p.trees)
    total = phases[0].total_weight
    algbw = total / sum(p.load_ratio / p.k for p in phases)
    # the optimum: phases run one after the other, each at its own x*
    bound_algbw = total / sum(1 / p.rate for p in phases)
    stats: dict[str, Any] = {"seconds": time.perf_counter() - t0, **(extra or {})}
    for p in phases:
        for key, value in p.stats.items():
            stats[f"{p.name}.{key}"] = value
    root_name = topo.nodes[weights.index(1)].name if coll.rooted else None
    shards = None if coll.rooted else tuple(w for w, c in zip(weights, topo.is_compute) if c)
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
        record=TopologyRecord(topo.name, topo.name, None, fingerprint(topo)),
        symmetry=_symmetry_record(topo, weights),
        shard_weights=None if shards is None or all(w == 1 for w in shards) else shards,
    )


def _symmetry_record(topo: Topology, weights: Sequence[int]) -> tuple | None:
    """(node names, generators) of the automorphisms generate packed with, for the version-2 file."""
    gens = invariant_symmetries(topo, weights)
    if not gens:
        return None
    return tuple(n.name for n in topo.nodes), tuple(tuple(int(x) for x in g) for g in gens)
