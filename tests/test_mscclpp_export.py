"""Lowering schedules to MSCCL++ plans: every catalog fabric, options, limits, self-check, random fabrics."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import fabrics, refused_for_imbalance
from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll.errors import UsageError
from forestcoll.generate import generate
from forestcoll.mscclpp import export as export_mod
from forestcoll.mscclpp import layouts as layouts_mod
from forestcoll.mscclpp.export import ExportError, ExportOptions, export_mscclpp, self_check
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.mscclpp.lint import lint_plan
from forestcoll.mscclpp.lower import box_numbers, port_edges
from forestcoll.mscclpp.plan import parse_plan, plan_from_json, plan_to_json, write_plan
from forestcoll.mscclpp.semantics import MAX_OPERATION, OP_NAMES
from forestcoll.pieces import piece_rule, shape_trees
from forestcoll.topology import load_topology

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")
# every catalog fabric (the MSCCL exporter's list); the fast tier keeps the quick ones
FAST = ["dgx-h100", "dgx-b200", "ring:n=6", "fully-connected:n=5", "switch:n=4"]
SLOW = ["hgx-h100", "hgx-h100:nics=4", "mi300x", "dgx-1", "ndv2", "torus:dims=3x3", "hypercube:dim=3",
        "dgx-a100:nodes=2", "mi250", "hetero", "dgx-h100:nodes=2"]
TOP_KEYS = {"name", "collective", "protocol", "inplace", "reuse_resources", "gpus", "num_threads_per_block",
            "use_double_scratch_buffer", "buffer_alignment", "min_message_size", "max_message_size"}
GPU_KEYS = {"id", "input_chunks", "output_chunks", "scratch_chunks", "threadblocks", "channels", "remote_buffers",
            "semaphores"}


def check_catalog(spec: str) -> None:
    topo = load_topology(spec)
    for coll in COLLECTIVES:
        for k in (None, 1):
            sched = generate(topo, coll, k=k)
            for inplace in (True, False):
                result = export_mscclpp(sched, topo, inplace=inplace)  # self-checked: lint + interpreter, 2 calls
                assert len(result.checks) == 2 and all("OK" in line for line in result.checks)
                plan = result.plan
                assert lint_plan(plan).findings == []  # not even a warning
                assert result.stats.ops_per_threadblock <= MAX_OPERATION
                _shape(plan)


def _shape(plan) -> None:
    """Only top-level fields the parser reads and operation names the executor knows."""
    d = plan_to_json(plan)
    assert set(d) <= TOP_KEYS and {"name", "collective", "protocol", "inplace", "gpus"} <= set(d)
    for g in d["gpus"]:
        assert set(g) <= GPU_KEYS and {"id", "input_chunks", "output_chunks", "scratch_chunks", "threadblocks",
                                       "channels"} <= set(g)
        for t in g["threadblocks"]:
            for o in t["ops"]:
                assert o["name"] in OP_NAMES
                for x in o.get("ops", []):
                    assert x["name"] in OP_NAMES


@pytest.mark.parametrize("spec", FAST)
def test_catalog_exports_check_themselves(spec):
    check_catalog(spec)


@pytest.mark.slow
@pytest.mark.parametrize("spec", SLOW)
def test_catalog_exports_check_themselves_slow(spec):
    check_catalog(spec)


@pytest.mark.parametrize("coll", ("broadcast", "reduce"))
@pytest.mark.parametrize("spec", ["ring:n=5", "dgx-a100:nodes=2", "hypercube:dim=3"])
def test_rooted_collectives(spec, coll):
    topo = load_topology(spec)
    for k in (None, 1):
        sched = generate(topo, coll, k=k)
        for inplace in (True, False):
            r = export_mscclpp(sched, topo, inplace=inplace)
            assert r.plan.collective == coll and all("from root 0" in line for line in r.checks)


@pytest.mark.parametrize("spec", ["ring:n=4", pytest.param("dgx-a100:nodes=2", marks=pytest.mark.slow),
                                  pytest.param("hypercube:dim=3", marks=pytest.mark.slow)])
def test_ll_plans(spec):
    topo = load_topology(spec)
    for coll in COLLECTIVES:
        sched = generate(topo, coll, k=1 if spec != "ring:n=4" else None)
        for inplace in (True, False):
            r = export_mscclpp(sched, topo, protocol="LL", inplace=inplace)
            plan = r.plan
            assert plan.protocol == "LL" and plan.setting("use_double_scratch_buffer")
            assert plan.setting("max_message_size") == 1 << 20
            assert "3 back-to-back calls" in r.checks[0]  # packets: checked over three calls
            ops = {op.name for g in plan.gpus for tb in g.threadblocks for op in tb.ops}
            assert ops <= {"ppkt", "rppkt", "upkt", "cpkt", "respkt", "repkt", "recpkt", "nop", "copy"}
            assert not ops & {"signal", "wait"}


def test_ll_refuses_rooted_collectives():
    sched = generate(load_topology("ring:n=4"), "broadcast", k=1)
    with pytest.raises(ExportError, match="LL plans are made for allgather, reducescatter and allreduce"):
        export_mscclpp(sched, protocol="LL")


def test_boxes_decide_channel_types():
    topo = load_topology("dgx-a100:nodes=2")
    sched = generate(topo, "allgather", k=1)
    assert box_numbers(sched, topo) == (0,) * 8 + (1,) * 8  # the topology's Node.box
    plan = export_mscclpp(sched, topo).plan
    for g in plan.gpus:
        for ch in g.channels:
            for peer in ch.connected_to:
                assert (ch.channel_type == "memory") == (peer // 8 == g.id // 8)
    assert lint_plan(plan, ranks_per_node=8).ok  # memory channels never leave a node


def test_channel_type_follows_each_edges_physical_path(monkeypatch):
    """mi250:nodes=2 at k=2 split without the boxes (with them the splitting keeps such pairs off the network): some
    trees join two GCDs of one box through the network (gcd -> switch -> gcd); those edges take port channels, the
    edges on xGMI memory channels."""
    import importlib

    gen = importlib.import_module("forestcoll.generate")

    split = gen.split_switches
    monkeypatch.setattr(gen, "split_switches", lambda *args, box=None, **kw: split(*args, **kw))
    topo = load_topology("mi250:nodes=2")
    sched = generate(topo, "allgather", k=2)
    boxes = box_numbers(sched, topo)
    leaving = {e for edges in port_edges(sched, topo) for e in edges}
    inbox_port = {(u, v) for u, v in leaving if boxes[u] == boxes[v]}
    assert inbox_port  # the optimal trees use the NICs inside a box
    index = {r: i for i, r in enumerate(sched.ranks)}
    for tree in sched.trees:
        for e in tree.edges:
            u, v = index[e.src], index[e.dst]
            assert ((u, v) in leaving) == ("ib" in e.path)
    plan = export_mscclpp(sched, topo, check=False).plan
    port_peers = {(g.id, p) for g in plan.gpus for ch in g.channels if ch.channel_type == "port" for p in ch.connected_to}
    assert {(u, v) for u, v in inbox_port} <= port_peers
    mem_peers = {(g.id, p) for g in plan.gpus for ch in g.channels if ch.channel_type == "memory" for p in ch.connected_to}
    assert all(boxes[a] == boxes[b] for a, b in mem_peers)


def test_chunk_layout_and_fields():
    topo = load_topology("ring:n=4")
    sched = generate(topo, "allgather", k=2)
    r = export_mscclpp(sched, topo, name="ag4", min_message_size=1024, max_message_size=1 << 20)
    plan = r.plan
    assert plan.name == "ag4" and plan.collective == "allgather" and plan.inplace
    assert (plan.setting("min_message_size"), plan.setting("max_message_size")) == (1024, 1 << 20)
    assert [(g.input_chunks, g.output_chunks) for g in plan.gpus] == [(2, 8)] * 4
    assert r.chunks_per_root == 2 and r.to_dict()["ok"] and "self-checked" in r.message
    rs = export_mscclpp(generate(topo, "reduce_scatter", k=2), topo).plan
    assert [(g.input_chunks, g.output_chunks) for g in rs.gpus] == [(8, 2)] * 4
    # no scratch: partial sums are read from the children (same box) and kept in the output (allreduce)
    ar = export_mscclpp(generate(topo, "allreduce", k=2), topo).plan
    assert all(g.scratch_chunks == 0 for g in ar.gpus)
    assert any(op.name == "pipeline" and any(x.name == "rre" for x in op.ops) for g in ar.gpus
               for tb in g.threadblocks for op in tb.ops)


def test_odd_chunk_counts_are_noted():
    topo = load_topology("dgx-a100:nodes=2")
    r = export_mscclpp(generate(topo, "allgather"), topo, check=False)  # k = 13: 208 chunks
    assert any("multiple of 3328 bytes" in n for n in r.notes)
    assert not r.checks and "not self-checked" in r.message


def test_layouts():
    topo = load_topology("mi250")
    sched = generate(topo, "allreduce", k=1)
    tbs = {}
    for layout in ("edge", "source", "level"):
        r = export_mscclpp(sched, topo, layout=layout)
        tbs[layout] = r.stats.threadblocks_per_gpu
        assert r.layout == layout
    assert tbs["edge"] >= tbs["source"] >= tbs["level"]
    auto = export_mscclpp(sched, topo, check=False, max_threadblocks=tbs["edge"] - 1)
    # an allreduce's in-tree and out-tree blocks share thread blocks first (test_mscclpp_share.py); a collective of
    # one phase goes to mixed
    assert auto.layout == "shared" and auto.stats.threadblocks_per_gpu <= tbs["edge"] - 1
    ag = generate(topo, "allgather", k=1)
    ag_edge = export_mscclpp(ag, topo, layout="edge", check=False).stats.threadblocks_per_gpu
    assert export_mscclpp(ag, topo, check=False, max_threadblocks=ag_edge - 1).layout == "mixed"
    # mixed: per GPU and tree level, the finest grain the limit leaves room for; anything from edge to level
    for limit in range(tbs["level"], tbs["edge"] + 1, 3):
        mixed = export_mscclpp(sched, topo, layout="mixed", max_threadblocks=limit, check=limit == tbs["level"])
        assert mixed.stats.threadblocks_per_gpu <= limit
    assert export_mscclpp(sched, topo, layout="mixed", check=False, max_threadblocks=tbs["edge"]).plan == \
        export_mscclpp(sched, topo, layout="edge", check=False).plan
    with pytest.raises(ExportError) as info:
        export_mscclpp(sched, topo, check=False, max_threadblocks=2)
    msg = str(info.value)
    # the refusal names the layout with the fewest blocks: for an allreduce, level grains shared
    shared = int(msg.split(" needs ")[1].split()[0])
    assert shared < tbs["level"] and "thread blocks per GPU even at the 'shared' layout" in msg
    assert "more than the 2 a GPU runs at once" in msg and "no smaller k exists" in msg and "\n" not in msg
    with pytest.raises(ExportError, match="generate with a smaller k .fewer trees; a power of two such as --k 4"):
        export_mscclpp(generate(topo, "allreduce", k=2), topo, check=False, max_threadblocks=2)


def test_pipeline_units():
    topo = load_topology("ring:n=4")
    sched = generate(topo, "allgather", k=2)
    r = export_mscclpp(sched, topo, unit_bytes=64, max_message_size=1 << 20, check=False)
    assert r.units == {1: 64}
    pipes = [op for g in r.plan.gpus for tb in g.threadblocks for op in tb.ops if op.name == "pipeline"]
    assert pipes and all(op.iter_context == (64, 1) for op in pipes)
    # at the design size a piece moves in the slices the simulator cuts its trees in (pieces.piece_rule): ring:n=4's
    # trees are 2 hops deep, cut by NCCL's tree rule in 512 KiB chunks with no cap (a 128 MiB chunk: 256 slices) ...
    assert {piece_rule([t], False) for t in shape_trees(sched)} == {("tree", 2)}
    r = export_mscclpp(sched, topo, design_size=1 << 30, check=False)
    assert r.units == {1: 512 << 10}
    # ... a cap is still an option (16 slices of 8 MiB) ...
    assert export_mscclpp(sched, topo, design_size=1 << 30, max_slices=16, check=False).units == {1: 8 << 20}
    # ... small pieces on deep trees get halved chunks: at 1 MiB on mi250 (16 GCDs, trees 4-6 deep) a piece is
    # 64 KiB, which NCCL's rule cuts in chunks of 32 KiB (the plan serving up to 1 MiB) ...
    mi = load_topology("mi250")
    deep = generate(mi, "allreduce", k=1)
    assert export_mscclpp(deep, mi, design_size=1 << 20, max_message_size=1 << 20, check=False).units == {1: 32 << 10}
    # ... and never more than 65,535 iterations at the largest size (4 GiB - 1: 65,552-byte units at least)
    bcast = generate(mi, "broadcast", k=1)
    assert export_mscclpp(bcast, mi, design_size=1 << 20, check=False).units == {1: 65552}
    assert export_mscclpp(bcast, mi, design_size=1 << 20, max_message_size=1 << 20, check=False).units == {1: 65536}
    with pytest.raises(UsageError, match="unit_bytes must be a positive multiple of 16"):
        ExportOptions(unit_bytes=24).validate()
    with pytest.raises(UsageError, match="32-bit"):
        ExportOptions(max_message_size=1 << 32).validate()
    with pytest.raises(UsageError, match="unknown layout"):
        ExportOptions(layout="tree").validate()


def test_limit_errors_name_the_limit_and_the_way_out(monkeypatch):
    topo = load_topology("fully-connected:n=5")
    sched = generate(topo, "allreduce", k=1)
    monkeypatch.setattr(export_mod, "MAX_OPERATION", 3)
    with pytest.raises(ExportError) as info:
        export_mscclpp(sched, topo, check=False)
    msg = str(info.value)
    assert "the executor allows 3" in msg and "use a smaller k" in msg and "\n" not in msg


def test_self_check_catches_a_broken_export():
    topo = load_topology("ring:n=4")
    plan = export_mscclpp(generate(topo, "allgather", k=1), topo).plan
    d = json.loads(write_plan(plan))
    for g in d["gpus"]:
        for t in g["threadblocks"]:
            for o in t["ops"]:
                for i, x in enumerate(o.get("ops", [])):
                    if x["name"] == "wait":
                        o["ops"][i] = {"name": "nop"}
    broken = plan_from_json(copy.deepcopy(d))
    with pytest.raises(ExportError, match="fails its self-check .a forestcoll bug"):
        self_check(broken)


def test_exported_plans_parse_back():
    topo = load_topology("hypercube:dim=3")
    plan = export_mscclpp(generate(topo, "allreduce"), topo).plan
    assert parse_plan(write_plan(plan)) == plan


@settings(max_examples=15, deadline=None)
@given(fabrics(max_compute=4, max_switches=2), st.sampled_from(COLLECTIVES + ("broadcast", "reduce")),
       st.sampled_from([None, 1, 2]), st.booleans())
def test_random_fabrics(topo, coll, k, inplace):
    try:
        sched = generate(topo, coll, k=k)
    except Exception as exc:
        if refused_for_imbalance(exc):
            return
        raise
    r = export_mscclpp(sched, topo, inplace=inplace)
    assert r.checks
    assert run_plan(r.plan, launches=3).ok


def test_fine_units_halve_only_pieces_of_several_chunks():
    """``fine_units``: the unit of every piece size above one chunk is halved, one-chunk pieces keep theirs, and the
    blocks are the same (only the pipelines' iterations change); the plan still passes its self-check."""
    topo = load_topology("ring:n=4")
    sched = generate(topo, "allreduce", k=4)
    plain = export_mscclpp(sched, topo, check=False)
    fine = export_mscclpp(sched, topo, fine_units=True)
    assert set(plain.units) == {1, 2, 3} and fine.checks
    assert fine.units == {c: u if c == 1 else u // 2 for c, u in plain.units.items()}
    assert [len(g.threadblocks) for g in fine.plan.gpus] == [len(g.threadblocks) for g in plain.plan.gpus]


def test_fallback_takes_finer_units_only_when_their_plan_is_faster():
    """write_generated_plan's last step (``layouts.finer_units``): the chosen k's plan with half units for pieces of several
    chunks replaces it when ``plan_rate`` says it is faster, and is left out (named in the note) otherwise; a plan
    whose pieces are all one chunk is not tried again."""
    topo = load_topology("ring:n=4")
    sched = generate(topo, "allreduce", k=4)
    opts = ExportOptions(design_size=1 << 30)

    def unit_bytes(plan):  # finer units: smaller pipeline units
        return sum(op.iter_context[0] for g in plan.gpus for tb in g.threadblocks for op in tb.ops
                   if op.name == "pipeline")

    for prefer_fine in (True, False):
        exported = {4: export_mscclpp(sched, topo, check=False)}
        rate = (lambda plan, size: 1.0 / unit_bytes(plan)) if prefer_fine else (lambda plan, size: unit_bytes(plan))
        base = rate(exported[4].plan, 1 << 30)
        phrase = layouts_mod.finer_units(topo, sched, exported, base, opts, rate)
        assert ("(taken)" in phrase) == prefer_fine, phrase
        assert (exported[4].units[2] < export_mscclpp(sched, topo, check=False).units[2]) == prefer_fine
    one = {1: export_mscclpp(generate(topo, "allreduce", k=1), topo, check=False)}
    assert layouts_mod.finer_units(topo, generate(topo, "allreduce", k=1), one, 1.0, opts, lambda p, s: 2.0) == ""
