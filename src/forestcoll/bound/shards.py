"""Allreduce with shards weighted by box: a rate that shows where the equal-shard allreduce bound is not the optimum.

ForestColl's allreduce is reduce-scatter then allgather with *equal* shards, and
:func:`~forestcoll.bound.optimal.optimal_bound` is the exact optimum of that
(algbw = N / (1/x_rs + 1/x_ag)).  Nothing makes the shards equal but the
formulation: an allreduce may let each rank own a share of the buffer of any
size.  Where boxes differ in ranks (an 8-GPU and a 4-GPU box behind one NIC
each), the box with fewer ranks must still send and receive as much per rank
as the other, so equal shards leave part of its NIC idle.

:func:`box_weighted_allreduce` runs the same two phases with rank r's shard
weighted by 1 / (ranks in r's box), as integer root weights (the lcm of the
box sizes divided by the box size), through the bound's own machinery: each
phase's exact rate per unit root weight x_rs(w), x_ag(w), and

    algbw(w) = D(w) / (1/x_rs(w) + 1/x_ag(w)),   D(w) = sum of the weights

(the buffer is D(w) units of weight; trees with root multiplicities w reach
each phase's x(w) by the same packing argument that makes the equal-shard
bound, w = 1, achievable, with the same caveat for switches that can send
more than they receive).  That is an *achievable* rate of weighted-shard
reduce-scatter + allgather: where it is above the equal-shard bound, it proves
that bound is not the allreduce optimum.  It is not a new bound: the best
weights maximise algbw(w), a ratio of non-linear functions of w (each x(w) is a
minimum over cuts), which this module does not solve; other weights (e.g. by
NIC bandwidth per rank where boxes differ in NICs) may be faster still.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from forestcoll.bound.optimal import phase_bound
from forestcoll.rational import format_rational
from forestcoll.topology.model import Topology

__all__ = ["WeightedShards", "box_shard_weights", "box_weighted_allreduce", "node_weights", "weighted_allreduce"]


@dataclass(frozen=True)
class WeightedShards:
    """An achievable allreduce algbw of reduce-scatter + allgather with rank i's shard ``weights[i]`` / sum units."""

    algbw: Fraction
    weights: tuple[int, ...]  # per node of the topology (0 for switches)
    reduce_scatter_rate: Fraction  # GB/s per unit root weight
    allgather_rate: Fraction

    def to_dict(self) -> dict[str, Any]:
        return {
            "algbw_gbps": format_rational(self.algbw),
            "weights": "1 / (ranks in box)",
            "reduce_scatter_rate_per_weight_gbps": format_rational(self.reduce_scatter_rate),
            "allgather_rate_per_weight_gbps": format_rational(self.allgather_rate),
        }


def box_shard_weights(topo: Topology) -> tuple[int, ...] | None:
    """Integer root weights lcm / (ranks in the rank's box) per node (0 for switches); None when every rank is in a
    box and all boxes hold as many ranks, or when some rank is in no box (nothing to weight by)."""
    per: dict[str, int] = {}
    for node in topo.nodes:
        if node.kind == "compute":
            if node.box is None:
                return None
            per[node.box] = per.get(node.box, 0) + 1
    if len(set(per.values())) <= 1:
        return None
    lcm = math.lcm(*per.values())
    return tuple(lcm // per[n.box] if n.kind == "compute" and n.box is not None else 0 for n in topo.nodes)


def node_weights(topo: Topology, shard_weights: Sequence[int]) -> tuple[int, ...]:
    """Per-rank shard weights (one positive integer per compute node, in order) as per-node root weights, 0 on the
    switches; UsageError (one line) when they are not one positive integer per rank."""
    from forestcoll.errors import UsageError

    ranks = topo.num_compute
    if len(shard_weights) != ranks or not all(
            isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in shard_weights):
        raise UsageError(f"shard weights must be {ranks} positive integers, one per rank")
    given = iter(shard_weights)
    return tuple(next(given) if c else 0 for c in topo.is_compute)


def weighted_allreduce(topo: Topology, weights: tuple[int, ...]) -> WeightedShards:
    """The exact algbw of reduce-scatter then allgather with root weights ``weights`` (one per node, >= 0, > 0 on
    every compute node): D / (1/x_rs + 1/x_ag), D = sum of the weights.  No symmetry: weights break the orbits."""
    rs = phase_bound(topo, "reduce_scatter", weights, True, symmetry=False).rate
    ag = phase_bound(topo, "allgather", weights, False, symmetry=False).rate
    return WeightedShards(sum(weights) / (1 / rs + 1 / ag), weights, rs, ag)


def box_weighted_allreduce(topo: Topology) -> WeightedShards | None:
    """:func:`weighted_allreduce` with shards weighted by 1 / (ranks in box); None where boxes are equal in ranks
    (then these weights are the equal shards) or a rank is in no box.  Costs two unsymmetric phase bounds."""
    weights = box_shard_weights(topo)
    return None if weights is None else weighted_allreduce(topo, weights)
