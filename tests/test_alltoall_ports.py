"""All-to-all MSCCL++ plans on the ports the executor drives: the whole fabric's flows routed on those ports
raced against the flows generated there (simulate/alltoall_ports.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import shared_file
from test_mscclpp_ports import dual_port

from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.alltoall.mscclpp import export_alltoall_mscclpp
from forestcoll.alltoall.verify import verify_alltoall
from forestcoll.mscclpp.export import ExportOptions
from forestcoll.mscclpp.ports import driven_ports, idle_path_note
from forestcoll.simulate import build_network
from forestcoll.simulate.alltoall_ports import generate_for_executor, rerouted
from forestcoll.simulate.mscclpp import simulate_plan
from forestcoll.topology import load_topology

OPTS = ExportOptions(inplace=False, max_threadblocks=132)


def test_rerouted_flows_stay_on_the_driven_ports():
    """The whole fabric's flows, each hop over an idle port moved to the executor's route, are optimal on the driven
    ports of the dual-port fabric; a claim the flows do not reach is refused."""
    topo = dual_port()
    driven = driven_ports(topo)
    whole = generate_alltoall(topo, chunks="auto").schedule
    like = generate_alltoall(driven, chunks="auto").schedule
    assert idle_path_note([f.path for f in whole.flows], topo) is not None
    moved = rerouted(whole, driven, build_network(driven), like)
    assert moved is not None and moved.algbw == like.algbw == moved.bound_algbw
    assert idle_path_note([f.path for f in moved.flows], topo) is None
    assert verify_alltoall(moved, driven).ok
    assert rerouted(whole, driven, build_network(driven), replace(like, algbw=2 * like.algbw,
                                                                   bound_algbw=2 * like.algbw)) is None


@pytest.mark.parametrize("rates, picked", [
    (((20.0, 30.0), (21.0, 30.0)), True),  # faster at 16 MiB, as fast at 1 GiB: the rerouted flows
    (((20.0, 30.0), (21.0, 29.9)), False),  # slower at 1 GiB: the driven flows
    (((20.0, 30.0), (20.0, 31.0)), False),  # a tie at 16 MiB: the driven flows
])
def test_the_race_keeps_the_driven_flows_unless_the_others_win(monkeypatch, rates, picked):
    from forestcoll.simulate import alltoall_ports

    topo = dual_port()
    driven = generate_alltoall(driven_ports(topo), chunks="auto").schedule
    told = iter(rates)
    monkeypatch.setattr(alltoall_ports, "_rates", lambda *a: next(told))
    made = generate_for_executor(topo, OPTS, chunks="auto", symmetry=True)
    assert (made.schedule != driven) is picked
    assert ("routed on the driven ports: their plan 21.0 GB/s at 16 MiB (the driven flows' 20.0)" in made.message) \
        is picked
    assert made.schedule.algbw == driven.algbw and idle_path_note([f.path for f in made.schedule.flows], topo) is None


def test_single_port_fabrics_keep_the_generated_flows():
    single = dual_port(ports=1)
    made = generate_for_executor(single, OPTS, chunks="auto", symmetry=True)
    assert made.schedule == generate_alltoall(single, chunks="auto").schedule


@pytest.mark.slow
def test_h100_alltoall_plan_as_fast_as_the_whole_fabric_flows():
    """H100 dump x4 rail: the flows generated on the driven ports (k=2) relay 528 of 992 pairs after the network hop
    and their plan runs 25.5 GB/s at 16 MiB; the whole fabric's flows (k=6) routed on the driven ports are optimal
    there too (30 GB/s) and their plan runs 26.6 at 16 MiB, 29.9 at 1 GiB: they are the ones written."""
    path = shared_file("data", "nccl-topo", "H100-topology.xml")
    if not path.exists():
        pytest.skip("needs ../shared/data/nccl-topo")
    topo = load_topology(str(path), {"nodes": "4", "fabric": "rail"})
    made = generate_for_executor(topo, OPTS, chunks="auto", symmetry=True)
    sched = made.schedule
    assert sched.k == 6 and sched.algbw == sched.bound_algbw == 30 and "routed on the driven ports" in made.message
    assert idle_path_note([f.path for f in sched.flows], topo) is None
    plan = export_alltoall_mscclpp(sched, topo, replace(OPTS, check=False)).plan
    net = build_network(topo)
    assert simulate_plan(net, plan, 16 << 20).algbw_gbps > 26.5
    assert simulate_plan(net, plan, 1 << 30).algbw_gbps > 29.9
