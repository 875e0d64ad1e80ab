"""Allreduce with shards weighted by box (forestcoll.bound.shards): where boxes differ in ranks, the equal-shard
allreduce bound is not the allreduce optimum, and ``forestcoll bound -c allreduce`` says so in one line."""

from __future__ import annotations

import glob
import json
from fractions import Fraction

from conftest import ROOT, brute_force_rate, cli, fabrics
from hypothesis import given
from hypothesis import strategies as st

from forestcoll import load_topology, optimal_bound
from forestcoll.bound.report import bound_report
from forestcoll.bound.shards import box_shard_weights, box_weighted_allreduce, weighted_allreduce
from forestcoll.topology.builtins import BUILTINS
from forestcoll.topology.model import TopologyBuilder

UNEVEN = ROOT / "docs" / "examples" / "uneven-boxes.yaml"


def tiny_uneven():
    """Box a: two GPUs behind a 10 GB/s uplink; box b: one GPU behind the same; a network switch between."""
    b = TopologyBuilder("tiny-uneven")
    for g in ("a0", "a1"):
        b.compute(g, box="a")
    b.compute("b0", box="b")
    b.switch("sa", box="a")
    b.switch("sb", box="b")
    b.switch("net")
    for g in ("a0", "a1"):
        b.duplex(g, "sa", 100)
    b.duplex("b0", "sb", 100)
    b.duplex("sa", "net", 10)
    b.duplex("sb", "net", 10)
    return b.build()


def test_eight_and_four_gpu_boxes_give_75_8_and_25_2():
    """One 100 Gb/s NIC per box: equal shards put 8 shards through each NIC per phase (75/8 GB/s); shards weighted
    1 : 2 put 8 units through each NIC for 16 units of buffer (25/2)."""
    topo = load_topology(str(UNEVEN))
    assert optimal_bound(topo, "allreduce").algbw == Fraction(75, 8)
    found = box_weighted_allreduce(topo)
    assert found is not None and found.algbw == Fraction(25, 2)
    assert sorted(set(found.weights)) == [0, 1, 2]


def test_tiny_weighted_case_equals_brute_force_cut_enumeration():
    topo = tiny_uneven()
    weights = box_shard_weights(topo)
    assert weights == (1, 1, 2, 0, 0, 0)
    found = weighted_allreduce(topo, weights)
    assert found.allgather_rate == brute_force_rate(topo, weights) == 5
    assert found.reduce_scatter_rate == brute_force_rate(topo.reversed(), weights) == 5
    assert found.algbw == sum(weights) / (1 / found.reduce_scatter_rate + 1 / found.allgather_rate) == 10
    equal = optimal_bound(topo, "allreduce").algbw
    ones = tuple(int(c) for c in topo.is_compute)
    assert equal == 3 / (1 / brute_force_rate(topo.reversed(), ones) + 1 / brute_force_rate(topo, ones))
    assert equal == Fraction(15, 2) < found.algbw


@given(fabrics(max_compute=4, max_switches=2), st.lists(st.integers(1, 4), min_size=4, max_size=4))
def test_weighted_phase_rates_equal_brute_force(topo, draws):
    it = iter(draws)
    weights = tuple(next(it) if c else 0 for c in topo.is_compute)
    found = weighted_allreduce(topo, weights)
    assert found.allgather_rate == brute_force_rate(topo, weights)
    assert found.reduce_scatter_rate == brute_force_rate(topo.reversed(), weights)


def test_cli_says_where_weighted_shards_beat_the_bound():
    code, out, err = cli("bound", UNEVEN, "-c", "allreduce")
    assert code == 0, err
    line = [s for s in out.splitlines() if s.startswith("equal shards")]
    assert line == ["equal shards    the bound is the optimum of reduce-scatter + allgather with equal shards; "
                    "shards weighted by 1/(ranks in box) reach 25/2 GB/s (~12.5, 1.333x)"]
    code, out, _ = cli("bound", UNEVEN, "-c", "allreduce", "--json")
    data = json.loads(out)
    assert data["algbw_gbps"] == "75/8" and data["box_weighted_allreduce"]["algbw_gbps"] == "25/2"
    report = bound_report(load_topology(str(UNEVEN)), "allreduce")
    assert report.message.endswith("reach 25/2 GB/s (~12.5, 1.333x)")
    code, out, _ = cli("bound", UNEVEN, "-c", "allgather")  # the line is about allreduce only
    assert "equal shards" not in out


def test_equal_boxes_change_nothing():
    """Every built-in (as given and on 2 boxes) and every example has boxes of equal ranks (or none): no weights, so
    bound's text, JSON and progress are what they were."""
    specs = [name for name in BUILTINS] + [f"{name}:nodes=2" for name in BUILTINS if "nodes" in BUILTINS[name].params]
    specs += sorted(glob.glob(str(ROOT / "docs" / "examples" / "*"))) + sorted(glob.glob(str(ROOT / "examples" / "*")))
    for spec in specs:
        if spec.endswith("uneven-boxes.yaml"):
            continue
        assert box_shard_weights(load_topology(spec)) is None, spec
    report = bound_report(load_topology("dgx-a100:nodes=2"), "allreduce")
    assert report.weighted is None and "box_weighted_allreduce" not in report.to_dict()
    assert report.message == report.bound.message
    assert box_shard_weights(tiny_uneven().reversed()) is not None  # boxes survive reversal (the rs phase's fabric)
