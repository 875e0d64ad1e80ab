"""LL (packet) plans on rail fabrics: port puts of packets to several peers, nodes with many in-tree children."""

from __future__ import annotations

from fractions import Fraction

import pytest
from conftest import ROOT

from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.mscclpp.lint import lint_plan
from forestcoll.mscclpp.semantics import MAX_BUFFERS_PER_OPERATION
from forestcoll.topology import load_topology
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


def test_many_in_tree_children_fold_into_partial_sums():
    """3 boxes of 9 GPUs: a node adds its input and 10 children's packets, 11 sources where an operation holds
    10 (the lint error the H100 dump at 4 boxes showed); the lowering folds the first 9 into a partial sum."""
    topo = rails(3, 9)
    plan = export_mscclpp(generate(topo, "allreduce"), topo, ExportOptions(protocol="LL", check=False)).plan
    srcs = [len(op.src or ()) for g in plan.gpus for tb in g.threadblocks for op in tb.ops]
    assert max(srcs) == MAX_BUFFERS_PER_OPERATION
    report = lint_plan(plan)
    assert not report.errors, report.errors[:3]


@pytest.mark.slow
def test_many_in_tree_children_plan_passes_its_self_check():
    topo = rails(3, 9)
    r = export_mscclpp(generate(topo, "allreduce"), topo, ExportOptions(protocol="LL"))
    assert "no data race" in r.checks[0] and "3 back-to-back calls" in r.checks[0]


@pytest.mark.slow
def test_a_pieces_operations_stay_in_one_block():
    """2 boxes of 10 GPUs: over 30 operations in one (phase, level) group; split inside one piece's operations,
    the plan deadlocked (a reader spun on packets forever)."""
    topo = rails(2, 10)
    r = export_mscclpp(generate(topo, "allreduce"), topo, ExportOptions(protocol="LL"))
    assert "no data race" in r.checks[0]


def test_split_keeps_a_pieces_operations_together():
    from forestcoll.mscclpp.export_ll import _Op, _split

    members = [_Op(0, (0, 1), "upkt", [], [], order=(p, 0)) for p in range(29)]
    members += [_Op(0, (0, 1), name, [], [], order=(29, 0)) for name in ("cpkt", "rppkt", "ppkt")]
    blocks = _split(members)
    assert [len(b) for b in blocks] == [32]
    blocks = _split(members + [_Op(0, (0, 1), "upkt", [], [], order=(30, 0))])
    assert [len(b) for b in blocks] == [32, 1]


def test_ll_scratch_is_as_large_on_every_gpu():
    """An LL sender puts packets at its own double-buffer offset in a peer's scratch (the executor's scratchOffset_):
    where boxes differ in size the GPUs use different numbers of slots, and the plan failed its self-check (a put
    past a smaller peer's scratch) until every GPU got the largest scratch."""
    topo = load_topology(str(ROOT / "docs" / "examples" / "uneven-boxes.yaml"))
    r = export_mscclpp(generate(topo, "allreduce"), topo, ExportOptions(protocol="LL"))
    assert len({g.scratch_chunks for g in r.plan.gpus}) == 1 and r.checks
