"""The trees simulator with weighted shards: chunk sizes from the schedule's layout (buffer / (k*D)), not from N."""

from __future__ import annotations

from fractions import Fraction

import pytest

from forestcoll.bound.shards import box_shard_weights
from forestcoll.errors import ScheduleError
from forestcoll.generate import generate
from forestcoll.pieces import cut_pieces, schedule_shards, shape_trees
from forestcoll.simulate.core import simulate
from forestcoll.simulate.network import build_network
from forestcoll.simulate.trees import tree_program
from forestcoll.topology import load_topology

UNEVEN = "docs/examples/uneven-boxes.yaml"


@pytest.fixture(scope="module")
def uneven():
    topo = load_topology(UNEVEN)
    w = tuple(x for x, c in zip(box_shard_weights(topo), topo.is_compute) if c)
    return topo, build_network(topo), generate(topo, "allreduce", shard_weights=w), generate(topo, "allreduce")


def test_pieces_cover_k_times_w_chunks_per_root(uneven):
    _topo, _net, s, _e = uneven
    k, pieces = cut_pieces(s, shape_trees(s), 1 << 40)
    per: dict[int, int] = {}
    for pc in pieces:
        per[pc.root] = per.get(pc.root, 0) + pc.cnt
    assert [per[i] for i in range(len(s.ranks))] == [k * w for w in s.weights]
    assert schedule_shards(s) == 16


def test_every_byte_of_the_buffer_is_moved_once_per_root_tree(uneven):
    _topo, net, s, _e = uneven
    size = float(1 << 24)
    prog = tree_program(s, net, size, 1 << 20, None).build()
    # every rank but the root receives (allgather) / sends (reduce-scatter) each chunk once: 2 x (N-1) x size
    assert float(prog.nbytes.sum()) == pytest.approx(2 * (len(s.ranks) - 1) * size)


def test_weighted_schedule_reaches_the_weighted_bound_at_1gib(uneven):
    _topo, net, s, e = uneven
    assert s.bound_algbw == Fraction(25, 2) and e.bound_algbw == Fraction(75, 8)
    weighted = simulate(net, s, size=1 << 30)
    equal = simulate(net, e, size=1 << 30)
    assert weighted.algbw_gbps >= 0.95 * 12.5
    assert equal.algbw_gbps <= 75 / 8 * 1.001  # equal shards cannot pass their own bound
    assert "weighted shards" in weighted.extra["notes"][0] and "25/2" in weighted.extra["notes"][0]
    assert "notes" not in equal.extra


def test_weights_the_trees_do_not_carry_are_refused(uneven):
    import dataclasses

    _topo, net, s, _e = uneven
    with pytest.raises(ScheduleError, match="chunks, not k=1"):
        simulate(net, dataclasses.replace(s, shard_weights=None), size=1 << 20)
