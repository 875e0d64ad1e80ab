"""A collective's bound together with what a user compares it with: what ``forestcoll bound`` reports.

The bound of ``collective`` (with its certificate cuts), the bounds of the
fabric's other all-rank collectives (allgather, reduce-scatter, allreduce: the
allgather cut is the fabric's bottleneck), and optionally the best algbw with
exactly ``k`` trees per root (:func:`~forestcoll.bound.fixed_k.fixed_k_algbw`).
For an allreduce on boxes that differ in ranks, also the rate of shards weighted
by box (:func:`~forestcoll.bound.shards.box_weighted_allreduce`) where it beats
the bound, and the best weights' (:mod:`forestcoll.bound.best_shards`) where
they beat both: the bound is the optimum of equal shards, not of every allreduce.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from forestcoll import collectives
from forestcoll.bound.best_shards import BestShards, best_shard_weights
from forestcoll.bound.fixed_k import fixed_k_algbw
from forestcoll.bound.optimal import Bound, optimal_bound
from forestcoll.bound.shards import WeightedShards, box_shard_weights, weighted_allreduce
from forestcoll.collectives import ALLGATHER, ALLREDUCE
from forestcoll.errors import UsageError
from forestcoll.progress import Progress, report
from forestcoll.rational import format_rational
from forestcoll.topology.model import Topology

__all__ = ["BoundReport", "bound_report"]


@dataclass(frozen=True)
class BoundReport:
    """``bound`` of the requested collective, ``companions`` (name -> Bound of every all-rank tree collective),
    and with ``k`` the best algbw of k trees per root.  A result (:mod:`forestcoll.results`)."""

    topology: str
    compute_nodes: int
    switch_nodes: int
    bound: Bound
    companions: dict[str, Bound]
    k: int | None = None
    fixed_k_algbw: Fraction | None = None
    # when switches that send more than they receive keep k-tree schedules below fixed_k_algbw: what forestcoll's
    # k trees reach at least (generate --k K reaches this or more) and why (set by forestcoll.generate.fixed_k_reach)
    fixed_k_reached: Fraction | None = None
    fixed_k_warning: str | None = None
    # allreduce only, set only where it is above the bound: shards weighted by 1 / (ranks in box) reach this
    weighted: WeightedShards | None = None
    # allreduce only, set only where it is above both: the exact best shard weights (bound/best_shards.py)
    best: BestShards | None = None

    @property
    def ok(self) -> bool:
        return True

    @property
    def message(self) -> str:
        if self.weighted is None and self.best is None:
            return self.bound.message
        return f"{self.bound.message}; {self.weighted_note}"

    @property
    def weighted_note(self) -> str:
        """One line: the bound is the optimum of equal shards and weighted shards beat it ('' without ``weighted``
        or ``best``)."""
        if self.weighted is None and self.best is None:
            return ""
        parts = []
        for what, w in (("shards weighted by 1/(ranks in box)", self.weighted and self.weighted.algbw),
                        ("the best shard weights", self.best and self.best.algbw)):
            if w:
                parts.append(f"{what} reach {format_rational(w)} GB/s (~{float(w):.6g}, "
                             f"{float(w / self.bound.algbw):.4g}x)")
        if self.best is not None and self.best.reached != self.best.algbw:
            r = self.best.reached
            parts[-1] += f"; positive integer weights {format_rational(r)} (~{float(r):.6g})"
        return "the bound is the optimum of reduce-scatter + allgather with equal shards; " + "; ".join(parts)

    @property
    def fabric_cut(self):
        """The allgather bottleneck: the cut that limits every all-rank collective on the fabric."""
        return self.companions[ALLGATHER.name].phases[0]

    def to_dict(self) -> dict[str, Any]:
        fr = format_rational
        main = self.bound
        cut = self.fabric_cut
        data: dict[str, Any] = {
            "topology": self.topology,
            "compute_nodes": self.compute_nodes,
            "switch_nodes": self.switch_nodes,
            "collective": main.collective,
            "algbw_gbps": fr(main.algbw),
            "busbw_gbps": fr(main.busbw),
            **{f"{name}_algbw_gbps": fr(b.algbw) for name, b in self.companions.items()},
            "bottleneck_cut": list(cut.cut_nodes),
            "bottleneck_cut_bandwidth_gbps": fr(cut.cut_bandwidth),
            "bottleneck_cut_ranks": cut.cut_weight,
            "phases": [p.to_dict() for p in main.phases],
        }
        if main.root is not None:
            data["root"] = main.root
        if self.fixed_k_algbw is not None:
            data["k"] = self.k
            data["fixed_k_algbw_gbps"] = fr(self.fixed_k_algbw)
            data["fixed_k_achievable"] = self.fixed_k_warning is None
            if self.fixed_k_reached is not None:
                data["fixed_k_reached_gbps"] = fr(self.fixed_k_reached)
            if self.fixed_k_warning is not None:
                data["fixed_k_warning"] = self.fixed_k_warning
        if self.weighted is not None:
            data["box_weighted_allreduce"] = self.weighted.to_dict()
        if self.best is not None:
            data["best_weighted_allreduce"] = {"algbw_gbps": format_rational(self.best.algbw),
                                               "integer_weights_algbw_gbps": format_rational(self.best.reached)}
        warnings = sorted({s for p in self.bound.phases for s in p.unbalanced})
        if warnings:
            data["unbalanced_switches"] = warnings
        return data


def bound_report(topo: Topology, collective: str = "allgather", root: str | None = None, k: int | None = None,
                 symmetry: bool = True, progress: Progress | None = None) -> BoundReport:
    """The bound of ``collective`` on ``topo`` with its companions (see the module docstring); ``progress``
    (:mod:`forestcoll.progress`) hears each bound as it is computed.  ``topo`` may be a
    :class:`~forestcoll.bound.cluster.ClusterModel` (all-rank collectives, no ``k``): the same report, unbuilt."""
    from forestcoll.bound.cluster import ClusterModel, cluster_bound_report

    if isinstance(topo, ClusterModel):
        if k is not None or not symmetry:
            raise UsageError("a cluster bounded without building it takes no k and always uses its symmetry")
        return cluster_bound_report(topo, collective, progress)
    coll = collectives.get(collective)
    main: Bound | None = None
    companions: dict[str, Bound] = {}
    others = [c for c in collectives.COLLECTIVES.values() if not c.rooted and c.tree_based]
    weights = box_shard_weights(topo) if coll is ALLREDUCE else None
    steps = len(others) + (coll not in others) + (k is not None) + (weights is not None)
    for done, other in enumerate(others):
        report(progress, f"bound: {other.name}", done, steps)
        if other is coll:
            main = companions[other.name] = optimal_bound(topo, coll.name, root, symmetry)
        else:
            companions[other.name] = optimal_bound(topo, other.name, symmetry=symmetry)
    if main is None:
        report(progress, f"bound: {coll.name}", len(others), steps)
        main = optimal_bound(topo, coll.name, root, symmetry)
    if k is not None:
        report(progress, f"bound: k={k}", steps - 1 - (weights is not None), steps)
    fixed = fixed_k_algbw(topo, coll.name, k, root, symmetry) if k is not None else None
    weighted = None
    if weights is not None:
        report(progress, "bound: allreduce with shards weighted by box", steps - 1, steps)
        weighted = weighted_allreduce(topo, weights)
    if weighted is not None and weighted.algbw <= main.algbw:
        weighted = None
    try:
        best = best_shard_weights(topo) if coll is ALLREDUCE else None
    except RuntimeError:  # too many digits for the program's max-flows (or no convergence): the line without it
        best = None
    if best is not None and best.algbw <= max(main.algbw, weighted.algbw if weighted is not None else 0):
        best = None
    return BoundReport(topo.name, topo.num_compute, len(topo.switch_nodes), main, companions, k, fixed,
                       weighted=weighted, best=best)
