"""LL (packet) plans on rail fabrics: port puts of packets to several peers, nodes with many in-tree children."""

from __future__ import annotations

from fractions import Fraction

import pytest

from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.topology.model import Link, Node, Topology, make_topology


def rails(boxes: int, gpus: int) -> Topology:
    """``boxes`` boxes of ``gpus`` GPUs on an NVSwitch (100 GB/s); GPU i of every box on rail i (10 GB/s)."""
    nodes = [Node(f"rail{r}", "switch") for r in range(gpus)]
    links: list[Link] = []

    def duplex(a: str, b: str, bw: int, cls: str) -> None:
        links.extend((Link(a, b, Fraction(bw), cls), Link(b, a, Fraction(bw), cls)))

    for b in range(boxes):
        nodes.append(Node(f"n{b}.nvswitch", "switch", f"n{b}"))
        for i in range(gpus):
            nodes.append(Node(f"n{b}.gpu{i}", "compute", f"n{b}"))
            duplex(f"n{b}.gpu{i}", f"n{b}.nvswitch", 100, "nvlink")
            duplex(f"n{b}.gpu{i}", f"rail{i}", 10, "net")
    return make_topology(nodes, links, f"rails{boxes}x{gpus}")


@pytest.mark.parametrize("coll", ["allgather", "reduce_scatter", "allreduce"])
def test_port_put_of_packets_to_two_peers_is_ordered_per_proxy(coll):
    """3 boxes of one GPU on one rail: the root's packets go to both peers in one ``ppkt`` through two port
    channels.  Each peer reads what its own channel's proxy wrote; before, the interpreter gave both readers the
    first proxy's knowledge, so the second proxy's read of call 1 looked unordered with call 3's ``cpkt``."""
    topo = rails(3, 1)
    plan = export_mscclpp(generate(topo, coll), topo, ExportOptions(protocol="LL", check=False)).plan
    multi = [op for g in plan.gpus for tb in g.threadblocks for op in tb.ops
             if op.name == "ppkt" and op.channel_type == "port" and len(op.dst) > 1]
    assert multi or coll != "allgather"
    run = run_plan(plan, launches=3)
    assert run.ok and not run.races, run.races
