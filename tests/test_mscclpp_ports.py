"""The network ports the MSCCL++ executor drives (one per GPU) and the plans generate packs on them."""

from __future__ import annotations

from fractions import Fraction

from forestcoll.bound.optimal import optimal_bound
from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp, write_generated_plan, write_mscclpp
from forestcoll.mscclpp.ports import executor_ports
from forestcoll.simulate import build_network
from forestcoll.simulate.mscclpp import plan_rate, simulate_plan
from forestcoll.topology import load_topology
from forestcoll.topology.model import Link, Node, Topology, make_topology


def dual_port(nvlink: int = 20, one_switch: bool = False, ports: int = 2) -> Topology:
    """2 boxes of 2 GPUs on a switch (``nvlink`` GB/s each way); each GPU's NIC has ``ports`` ports of 10 GB/s,
    on rails (port p of NIC g on rail ports*g+p) or all on one switch."""
    nodes = [Node("fabric", "switch")] if one_switch else [Node(f"rail{r}", "switch") for r in range(2 * ports)]
    links: list[Link] = []

    def duplex(a: str, b: str, bw: int, cls: str) -> None:
        links.extend((Link(a, b, Fraction(bw), cls), Link(b, a, Fraction(bw), cls)))

    for b in range(2):
        nodes.append(Node(f"n{b}.nvswitch", "switch", f"n{b}"))
        for g in range(2):
            nodes += [Node(f"n{b}.gpu{g}", "compute", f"n{b}"), Node(f"n{b}.nic{g}", "switch", f"n{b}")]
            duplex(f"n{b}.gpu{g}", f"n{b}.nvswitch", nvlink, "nvlink")
            duplex(f"n{b}.gpu{g}", f"n{b}.nic{g}", 50, "pcie")
            for p in range(ports):
                duplex(f"n{b}.nic{g}", "fabric" if one_switch else f"rail{ports * g + p}", 10, "net")
    return make_topology(nodes, links, "dual-port")


def test_each_nic_keeps_the_port_the_gpus_route_takes():
    topo = dual_port()
    ports = executor_ports(topo)
    assert (ports.dropped, ports.ports) == (4, 8)
    kept = {(ln.src, ln.dst) for ln in ports.topology.links if ln.cls == "net"}
    assert kept == {(f"n{b}.nic{g}", f"rail{2 * g}") for b in range(2) for g in range(2)} | \
        {(f"rail{2 * g}", f"n{b}.nic{g}") for b in range(2) for g in range(2)}
    assert "rail1" not in ports.topology.index and ports.topology.compute_nodes == topo.compute_nodes
    assert optimal_bound(topo, "allgather").algbw == Fraction(160, 3)  # the GPUs' links, not the ports, bind
    assert optimal_bound(ports.topology, "allgather").algbw == 40


def test_parallel_ports_on_one_switch_count_once():
    ports = executor_ports(dual_port(one_switch=True))
    assert (ports.dropped, ports.ports) == (4, 8)
    assert sum(1 for ln in ports.topology.links if ln.src == "n0.nic0" and ln.dst == "fabric") == 1


def test_single_port_nics_and_builtins_are_unchanged():
    topo = dual_port(ports=1)
    assert executor_ports(topo).topology is topo
    for spec in ("dgx-a100:nodes=2", "mi250:nodes=2", "dgx-h100:nodes=2"):
        assert executor_ports(load_topology(spec)).dropped == 0


def test_generated_plan_is_packed_on_the_driven_ports(tmp_path):
    """On the whole fabric the trees send twice what one port carries through it: their plan reaches 0.67 of
    what the executor can drive; packed on the driven ports it reaches it (the H100 dump at --nodes 2: 234.8 ->
    350.5 GB/s, 360 the bound there)."""
    topo = dual_port()
    net = build_network(topo)
    opts = ExportOptions(max_threadblocks=64)
    whole = export_mscclpp(generate(topo, "allgather"), topo, opts)
    assert simulate_plan(net, whole.plan, 1 << 30).algbw_gbps < 0.7 * 40
    sched, result = write_generated_plan(topo, "allgather", str(tmp_path / "p.json"), options=opts,
                                         plan_rate=plan_rate(topo))
    assert sched.bound_algbw == 40
    assert simulate_plan(net, result.plan, 1 << 30).algbw_gbps >= 0.95 * 40
    assert result.checks and (tmp_path / "p.json").exists()
    assert any("drives one network port per GPU" in n and "allgather bound 40.0 GB/s there, 75.0% of the fabric's 53.3"
               in n for n in result.notes)


def test_export_of_trees_on_idle_ports_says_so(tmp_path):
    topo = dual_port()
    opts = ExportOptions(max_threadblocks=64, check=False)
    result = write_mscclpp(generate(topo, "allgather"), str(tmp_path / "p.json"), topo, opts)
    assert any("cross boxes on network ports the executor does not drive" in n and "4 of the 8 ports" in n
               for n in result.notes)
    driven = executor_ports(topo).topology
    result = write_mscclpp(generate(driven, "allgather"), str(tmp_path / "q.json"), topo, opts)
    assert not any("does not drive" in n for n in result.notes)


def test_kept_ports_are_the_ones_the_simulators_port_channels_take():
    """On the H100 dump (two ports per NIC) x4 rail: 32 of 64 ports dropped, and every route a port channel takes
    between boxes (the model's route) stays on kept links; the bounds are the docs' 120 / 240 GB/s."""
    from conftest import shared_file

    topo = load_topology(str(shared_file("data", "nccl-topo", "H100-topology.xml")), {"nodes": "4", "fabric": "rail"})
    ports = executor_ports(topo)
    assert (ports.dropped, ports.ports) == (32, 64)
    kept = {(ln.src, ln.dst) for ln in ports.topology.links}
    net = build_network(topo)
    for a in range(0, 32, 3):
        for b in (a + 8) % 32, (a + 16) % 32:
            links, _lat = net.route(a, b)
            assert all((net.names[net.ends[i][0]], net.names[net.ends[i][1]]) in kept for i in links)
    assert optimal_bound(ports.topology, "allreduce").algbw == 120
    assert optimal_bound(ports.topology, "allgather").algbw == 240
