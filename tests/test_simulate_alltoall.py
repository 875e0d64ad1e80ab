"""All-to-all on the simulator: schedules reach the bound at large sizes; baselines on known fabrics."""

from __future__ import annotations

import pytest

from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.errors import UsageError
from forestcoll.simulate import simulate
from forestcoll.simulate.alltoall import simulate_alltoall
from forestcoll.simulate.compare import compare
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "mi250:nodes=2", "ring:n=6"])
def test_schedule_reaches_the_bound_at_large_sizes(spec):
    topo = load_topology(spec)
    sched = generate_alltoall(topo).schedule
    net = build_network(topo)
    big = simulate(net, sched, size=1 << 30)  # the generic entry point dispatches on the schedule
    small = simulate_alltoall(net, sched, 1 << 20)
    assert 0.97 * float(sched.algbw) <= big.algbw_gbps <= float(sched.algbw) * (1 + 1e-9)
    assert small.algbw_gbps < big.algbw_gbps  # latency and pipeline fill
    assert big.collective == "alltoall" and big.algorithm == "forestcoll" and big.extra["k"] == sched.k
    assert big.busbw_gbps == pytest.approx(big.algbw_gbps * (topo.num_compute - 1) / topo.num_compute)


def test_direct_is_optimal_on_a_full_mesh_and_matches_the_closed_form():
    topo = load_topology("fully-connected:n=5")
    net = build_network(topo)
    res = simulate(net, "direct", "alltoall", 1 << 30)
    # each pair's 1 GiB/5 over its own 100 GB/s link, plus one link latency (1 us)
    want = (1 << 30) / ((1 << 30) / 5 / 100e9 + 1e-6) / 1e9
    assert res.algbw_gbps == pytest.approx(want, rel=1e-6)


def test_hierarchical_needs_equal_boxes_and_ring_has_no_alltoall_form():
    net = build_network(load_topology("ring:n=4"))
    with pytest.raises(UsageError, match="hierarchical has no alltoall form on this fabric; choose direct"):
        simulate(net, "hierarchical", "all-to-all", 1 << 20)
    with pytest.raises(UsageError, match="ring has no alltoall form"):
        simulate(net, "ring", "alltoall", 1 << 20)


def test_rail_fabric_needs_pxn_or_forestcoll():
    topo = load_topology("dgx-h100:nodes=2,fabric=rail")
    sched = generate_alltoall(topo).schedule
    net = build_network(topo)
    comp = compare(topo, net, "alltoall", [1 << 30], {"forestcoll": sched}, ["direct", "hierarchical", "ring"])
    assert comp.algorithms() == ["forestcoll", "direct", "hierarchical"]  # ring has no alltoall form: left out
    fc, hier = comp.get("forestcoll", 1 << 30).algbw_gbps, comp.get("hierarchical", 1 << 30).algbw_gbps
    assert fc >= 0.97 * float(comp.bound_algbw) and hier <= fc * (1 + 1e-9)
    assert comp.bound_algbw == sched.bound_algbw


def test_bad_inputs():
    net = build_network(load_topology("ring:n=4"))
    with pytest.raises(UsageError, match="unknown all-to-all algorithm"):
        simulate_alltoall(net, "nope", 1 << 20)
    with pytest.raises(UsageError, match="size"):
        simulate_alltoall(net, "direct", 0)
