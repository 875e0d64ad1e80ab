"""The verifier with weighted shards: k*w_i chunks per root, loads against the weighted rate, claims checked."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import pytest

from forestcoll.bound.shards import box_shard_weights, weighted_allreduce
from forestcoll.generate import generate
from forestcoll.schedule import read_schedule, schedule_from_dict, schedule_to_dict, write_schedule
from forestcoll.topology import load_topology
from forestcoll.verify import verify

UNEVEN = "docs/examples/uneven-boxes.yaml"


@pytest.fixture(scope="module")
def uneven():
    topo = load_topology(UNEVEN)
    node = box_shard_weights(topo)
    w = tuple(x for x, c in zip(node, topo.is_compute) if c)
    return topo, w, generate(topo, "allreduce", shard_weights=w)


def test_weighted_schedule_is_certified_at_the_weighted_rate(uneven, tmp_path):
    topo, w, s = uneven
    best = weighted_allreduce(topo, box_shard_weights(topo)).algbw
    assert best == Fraction(25, 2)
    rep = verify(s, topo)
    assert rep.ok and rep.certified_optimal, rep.errors
    assert rep.algbw == rep.bound_algbw == best
    for phase in ("reduce_scatter", "allgather"):  # k chunks per unit of weight
        assert sum(t.chunks for t in s.phase_trees(phase)) == s.k * sum(w) == s.k * 16
    for version in ("v1", "v2"):  # v2: checked orbit by orbit (the group keeps the weights)
        path = tmp_path / f"w-{version}.json"
        write_schedule(s, str(path), version)
        back = read_schedule(str(path), expand=False)
        assert back.shard_weights == w
        again = verify(back, topo)
        assert again.certified_optimal and again.algbw == best, again.errors


def test_a_file_whose_weights_its_trees_do_not_carry_is_refused(uneven):
    topo, w, s = uneven
    d = schedule_to_dict(s)
    del d["shard_weights"]  # the trees carry 2 chunks for the small box's ranks, the file now claims equal shards
    rep = verify(schedule_from_dict(d), topo)
    assert not rep.ok
    assert any("chunks, expected k=1" in e for e in rep.errors)
    d["shard_weights"] = list(reversed(w))  # weights of the wrong ranks
    rep = verify(schedule_from_dict(d), topo)
    assert not rep.ok and any("shard weight" in e for e in rep.errors)


def test_equal_trees_claiming_weights_are_refused(uneven):
    topo, w, _s = uneven
    equal = generate(topo, "allreduce")
    assert equal.algbw == Fraction(75, 8)
    rep = verify(dataclasses.replace(equal, shard_weights=w), topo)
    assert not rep.ok and any("expected k*w=" in e for e in rep.errors)


def test_weighted_rate_claims_are_checked(uneven):
    topo, _w, s = uneven
    rep = verify(dataclasses.replace(s, algbw=Fraction(75, 8), bound_algbw=Fraction(75, 8)), topo)
    assert not rep.ok
    assert any("link loads give 25/2" in e for e in rep.errors)
    assert any("bottleneck cut proves 25/2" in e for e in rep.errors)


def test_weighted_allgather_on_a_ring_verifies():
    topo = load_topology("ring:n=4")
    s = generate(topo, "allgather", shard_weights=(3, 1, 1, 1))
    rep = verify(s, topo)
    assert rep.ok and rep.algbw == s.algbw == s.bound_algbw
    assert verify(dataclasses.replace(s, shard_weights=(1, 1, 1, 3)), topo).ok is False
