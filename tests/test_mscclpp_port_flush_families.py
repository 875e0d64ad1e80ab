"""Every plan family the port flush (mscclpp/emit.py: a port channel's sender ends with a flush of its puts, not a wait
for the receiver's end signal) touches runs two back-to-back calls race-free in the interpreter, and races without
the flush: allreduce and reduce-scatter plans, the `shared` layout (a reduce-scatter and an allgather part in one
thread block, share.py keeping both parts' flushes), an all-to-all plan, and the MI300 plan packed without the CPUs.
The allgather plan is tests/test_mscclpp_port_flush.py's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.mscclpp.plan import Plan
from forestcoll.topology import load_topology

SPEC = "dgx-a100:nodes=2"


def _tails(plan: Plan):
    """Each thread block's operations after its last pipeline."""
    for g in plan.gpus:
        for tb in g.threadblocks:
            last = max((i for i, op in enumerate(tb.ops) if op.name == "pipeline"), default=-1)
            yield tb, tb.ops[last + 1:]


def _without_flushes(plan: Plan) -> Plan:
    return replace(plan, gpus=tuple(replace(g, threadblocks=tuple(
        replace(tb, ops=tuple(op for op in tb.ops if op.name != "flush")) for tb in g.threadblocks)) for g in plan.gpus))


def _check(plan: Plan, races_without: bool = True) -> None:
    flushes = 0
    for _tb, tail in _tails(plan):
        assert not any(op.name in ("signal", "wait") and op.channel_type == "port" for op in tail)
        flushes += sum(op.name == "flush" for op in tail)
        assert all(len(op.dst) == len(op.channel_ids) for op in tail if op.name == "flush")
    assert flushes > 0
    res = run_plan(plan, launches=2)
    assert res.ok, (res.errors + res.races)[:1]
    bare = run_plan(_without_flushes(plan), launches=2)
    assert bare.ok != races_without and bool(bare.races) == races_without


def test_allreduce_plan():
    """Its allgather half puts from the output, which the next call's host may write: the flush orders that."""
    topo = load_topology(SPEC)
    _check(export_mscclpp(generate(topo, "allreduce", k=1), topo, ExportOptions(check=False)).plan)


def test_reduce_scatter_plan():
    """Its port puts read only scratch, which the next call writes after the start handshake, so it is race-free
    even without the flush (kept: the same emitter, and a plan whose puts read the input would need it)."""
    topo = load_topology(SPEC)
    _check(export_mscclpp(generate(topo, "reduce_scatter", k=1), topo, ExportOptions(check=False)).plan,
           races_without=False)


def test_shared_blocks_keep_their_flushes():
    """dgx-a100:nodes=2 allreduce in the `shared` layout within 30 blocks per GPU (34 unshared): blocks that run a
    reduce-scatter part, then allgather parts, end with the flushes of their parts (share.py's merged end)."""
    topo = load_topology(SPEC)
    opts = ExportOptions(check=False, layout="shared", max_threadblocks=30)
    plan = export_mscclpp(generate(topo, "allreduce", k=1), topo, opts).plan
    shared = [tb for tb, tail in _tails(plan) if sum(op.name == "pipeline" for op in tb.ops) >= 2
              and any(op.name == "flush" for op in tail)]
    assert shared
    _check(plan)


def test_alltoall_plan():
    from forestcoll.alltoall.generate import generate_alltoall
    from forestcoll.alltoall.mscclpp import export_alltoall_mscclpp

    topo = load_topology(SPEC)
    made = generate_alltoall(topo)
    assert made.schedule is not None
    _check(export_alltoall_mscclpp(made.schedule, topo, ExportOptions(check=False, inplace=False)).plan)


@pytest.mark.slow
def test_the_mi300_plan_packed_without_the_cpus():
    from conftest import shared_file

    from forestcoll.mscclpp.offcpu import off_cpu_rival

    topo = load_topology(str(shared_file("data", "nccl-topo", "topo_8p_940.xml")), {"nodes": "2", "fabric": "rail"})
    rival = off_cpu_rival(topo, generate(topo, "allgather"), True)
    assert rival is not None
    _check(export_mscclpp(rival, topo, ExportOptions(check=False, max_threadblocks=304)).plan)
