"""Equal-cost routes of a rank pair, and the MSCCL model's channels on them."""

from __future__ import annotations

import pytest

from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.generate import generate
from forestcoll.msccl.export import export_msccl
from forestcoll.simulate import simulate
from forestcoll.simulate.msccl import channel_routes, simulate_msccl
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

LEAF_SPINE = "dgx-h100:nodes=2,fabric=leaf-spine,leaf_ports=8,oversub=2"


def test_equal_routes_differ_only_in_switches():
    net = build_network(load_topology(LEAF_SPINE))
    a, b = net.ranks.index("n0.gpu0"), net.ranks.index("n1.gpu0")
    routes = net.equal_routes(a, b)
    assert routes[0] == net.route(a, b) and len(routes) == 2  # one per spine
    spines = {net.names[net.ends[i][1]] for links, _ in routes for i in links if "spine" in net.names[net.ends[i][1]]}
    assert spines == {"spine0", "spine1"}
    inside = net.equal_routes(a, net.ranks.index("n0.gpu1"))
    assert inside == [net.route(a, net.ranks.index("n0.gpu1"))]  # through the box's NVSwitch only
    relayed = build_network(load_topology("dgx-a100:nodes=2"))
    x, y = relayed.ranks.index("n0.gpu0"), relayed.ranks.index("n1.gpu1")  # another IB plane: a relay, no ECMP
    assert relayed.equal_routes(x, y) == [relayed.route(x, y)]


def test_connections_spread_over_spines_and_channels_pick_nic_ports():
    """ECMP: one connection's bytes spread over the spines (the average of the hashing); NIC ports: one per
    channel, so a second instance (other channels) doubles what a two-port NIC delivers."""
    topo = load_topology(LEAF_SPINE)
    net = build_network(topo)
    sched = generate(topo, "allgather")
    trees = simulate(net, sched, size=1 << 30).algbw_gbps
    one = simulate_msccl(export_msccl(sched).algo, net, 1 << 30).algbw_gbps
    # the file pipelines in the MSCCL kernel's 2 MiB chunks of two slices, the trees by NCCL's finer tree rule;
    # the spread over both spines keeps the file within 5 % of them
    assert one == pytest.approx(trees, rel=0.05)
    a, b = net.ranks.index("n0.gpu0"), net.ranks.index("n1.gpu0")
    assert len(channel_routes(net, {}, a, b, 0)) == 2  # both spines, whatever the channel
    ports = build_network(load_topology("switch:n=2"))  # no ports to choose: one route, as before
    assert ports.equal_routes(0, 1) == [ports.route(0, 1)]


def test_two_port_nics_need_two_channels():
    from conftest import shared_file

    topo = load_topology(str(shared_file("data", "nccl-topo", "H100-topology.xml")), {"nodes": "2", "fabric": "rail"})
    net = build_network(topo)
    sched = generate_alltoall(topo, chunks="auto").schedule
    out = export_msccl(sched)
    assert out.channels == 2  # the exporter puts a pair's two NIC-port routes on two channels
    assert simulate_msccl(out.algo, net, 1 << 30).algbw_gbps >= 0.97 * float(sched.algbw)
    a, b = net.ranks.index("n0.gpu0"), net.ranks.index("n1.gpu0")
    assert len(net.equal_routes(a, b)) == 2
    cache: dict = {}
    port0, port1 = channel_routes(net, cache, a, b, 0), channel_routes(net, cache, a, b, 1)
    assert len(port0) == len(port1) == 1 and port0 != port1 and channel_routes(net, cache, a, b, 2) == port0


def test_alltoall_xml_delivers_the_schedule_on_two_spines():
    topo = load_topology("dgx-h100:nodes=4,fabric=leaf-spine,leaf_ports=16,oversub=2")
    net = build_network(topo)
    sched = generate_alltoall(topo, chunks="auto").schedule
    out = export_msccl(sched)
    assert simulate_msccl(out.algo, net, 1 << 30).algbw_gbps >= 0.97 * float(sched.algbw)


def test_a_file_rate_searches_each_pair_s_routes_once(monkeypatch):
    # the simulations of one FileRate share its routes (msccl_program's ``routes``): no pair searched twice, the
    # same rate as a simulation that searches them afresh
    from forestcoll.simulate.msccl import file_rate

    topo = load_topology(LEAF_SPINE)
    algo = export_msccl(generate(topo, "allgather", k=1)).algo
    rate = file_rate(topo)
    searched = []
    equal_routes = type(rate.net).equal_routes

    def counted(self, a, b):
        searched.append((a, b))
        return equal_routes(self, a, b)
    monkeypatch.setattr(type(rate.net), "equal_routes", counted)
    first = rate(algo, 1 << 20)
    assert searched and len(searched) == len(set(searched))
    before = len(searched)
    assert rate(algo, 16 << 20) > 0 and len(searched) == before
    assert first == simulate_msccl(algo, build_network(topo), 1 << 20).algbw_gbps
