"""``generate --shards``: equal allreduce shards or weighted ones, and how reports name them.

Where boxes hold different numbers of ranks, reduce-scatter + allgather with
rank i's shard weighted by 1/(ranks in i's box) can beat the equal-shard bound
(:mod:`forestcoll.bound.shards`; docs/examples/uneven-boxes.yaml: 75/8 vs 25/2
GB/s), and where boxes differ in NICs other weights can
(:mod:`forestcoll.bound.best_shards`, the exact best weights).  ``auto`` (the
default) takes the fastest of equal, box and the best weights by exact rate,
ties to the simpler, so a fabric where equal shards are optimal gets the
equal-shard schedule it got before, byte for byte; where the ranks form one
orbit nothing more is computed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from forestcoll.errors import TopologyError, UsageError
from forestcoll.rational import format_rational
from forestcoll.topology.model import Topology

if TYPE_CHECKING:
    from fractions import Fraction

    from forestcoll.schedule import Schedule

__all__ = [
    "BOX_CONTRACT", "SHARDS", "ShardRates", "choose_shard_weights", "describe_shards", "generate_with_shards", "rank_weights",
    "shard_rates", "with_shards",
]

T = TypeVar("T")

SHARDS = ("auto", "equal", "box")
BOX_CONTRACT = "shards weighted 1/(ranks in box)"


def rank_weights(topo: Topology, node_weights: tuple[int, ...]) -> tuple[int, ...]:
    """Per-node root weights (0 on switches) as per-rank shard weights, in rank order."""
    return tuple(w for w, c in zip(node_weights, topo.is_compute) if c)


class ShardRates:
    """One topology's box weights (per node, None where boxes are equal in ranks or a rank is in no box) and, computed
    once when first asked, its exact allreduce rates with equal and with box-weighted shards."""

    def __init__(self, topo: Topology) -> None:
        from forestcoll.bound.shards import box_shard_weights

        self.topo = topo
        self.node = box_shard_weights(topo)

    @cached_property
    def equal(self) -> Fraction:
        from forestcoll.bound.optimal import optimal_bound

        return optimal_bound(self.topo, "allreduce").algbw

    @cached_property
    def weighted(self) -> Fraction:
        from forestcoll.bound.shards import weighted_allreduce

        assert self.node is not None
        return weighted_allreduce(self.topo, self.node).algbw


_LAST: list[ShardRates] = []  # the last topology's rates: choose_shard_weights, then describe_shards on its schedule


def shard_rates(topo: Topology) -> ShardRates:
    """``topo``'s :class:`ShardRates`, the same object for the same topology object as last time (so ``generate``
    computes each bound once for the choice and the report)."""
    if not _LAST or _LAST[0].topo is not topo:
        _LAST[:] = [ShardRates(topo)]
    return _LAST[0]


def choose_shard_weights(topo: Topology, collective: str, mode: str | None, output: str) -> tuple[int, ...] | None:
    """The per-rank shard weights ``generate --shards MODE`` uses (None: equal shards); ``output`` is ``json``,
    ``msccl``, ``mscclpp`` or ``sizes`` (where the weights are offered beside equal shards, per size).  UsageError
    (one line) for a flag that cannot apply."""
    from forestcoll import collectives
    from forestcoll.bound.best_shards import auto_shard_weights

    if mode is not None and mode not in SHARDS:
        raise UsageError(f"--shards must be one of {', '.join(SHARDS)}, got {mode!r}")
    coll = collectives.canonical(collective)
    if coll != "allreduce":
        if mode is not None:
            raise UsageError(f"--shards applies to allreduce (how the buffer is split among ranks); {coll} has equal shards")
        return None
    if mode == "equal":
        return None
    if mode == "box":
        node = shard_rates(topo).node
        if node is None:
            loose = next((n.name for n in topo.nodes if n.kind == "compute" and n.box is None), None)
            if loose is not None:
                raise UsageError(f"--shards box: rank {loose} is in no box, so there is no box to weight its shard by")
            return None  # boxes equal in ranks: box weights are the equal shards
        return rank_weights(topo, node)
    chosen = auto_shard_weights(topo, shard_rates(topo))  # the fastest of equal, box and the best weights (bound/best_shards.py)
    return None if chosen is None else rank_weights(topo, chosen[0])


def generate_with_shards(topo: Topology, collective: str, weights: tuple[int, ...] | None, mode: str | None,
                         **kwargs: Any) -> Schedule:
    """``generate(topo, collective, shard_weights=weights, **kwargs)``; under ``auto`` (``mode`` None or "auto"),
    the equal-shard schedule where the weighted optimum has no tree schedule (a switch that can send more than it
    receives, sweep seed 4), as before ``--shards`` existed."""
    from forestcoll.generate import generate

    return with_shards(lambda **more: generate(topo, collective, **kwargs, **more), weights, mode)


def with_shards(make: Callable[..., T], weights: tuple[int, ...] | None, mode: str | None) -> T:
    """``make(shard_weights=weights)``, or ``make()`` for equal shards; under ``auto`` also ``make()`` where the
    weighted optimum has no tree schedule (TopologyError), as :func:`generate_with_shards` says."""
    if weights is None:
        return make()
    try:
        return make(shard_weights=weights)
    except TopologyError:
        if mode == "box":
            raise
    return make()


def describe_shards(weights: tuple[int, ...] | None, topo: Topology | None) -> str:
    """One line on a schedule's shards: which contract its rates are measured against, and the equal-shard bound
    on ``topo`` for allreduce ('' for equal shards)."""
    if weights is None:
        return ""
    rates = shard_rates(topo) if topo is not None else None
    box = rates is not None and rates.node is not None and rank_weights(rates.topo, rates.node) == tuple(weights)
    parts = sorted(set(weights))
    text = (f"{'weighted 1/(ranks in box)' if box else 'weighted'} (rank i owns k x w_i of the k x {sum(weights)} "
            f"chunks, w {parts[0]}..{parts[-1]}): algbw and bound are for these shards")
    if rates is not None and len(weights) == rates.topo.num_compute:
        equal = rates.equal
        text += f"; equal shards' bound {format_rational(equal)} GB/s (~{float(equal):.4g})"
    return text
