"""The end of a port channel's sender (mscclpp/emit.py): a flush of its own puts, not a wait for the receiver's end
signal, which crossed the network once more at the end of every call."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.simulate.critical import plan_critical_path
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

SPEC = "dgx-a100:nodes=2"


@cache
def _ag():
    topo = load_topology(SPEC)
    sched = generate(topo, "allgather", k=1)
    return build_network(topo), export_mscclpp(sched, topo, ExportOptions(check=False)).plan


def test_a_port_sender_ends_with_a_flush_not_the_receivers_signal():
    """No end wait on a port channel and no end signal back; each port sender flushes its channels (as many dst_buff
    entries as channels: the executor counts them so), and the call's critical path has no end handshake over the
    NICs (before: the receiver's end signal, 12 us of dgx-a100:nodes=2's 16 MiB call)."""
    net, plan = _ag()
    flushes = 0
    for g in plan.gpus:
        for tb in g.threadblocks:
            last = max((i for i, op in enumerate(tb.ops) if op.name == "pipeline"), default=-1)
            tail = tb.ops[last + 1:]
            assert not any(op.name in ("signal", "wait") and op.channel_type == "port" for op in tail)
            for op in tail:
                if op.name == "flush":
                    flushes += 1
                    assert op.channel_type == "port" and len(op.dst) == len(op.channel_ids)
    assert flushes > 0
    kinds = plan_critical_path(net, plan, 16 << 20).by_kind
    assert "start signal/port" in kinds and not any(k.startswith("end ") and k.endswith("/port") for k in kinds)


def test_the_flush_is_what_keeps_back_to_back_calls_race_free():
    """With the flush the interpreter finds two calls right and race-free; without it the next call's host writes an
    input the proxy may still be reading: a race."""
    _net, plan = _ag()
    assert run_plan(plan, launches=2).ok

    def strip(tb):
        return replace(tb, ops=tuple(op for op in tb.ops if op.name != "flush"))

    bare = replace(plan, gpus=tuple(replace(g, threadblocks=tuple(strip(tb) for tb in g.threadblocks))
                                    for g in plan.gpus))
    res = run_plan(bare, launches=2)
    assert not res.ok and res.races
