"""MSCCL XML of a weighted-shard allreduce: rank i reduces and broadcasts k*w_i of the k*D chunks (nchunksperloop)."""

from __future__ import annotations

import pytest

from forestcoll.bound.shards import box_shard_weights
from forestcoll.errors import ForestCollError
from forestcoll.generate import generate
from forestcoll.msccl.export import ExportOptions, export_msccl, self_check
from forestcoll.msccl.fabric import fabric_options
from forestcoll.simulate.msccl import simulate_msccl
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

UNEVEN = "docs/examples/uneven-boxes.yaml"


@pytest.fixture(scope="module")
def uneven():
    topo = load_topology(UNEVEN)
    w = tuple(x for x, c in zip(box_shard_weights(topo), topo.is_compute) if c)
    return topo, generate(topo, "allreduce", shard_weights=w)


def test_weighted_file_runs_right_and_reaches_the_weighted_bound(uneven):
    topo, s = uneven
    result = export_msccl(s, fabric_options(ExportOptions(), topo))
    assert result.algo.nchunksperloop == s.k * 16
    assert any(c.startswith("weighted shards: rank i reduces w_i/16") for c in result.algo.comments)
    lines = self_check(result)  # lint, then the interpreter in both modes: results right, inputs untouched
    assert any("inputs untouched" in x for x in lines)
    net = build_network(topo)
    assert simulate_msccl(result.algo, net, 1 << 30).algbw_gbps >= 0.95 * 12.5


def test_each_rank_reduces_its_own_weighted_range(uneven):
    """The in-tree of root i ends at rank i with the chunks k*(w_0+..+w_{i-1}) .. + k*w_i (shard_layout)."""
    from forestcoll.schedule import shard_layout

    topo, s = uneven
    algo = export_msccl(s, fabric_options(ExportOptions(), topo)).algo
    total, starts = shard_layout(s)
    reduced: dict[int, set[int]] = {}
    for gpu in algo.gpus:  # a reduce-scatter step that completes a chunk at its owner: recv-reduce-copy, then sends
        for tb in gpu.tbs:
            for st in tb.steps:
                if st.type == "rrc":
                    reduced.setdefault(gpu.id, set()).update(range(st.dstoff, st.dstoff + st.cnt))
    for i, w in enumerate(s.weights):
        own = set(range(starts[i], starts[i] + s.k * w))
        assert own <= reduced[i]
    assert total == algo.nchunksperloop


def test_weighted_allgather_has_no_msccl_form():
    topo = load_topology("ring:n=4")
    s = generate(topo, "allgather", shard_weights=(2, 1, 1, 1))
    with pytest.raises(ForestCollError, match="weighted shards are for allreduce"):
        export_msccl(s)
    equal = generate(topo, "allgather")
    plain = export_msccl(equal).algo
    assert plain.nchunksperloop == 4 * equal.k and not any("weighted" in c for c in plain.comments)

