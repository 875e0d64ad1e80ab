"""Schedules with weighted shards: the file key, its validation, the layout, and generate's contract."""

from __future__ import annotations

from fractions import Fraction

import pytest

from forestcoll.bound.shards import box_shard_weights, weighted_allreduce
from forestcoll.errors import ScheduleError, UsageError
from forestcoll.generate import generate
from forestcoll.schedule import schedule_from_dict, schedule_to_dict, shard_layout
from forestcoll.topology import load_topology

UNEVEN = "docs/examples/uneven-boxes.yaml"


def _rank_weights(topo):
    node = box_shard_weights(topo)
    return tuple(w for w, c in zip(node, topo.is_compute) if c)


def test_weighted_allreduce_reaches_the_weighted_optimum_and_round_trips():
    topo = load_topology(UNEVEN)
    w = _rank_weights(topo)
    assert len(set(w)) > 1
    s = generate(topo, "allreduce", shard_weights=w)
    assert s.shard_weights == w
    node_w = box_shard_weights(topo)
    assert s.bound_algbw == weighted_allreduce(topo, node_w).algbw
    for phase in ("reduce_scatter", "allgather"):
        per_root: dict[str, int] = {}
        for t in s.phase_trees(phase):
            per_root[t.root] = per_root.get(t.root, 0) + t.chunks
        assert [per_root[r] for r in s.ranks] == [s.k * x for x in w]
    total, starts = shard_layout(s)
    assert total == s.k * sum(w)
    assert starts[0] == 0 and starts[-1] == total - s.k * w[-1]
    back = schedule_from_dict(schedule_to_dict(s))
    assert back.shard_weights == w and back.trees == s.trees


def test_equal_weights_write_no_key():
    topo = load_topology("ring:n=4")
    s = generate(topo, "allreduce", shard_weights=(1, 1, 1, 1))
    assert s.shard_weights is None and "shard_weights" not in schedule_to_dict(s)
    assert s == generate(topo, "allreduce")
    assert shard_layout(s) == (4 * s.k, tuple(i * s.k for i in range(4)))


@pytest.mark.parametrize("bad", [[1, 2], [1, 0, 1, 1], [1, 1.5, 1, 1], [True, 1, 1, 1], "1111"])
def test_bad_shard_weights_in_a_file(bad):
    d = schedule_to_dict(generate(load_topology("ring:n=4"), "allreduce"))
    d["shard_weights"] = bad
    with pytest.raises(ScheduleError, match="shard_weights"):
        schedule_from_dict(d)


def test_shard_weights_refused_for_rooted_collectives():
    topo = load_topology("ring:n=4")
    with pytest.raises(UsageError):
        generate(topo, "broadcast", shard_weights=(2, 1, 1, 1))
    with pytest.raises(UsageError):
        generate(topo, "allreduce", shard_weights=(2, 1, 1))
    d = schedule_to_dict(generate(topo, "broadcast"))
    d["shard_weights"] = [2, 1, 1, 1]
    with pytest.raises(ScheduleError, match="not broadcast"):
        schedule_from_dict(d)


def test_weights_skew_the_rate_exactly():
    topo = load_topology("ring:n=4")
    s = generate(topo, "allgather", shard_weights=(3, 1, 1, 1))
    assert isinstance(s.algbw, Fraction) and s.algbw == s.bound_algbw
