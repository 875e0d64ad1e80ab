"""Pieces of a schedule with weighted shards, where its buffer is laid out for the MSCCL++ plan and the executor.

A schedule with ``shard_weights`` (:attr:`forestcoll.schedule.Schedule.shard_weights`) gives rank r's shard k*w_r
of the k*D equal chunks of the buffer (D = sum of the weights), the contiguous chunks from k*(w_0 + ... + w_{r-1})
on (:func:`forestcoll.schedule.shard_layout`); the chunks of root r's trees sum to k*w_r in every phase.
:func:`weighted_pieces` cuts every root's k*w_r chunks with :func:`forestcoll.pieces.cut_pieces` (a piece lies
in one tree of each phase), and says where each root's shard starts in the buffer, so a back end
places piece (root, start) at buffer chunk ``starts[root] + start``.  With every weight 1 that is ``root * k +
start``, the equal-shard layout: the MSCCL++ lowering takes its pieces from here for every schedule; the
executor (:func:`forestcoll.runtime.plan.build_plans`) cuts each shard's elements into its k*w_r chunks by one rule
for equal and weighted shards.

:func:`root_waits` is the phase rule of a weighted allreduce's trees, which the trees simulation
(:mod:`forestcoll.simulate.trees`) and the torch executor's plans (:func:`forestcoll.runtime.plan.build_plans`)
both run: from :data:`ROOT_WAITS_BYTES` on, a root broadcasts its shard only once it has reduced all of it.
Below that, and with equal shards at every size, a piece's allgather starts as soon as its own reduce-scatter
has (docs/shards.md, "The two phases").
"""

from __future__ import annotations

from fractions import Fraction

from forestcoll import collectives
from forestcoll.pieces import Piece, TreeShape, cut_pieces
from forestcoll.schedule import Schedule
from forestcoll.topology import Topology

__all__ = ["ROOT_WAITS_BYTES", "WEIGHTED_COLLECTIVES", "refuse_weighted", "root_waits", "weighted_bound",
           "weighted_pieces"]

# the collectives a weighted schedule runs as, in the MSCCL++ plan and the torch executor: allreduce keeps the whole
# buffer on every rank; allgather / reduce-scatter calls give every rank an equal share (size / N), which weighted
# shards are not
WEIGHTED_COLLECTIVES = ("allreduce",)

# From this call size (bytes, the whole buffer) a weighted allreduce's roots broadcast their shards only once they
# have reduced all of them.  Weighted shards load the links unevenly in the two phases, and a reduce-scatter that
# shares links with allgathers already under way falls behind the fluid schedule of the bound (0.85-0.95 of it at
# 1 GiB on sweep seeds 0, 5, 9, 16); in sequence each phase reaches ~0.998.  Below this size the overlap's shorter
# pipeline is worth more (measured crossovers 2-32 MiB; docs/shards.md, "The two phases").
ROOT_WAITS_BYTES = 32 << 20


def root_waits(sched: Schedule, nbytes: float) -> bool:
    """Whether a call of ``nbytes`` (the whole buffer) of ``sched`` runs each root's allgather only after the
    root has reduced its whole shard: an allreduce with shard weights, from :data:`ROOT_WAITS_BYTES` on."""
    return sched.shard_weights is not None and sched.collective == "allreduce" and nbytes >= ROOT_WAITS_BYTES


def weighted_pieces(sched: Schedule, trees: list[TreeShape],
                    max_cnt: int) -> tuple[int, tuple[int, ...], list[Piece]]:
    """(k: chunks per unit of weight, the first buffer chunk of each rank's shard, the pieces) of ``sched``, whose
    root r carries k*w_r chunks in every phase; each piece lies in one tree per phase and moves at most ``max_cnt``
    chunks; ScheduleError when a root's trees carry another number.  k is the lcm of the phases' k."""
    k, pieces = cut_pieces(sched, trees, max_cnt)
    starts, at = [], 0
    for w in sched.weights:
        starts.append(at)
        at += k * w
    return k, tuple(starts), pieces


def refuse_weighted(sched: Schedule, what: str) -> str | None:
    """Why ``what`` (a back end) cannot run ``sched`` with its shard weights (one line), or None when it can: the
    schedule has none, or is an allreduce."""
    if sched.shard_weights is None or sched.collective in WEIGHTED_COLLECTIVES:
        return None
    coll = collectives.get(sched.collective)
    return (f"{what} runs weighted shards (shard_weights) as allreduce only: a {coll.name} call gives every rank "
            "an equal share of the buffer; generate this collective without shard weights")


def weighted_bound(topology: Topology, shard_weights: tuple[int, ...]) -> Fraction:
    """The exact allreduce algbw on ``topology`` of reduce-scatter + allgather with these shard weights (one per
    compute node, in order): :func:`forestcoll.bound.shards.weighted_allreduce` of
    :func:`~forestcoll.bound.shards.node_weights`."""
    from forestcoll.bound.shards import node_weights, weighted_allreduce

    return weighted_allreduce(topology, node_weights(topology, shard_weights)).algbw
