"""All-to-all on the simulator: schedules reach the bound at large sizes; baselines on known fabrics."""

from __future__ import annotations

import pytest

from forestcoll.alltoall.schedule import generate_alltoall
from forestcoll.simulate.alltoall import compare_alltoall, simulate_alltoall
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "mi250:nodes=2", "ring:n=6"])
def test_schedule_reaches_the_bound_at_large_sizes(spec):
    topo = load_topology(spec)
    sched = generate_alltoall(topo).schedule
    net = build_network(topo)
    big = simulate_alltoall(net, sched, 1 << 30)
    small = simulate_alltoall(net, sched, 1 << 20)
    assert big.ok and small.ok
    assert 0.97 * float(sched.algbw) <= big.algbw_gbps <= float(sched.algbw) * (1 + 1e-9)
    assert small.algbw_gbps < big.algbw_gbps  # latency and pipeline fill
    assert big.result.collective == "alltoall"
    assert big.result.busbw_gbps == pytest.approx(big.algbw_gbps * (topo.num_compute - 1) / topo.num_compute)


def test_direct_is_optimal_on_a_full_mesh_and_matches_the_closed_form():
    topo = load_topology("fully-connected:n=5")
    net = build_network(topo)
    res = simulate_alltoall(net, "direct", 1 << 30)
    # each pair's 1 GiB/5 over its own 100 GB/s link, plus one link latency (1 us)
    want = (1 << 30) / ((1 << 30) / 5 / 100e9 + 1e-6) / 1e9
    assert res.algbw_gbps == pytest.approx(want, rel=1e-6)


def test_hierarchical_needs_equal_boxes():
    net = build_network(load_topology("ring:n=4"))
    res = simulate_alltoall(net, "hierarchical", 1 << 20)
    assert not res.ok and "boxes" in res.message


def test_rail_fabric_needs_pxn_or_forestcoll():
    topo = load_topology("dgx-h100:nodes=2,fabric=rail")
    sched = generate_alltoall(topo).schedule
    comp = compare_alltoall(build_network(topo), sched, [1 << 30])
    fc, hier = comp.rows["forestcoll"][0], comp.rows["hierarchical"][0]
    assert fc >= 0.97 * comp.bound_gbps and hier <= fc * (1 + 1e-9)
    assert comp.to_dict()["algbw_gbps"]["direct"][0] is not None


def test_bad_inputs():
    net = build_network(load_topology("ring:n=4"))
    assert not simulate_alltoall(net, "nope", 1 << 20).ok
    assert not simulate_alltoall(net, "direct", 0).ok
