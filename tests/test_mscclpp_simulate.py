"""MSCCL++ plans on the network model: exported plans against their trees, real plans, errors."""

from __future__ import annotations

import pytest
from mscclpp_plans import allgather_put, parsed, wait
from test_mscclpp_plan import REAL

from forestcoll.errors import UsageError
from forestcoll.generate import generate
from forestcoll.mscclpp.export import export_mscclpp
from forestcoll.mscclpp.plan import PlanError, read_plan
from forestcoll.simulate import build_network, simulate
from forestcoll.simulate.mscclpp import simulate_plan
from forestcoll.topology import load_topology

GIB = 1 << 30


def ratio(spec, coll, k, size=GIB, **kw):
    topo = load_topology(spec)
    net = build_network(topo)
    sched = generate(topo, coll, k=k)
    plan = export_mscclpp(sched, topo, check=False, design_size=size, **kw).plan
    return simulate_plan(net, plan, size).algbw_gbps / simulate(net, sched, size=size).algbw_gbps


@pytest.mark.parametrize("coll,k", [("allgather", 1), ("allgather", None), ("allreduce", 1)])
def test_exported_plans_keep_up_with_their_trees(coll, k):
    assert ratio("dgx-a100:nodes=2", coll, k) >= 0.95


@pytest.mark.slow
@pytest.mark.parametrize("spec,coll,k", [("dgx-a100:nodes=2", "allreduce", None), ("mi250:nodes=2", "allreduce", 1),
                                         ("mi250:nodes=2", "allgather", 1)])
def test_exported_plans_keep_up_with_their_trees_slow(spec, coll, k):
    assert ratio(spec, coll, k) >= 0.95


def test_layouts_matter_on_deep_trees():
    # one block per level serialises trees that reach the block at different times
    assert ratio("mi250", "allgather", 1, layout="level") < ratio("mi250", "allgather", 1, layout="edge") + 1e-9


def test_bigger_calls_are_faster_per_byte():
    topo = load_topology("ring:n=4")
    net = build_network(topo)
    plan = export_mscclpp(generate(topo, "allreduce", k=1), topo, check=False).plan
    small = simulate_plan(net, plan, 1 << 20).algbw_gbps
    big = simulate_plan(net, plan, GIB).algbw_gbps
    assert 0 < small < big


def _topo_for(n):
    return {2: "fully-connected:n=2", 4: "fully-connected:n=4", 8: "dgx-a100"}[n]


@pytest.mark.skipif(not REAL, reason="../shared/data/mscclpp-plans not available")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_plans_simulate(path):
    plan = read_plan(path)
    net = build_network(load_topology(_topo_for(plan.ngpus)))
    r = simulate_plan(net, plan, 1 << 20, source=path.name)
    assert r.time_s > 0 and r.algbw_gbps > 0 and r.extra["threadblocks"] >= plan.ngpus


def test_errors():
    net = build_network(load_topology("ring:n=4"))
    with pytest.raises(UsageError, match="is for 2 GPUs but the topology has 4"):
        simulate_plan(net, parsed(allgather_put()), 64)
    d = allgather_put()
    for g in d["gpus"]:
        g["threadblocks"][0]["ops"].insert(3, wait(0))
    net2 = build_network(load_topology("fully-connected:n=2"))
    with pytest.raises(PlanError, match="wait on each other in a cycle"):
        simulate_plan(net2, parsed(d), 64)
    with pytest.raises(UsageError, match="size must be >= 1"):
        simulate_plan(net2, parsed(allgather_put()), 0)


def test_port_channels_inside_a_box_follow_the_transport():
    """Inside a host the executor carries a port channel over CUDA IPC (the box route); with port_transport="nic"
    it leaves the box through the network, as the trees' path does."""
    from forestcoll.simulate.plan_reader import leaving_route

    net = build_network(load_topology("mi250:nodes=2"))
    a, b = net.ranks.index("n0.gcd4"), net.ranks.index("n0.gcd13")
    names = lambda links: [net.names[net.ends[i][1]] for i in links]  # noqa: E731
    assert "ib" not in names(net.route(a, b)[0])
    assert names(leaving_route(net, a, b)[0]) == ["ib", "n0.gcd13"]
    c = net.ranks.index("n1.gcd4")
    assert leaving_route(net, a, c)[0] == net.route(a, c)[0]  # across boxes: the same route either way
    with pytest.raises(UsageError, match="unknown port transport"):
        simulate_plan(net, parsed(allgather_put()), 64, port_transport="pcie")


@pytest.mark.slow
def test_nic_port_channels_reach_the_trees_on_mi250(monkeypatch):
    """mi250:nodes=2 allgather k=2 split without the boxes (as before the splitting put such pairs last; with them no
    edge does): 23 tree edges join two GCDs of one box through the network.  With those port
    channels over the NICs the plan keeps up with its trees; over CUDA IPC (the executor's choice inside a host) the
    transfers share xGMI links the trees left to others."""
    import importlib

    gen = importlib.import_module("forestcoll.generate")

    topo = load_topology("mi250:nodes=2")
    net = build_network(topo)
    assert export_mscclpp(generate(topo, "allgather", k=2), topo, check=False).inbox_port_edges == 0
    split = gen.split_switches
    monkeypatch.setattr(gen, "split_switches", lambda *args, box=None, **kw: split(*args, **kw))
    sched = generate(topo, "allgather", k=2)
    res = export_mscclpp(sched, topo, check=False)
    assert res.inbox_port_edges > 0 and any("through the network" in n for n in res.notes)
    trees = simulate(net, sched, size=GIB).algbw_gbps
    nic = simulate_plan(net, res.plan, GIB, port_transport="nic").algbw_gbps
    ipc = simulate_plan(net, res.plan, GIB).algbw_gbps
    assert nic >= 0.95 * trees and ipc < 0.9 * trees
