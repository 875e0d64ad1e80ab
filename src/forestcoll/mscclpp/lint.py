"""Static checks of an MSCCL++ execution plan: the executor's parser rules and its device limits.

Errors are what makes the executor throw, crash, hang or compute something other
than the plan says (a key it reads is missing, an id out of range, more than 64
operations or 16 channels of a type in a thread block, more than 8 channels or 10
buffers in an operation, a wait on a channel nobody can signal, a packet
operation in a Simple plan, ...).  Warnings are legal but suspicious (an
executor quirk the plan runs into, a reduce_op other than sum, which the executor
ignores, ...).  Each finding names the path into the JSON.  With ``size`` the
size-dependent rules (chunk divisibility, pipeline iterations, signal/wait
balance) are checked for that call; without it for the smallest call the plan
accepts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from forestcoll.mscclpp.plan import BufRef, Op, Plan
from forestcoll.mscclpp.semantics import (
    BUFFER_NAMES,
    COLLECTIVES,
    MAX_BUFFERS_PER_OPERATION,
    MAX_CHANNEL,
    MAX_CHANNEL_PER_OPERATION,
    MAX_DEVICE_SEMAPHORES,
    MAX_DEVICE_SYNCERS,
    MAX_OPERATION,
    MAX_PIPELINE_ITERATIONS,
    MAX_THREADS_PER_BLOCK,
    OP_NAMES,
    PACKET_OPS,
    PIPELINED,
    PUTS,
    REDUCES,
    U32,
    Wiring,
    buffer_sizes,
    check_message_size,
    geometry,
    smallest_size,
    tb_path,
    walk_ops,
    wire,
)

# Thread blocks a GPU holds at once (one per SM / CU at 1024 threads): more than the smallest common part can
# hang, as every block spins on others.  MI250 GCD: 104 CUs; A100: 108 SMs; H100: 132.
RESIDENT_TBS = 104


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" | "warning"
    path: str
    message: str

    def format(self, source: str = "plan") -> str:
        return f"{source}: {self.path}: {self.severity}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "path": self.path, "message": self.message}


@dataclass
class LintReport:
    """The findings of :func:`lint_plan`; ``ok`` when there is no error."""

    source: str
    findings: list[Finding] = field(default_factory=list)
    size: int | None = None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def message(self) -> str:
        e, w = len(self.errors), len(self.warnings)
        if e:
            return f"{self.source}: {e} error(s), {w} warning(s); first: {self.errors[0].path}: {self.errors[0].message}"
        return f"{self.source}: clean" + (f" ({w} warning(s))" if w else "")

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "message": self.message, "source": self.source, "size": self.size,
                "errors": len(self.errors), "warnings": len(self.warnings),
                "findings": [f.to_dict() for f in self.findings]}


class _Linter:
    def __init__(self, plan: Plan, report: LintReport) -> None:
        self.plan = plan
        self.report = report
        self.n = len(plan.gpus)

    def err(self, path: str, msg: str) -> None:
        self.report.findings.append(Finding("error", path, msg))

    def warn(self, path: str, msg: str) -> None:
        self.report.findings.append(Finding("warning", path, msg))


def lint_plan(plan: Plan, source: str = "plan", size: int | None = None,
              ranks_per_node: int | None = None, resident_tbs: int = RESIDENT_TBS) -> LintReport:
    """Check ``plan`` against the executor's parser rules and limits (see the module docstring).
    ``ranks_per_node`` (optional) lets memory channels be checked to stay inside a node."""
    report = LintReport(source, size=size)
    L = _Linter(plan, report)
    _top(L, plan)
    w = wire(plan)
    for pos in range(len(plan.gpus)):
        _gpu(L, plan, pos, w, ranks_per_node, resident_tbs)
    _sizes(L, plan, size, w)
    return report


def lint_file(path: str, size: int | None = None, ranks_per_node: int | None = None,
              resident_tbs: int = RESIDENT_TBS) -> LintReport:
    """Read the plan at ``path`` and :func:`lint_plan` it (what ``forestcoll mscclpp lint`` does); a file the
    executor's parser cannot read raises a one-line :class:`PlanError`."""
    from forestcoll.mscclpp.plan import read_plan

    return lint_plan(read_plan(path), str(path), size, ranks_per_node, resident_tbs)


# ----- top level and GPUs ---------------------------------------------------------------------------


def _top(L: _Linter, plan: Plan) -> None:
    if plan.protocol not in ("Simple", "LL"):
        L.warn("protocol", f"{plan.protocol!r} is neither Simple nor LL; the executor treats it as Simple")
    if plan.collective not in COLLECTIVES:
        L.warn("collective", f"{plan.collective!r} is not a collective the NCCL shim or this interpreter knows "
                             f"({', '.join(COLLECTIVES)}); no postcondition can be checked")
    a = plan.alignment
    if a == 0:
        L.err("buffer_alignment", "0: the executor divides sizes by it")
    elif a % 16:
        L.warn("buffer_alignment", f"{a} is not a multiple of 16: the reduce kernels' tail loops (bytes past the last "
                                   "16-byte word) read the call's input pointer, not the operation's buffer")
    lo, hi = plan.setting("min_message_size"), plan.setting("max_message_size")
    if lo > hi:
        L.err("min_message_size", f"{lo} is above max_message_size {hi}: no call can use the plan")
    if hi >= U32:
        L.warn("max_message_size", f"{hi} bytes: the executor keeps offsets in 32 bits, so calls of 4 GiB or more "
                                   "address the wrong bytes; cap max_message_size below 4 GiB")
    t = plan.setting("num_threads_per_block")
    if not 1 <= t <= MAX_THREADS_PER_BLOCK:
        L.err("num_threads_per_block", f"{t}: the kernel is built for 1..{MAX_THREADS_PER_BLOCK} threads")
    elif t < MAX_CHANNEL_PER_OPERATION:
        L.warn("num_threads_per_block", f"{t} threads: operations on more channels than threads skip the rest")
    if not plan.gpus:
        L.err("gpus", "the plan has no GPUs")
    for i, g in enumerate(plan.gpus):
        if g.id != i:
            L.err(f"gpus[{i}].id", f"gpu at position {i} has id {g.id}; the executor reads gpus[rank] and requires "
                                   "id == rank")
    if plan.packet and not plan.setting("use_double_scratch_buffer"):
        L.warn("use_double_scratch_buffer", "an LL plan without a double scratch buffer: back-to-back calls write "
                                            "the next call's packets over ones a slower GPU may not have read yet")


def _gpu(L: _Linter, plan: Plan, pos: int, w: Wiring, rpn: int | None, resident: int) -> None:
    g = plan.gpus[pos]
    p = f"gpus[{pos}]"
    n = L.n
    if g.input_chunks == 0 and g.output_chunks == 0:
        L.err(p, "input_chunks and output_chunks are both 0 (the executor throws)")
    else:
        for key in ("input_chunks", "output_chunks"):
            if getattr(g, key) == 0:
                L.err(f"{p}.{key}", "0: the executor's message-size check divides by it (the call crashes)")
    coll = plan.collective
    want = {"allgather": (1, n), "reducescatter": (n, 1)}.get(coll, (1, 1) if coll in COLLECTIVES else None)
    if want and g.input_chunks and g.output_chunks and g.input_chunks * want[1] != g.output_chunks * want[0]:
        L.err(p, f"{g.input_chunks} input and {g.output_chunks} output chunks: a {coll} with {n} GPUs needs "
                 f"input:output = {want[0]}:{want[1]}, or the executor finds the chunk sizes inconsistent")
    if pos > 0:
        g0 = plan.gpus[0]
        if (g.input_chunks, g.output_chunks) != (g0.input_chunks, g0.output_chunks):
            L.warn(p, "chunk counts differ from gpu 0's; remote offsets are computed with the accessing GPU's chunks")
    # channels
    for i, c in enumerate(g.channels):
        cp = f"{p}.channels[{i}]"
        if c.channel_type == "none":
            L.err(f"{cp}.channel_type", "'none' is not a channel the executor builds")
        if c.channel_type == "switch":
            if any(k == "buff" for k, _v in c.extra):
                L.err(cp, "switch channel with 'buff' (the key before mscclpp #579): the executor at 1f5f065 reads "
                          "'buffer_type' and fails on this file; rename the key")
            for j, grp in enumerate(c.rank_groups or ()):
                gp = f"{cp}.rank_groups[{j}]"
                bad = [r for r in grp.ranks if not 0 <= r < n]
                if bad:
                    L.err(f"{gp}.ranks", f"rank {bad[0]} is not a GPU of this {n}-GPU plan")
                if pos not in grp.ranks:
                    L.err(f"{gp}.ranks", f"gpu {pos} is not in its own switch group {list(grp.ranks)}")
                if len(set(grp.ranks)) != len(grp.ranks):
                    L.err(f"{gp}.ranks", "a rank appears twice")
            continue
        for j, peer in enumerate(c.connected_to or ()):
            if not 0 <= peer < n or peer == pos:
                L.err(f"{cp}.connected_to[{j}]", f"peer {peer} is not another GPU of this {n}-GPU plan")
            elif c.channel_type == "memory" and rpn and peer // rpn != pos // rpn:
                L.err(f"{cp}.connected_to[{j}]", f"memory channel to gpu {peer} in another node ({rpn} ranks per node): "
                                                 "memory channels need CUDA IPC; use a port channel")
    for ctype in ("memory", "port"):
        for end in w.channels.get((pos, ctype), []):
            if 0 <= end.peer < n and end.peer != pos and end.partner is None:
                L.warn(f"{p}.channels", f"{ctype} channel {end.index} to gpu {end.peer} has no partner (gpu {end.peer} "
                                        f"lists {end.ordinal} {ctype} channel(s) back): its signals reach no one")
    _switch_groups(L, plan, pos, w)
    for i, rb in enumerate(g.remote_buffers):
        rp = f"{p}.remote_buffers[{i}]"
        if not 0 <= rb.rank < n:
            L.err(f"{rp}.rank", f"rank {rb.rank} is not a GPU of this plan")
        elif rb.rank == pos:
            L.warn(f"{rp}.rank", "a GPU's own buffer as a remote buffer")
        for j, t in enumerate(rb.access_channel_types):
            if t not in ("memory", "port"):
                L.err(f"{rp}.access_channel_types[{j}]", f"{t!r}: remote buffers are reached through memory or port channels")
    dup = [k for k, v in Counter((rb.rank, rb.type) for rb in g.remote_buffers).items() if v > 1]
    if dup:
        L.warn(f"{p}.remote_buffers", f"buffer {dup[0][1]!r} of gpu {dup[0][0]} is registered more than once")
    # thread blocks
    if len(g.threadblocks) > resident:
        L.warn(f"{p}.threadblocks", f"{len(g.threadblocks)} thread blocks: more than a {resident}-SM GPU holds at once; "
                                    "blocks that wait on unscheduled ones hang")
    for t, tb in enumerate(g.threadblocks):
        if tb.id != t:
            L.err(f"{tb_path(pos, t)}.id", f"thread block at position {t} has id {tb.id}; the executor indexes its "
                                           "channel tables by id and its operations by position, so they must agree")
    barrier_users: dict[int, set[int]] = defaultdict(set)
    barrier_sizes: dict[int, set[int]] = defaultdict(set)
    for t in range(len(g.threadblocks)):
        _tb(L, plan, pos, t, w, barrier_users, barrier_sizes)
    for bid, users in sorted(barrier_users.items()):
        sizes = barrier_sizes[bid]
        if len(sizes) > 1:
            L.err(f"{p}.threadblocks", f"barrier {bid} is used with num_threadblocks {sorted(sizes)}")
        elif sizes and len(users) != next(iter(sizes)):
            L.err(f"{p}.threadblocks", f"barrier {bid} waits for {next(iter(sizes))} thread blocks but tbs "
                                       f"{sorted(users)} use it")


def _switch_groups(L: _Linter, plan: Plan, pos: int, w: Wiring) -> None:
    for grp in w.switches.get(pos, []):
        for r in grp.ranks:
            if r == pos or not 0 <= r < L.n:
                continue
            if not any(x.ranks == grp.ranks and x.buffer == grp.buffer for x in w.switches.get(r, [])):
                L.err(f"gpus[{pos}].channels", f"switch group {list(grp.ranks)} over {grp.buffer!r}: gpu {r} has no "
                                               "matching switch channel (the collective NVLS setup hangs)")
                break


# ----- thread blocks and operations -----------------------------------------------------------------


def _tb(L: _Linter, plan: Plan, pos: int, t: int, w: Wiring, barrier_users: dict, barrier_sizes: dict) -> None:
    g = plan.gpus[pos]
    tb = g.threadblocks[t]
    p = tb_path(pos, t)
    nops = sum(1 + len(op.ops or ()) for op in tb.ops)
    if nops > MAX_OPERATION:
        L.err(f"{p}.ops", f"{nops} operations (pipeline inner operations count); the executor allows {MAX_OPERATION}")
    counts = {"memory": len([e for e in w.channels.get((pos, 'memory'), [])]),
              "port": len(w.channels.get((pos, "port"), [])), "switch": len(w.switches.get(pos, []))}
    table = w.tb_channels[(pos, t)]
    for i, c in enumerate(tb.channels):
        cp = f"{p}.channels[{i}]"
        if c.channel_type not in counts:
            L.err(f"{cp}.channel_type", f"{c.channel_type!r}: thread blocks hold memory, port or switch channels")
            continue
        for j, cid in enumerate(c.channel_ids):
            if cid >= counts[c.channel_type]:
                L.err(f"{cp}.channel_ids[{j}]", f"{c.channel_type} channel {cid} does not exist (gpu {pos} has "
                                                f"{counts[c.channel_type]})")
    for ctype, ids in table.items():
        if len(ids) > MAX_CHANNEL:
            L.err(f"{p}.channels", f"{len(ids)} {ctype} channels; a thread block holds at most {MAX_CHANNEL}")
        dup = [k for k, v in Counter(ids).items() if v > 1]
        if dup:
            L.warn(f"{p}.channels", f"{ctype} channel {dup[0]} listed twice")
    for i, r in enumerate(tb.remote_buffer_refs or ()):
        rp = f"{p}.remote_buffer_refs[{i}]"
        if r.access_channel_type not in ("memory", "port"):
            L.warn(f"{rp}.access_channel_type", f"{r.access_channel_type!r}: the executor ignores this entry")
            continue
        for j, bid in enumerate(r.remote_buffer_ids):
            if bid >= len(g.remote_buffers):
                L.err(f"{rp}.remote_buffer_ids[{j}]", f"remote buffer {bid} does not exist (gpu {pos} has "
                                                      f"{len(g.remote_buffers)})")
            elif r.access_channel_type not in g.remote_buffers[bid].access_channel_types:
                L.err(f"{rp}.remote_buffer_ids[{j}]", f"remote buffer {bid} is not registered for "
                                                      f"{r.access_channel_type} access (the executor would use another buffer)")
    for ctype, ids in w.tb_remote[(pos, t)].items():
        if len(ids) > MAX_CHANNEL:
            L.err(f"{p}.remote_buffer_refs", f"{len(ids)} remote buffers through {ctype} channels; at most {MAX_CHANNEL}")
    for path, op, pipe in walk_ops(tb):
        _op(L, plan, pos, t, f"{p}.{path}", op, pipe, w, barrier_users, barrier_sizes)


def _chunks_of(plan: Plan, gpu: int, btype: str) -> int:
    g = plan.gpus[gpu]
    return {"i": g.input_chunks, "o": g.output_chunks, "s": g.scratch_chunks}[btype]


def _local(L: _Linter, plan: Plan, pos: int, path: str, b: BufRef, what: str = "local buffer") -> None:
    if b.type is None:
        L.err(path, f"needs 'type' ({what})")
        return
    _range(L, plan, pos, path, b, b.type)


def _range(L: _Linter, plan: Plan, gpu: int, path: str, b: BufRef, btype: str) -> None:
    have = _chunks_of(plan, gpu, btype)
    if b.index + b.size > have:
        L.err(path, f"chunks {b.index}..{b.index + b.size - 1} of gpu {gpu}'s {BUFFER_NAMES[btype]} buffer, which has {have}")
    if b.size == 0:
        L.warn(path, "size 0: the operation moves nothing")


def _remote(L: _Linter, plan: Plan, pos: int, t: int, path: str, b: BufRef, ctype: str | None, w: Wiring) -> None:
    if b.buffer_id is None:
        L.err(path, "needs 'buffer_id' (a remote buffer)")
        return
    if ctype not in ("memory", "port"):
        L.err(path, f"a remote buffer in an operation with channel_type {ctype!r}: the executor looks remote buffers "
                    "up by the operation's channel type, memory or port, and throws otherwise")
        return
    ids = w.tb_remote[(pos, t)][ctype]
    if b.buffer_id >= len(ids):
        L.err(path, f"buffer_id {b.buffer_id}: the thread block lists {len(ids)} remote buffer(s) for {ctype} access")
        return
    rb_id = ids[b.buffer_id]
    g = plan.gpus[pos]
    if rb_id < len(g.remote_buffers):
        rb = g.remote_buffers[rb_id]
        if 0 <= rb.rank < len(plan.gpus):
            _range(L, plan, rb.rank, path, b, rb.type)


def _op(L: _Linter, plan: Plan, pos: int, t: int, p: str, op: Op, pipe: Op | None, w: Wiring,
        barrier_users: dict, barrier_sizes: dict) -> None:
    name = op.name
    if name not in OP_NAMES:
        L.err(f"{p}.name", f"unknown operation {name!r}: the executor throws 'Invalid operation type'")
        return
    if name == "pipeline" and pipe is None:
        unit, nchunks = op.iter_context or (0, 0)
        if unit == 0:
            L.err(f"{p}.iter_context.unit_size", "0: the executor divides by it")
        if nchunks == 0:
            L.warn(f"{p}.iter_context.num_chunks", "0: the pipeline runs no iteration")
        for j, inner in enumerate(op.ops or ()):
            if inner.name == "pipeline":
                L.err(f"{p}.ops[{j}]", "pipelines do not nest")
            if inner.tbg is not None and inner.name in PIPELINED:
                L.warn(f"{p}.ops[{j}]", "a thread-block-group share inside a pipeline: iterations run over num_chunks "
                                        "whole chunks and overrun the share")
            for side, refs in (("src_buff", inner.src), ("dst_buff", inner.dst)):
                for k, b in enumerate(refs or ()):
                    if inner.name in PIPELINED and b.size != nchunks:
                        L.warn(f"{p}.ops[{j}].{side}[{k}]",
                               f"{b.size} chunk(s) in a pipeline of num_chunks {nchunks}: the iterations "
                               + ("stop before its end (the rest is never moved)" if b.size > nchunks
                                  else "run past its end (offsets wrap in 32 bits)"))
        return
    ctype = op.channel_type
    ids = op.channel_ids or ()
    src, dst = op.src or (), op.dst or ()
    for side, refs in (("src_buff", src), ("dst_buff", dst)):
        if len(refs) > MAX_BUFFERS_PER_OPERATION:
            L.err(f"{p}.{side}", f"{len(refs)} buffers; an operation holds at most {MAX_BUFFERS_PER_OPERATION}")
    if len(ids) > MAX_CHANNEL_PER_OPERATION:
        L.err(f"{p}.channel_ids", f"{len(ids)} channels; an operation uses at most {MAX_CHANNEL_PER_OPERATION}")
    table = w.tb_channels[(pos, t)]
    if ctype in ("memory", "port", "switch"):
        for j, cid in enumerate(ids):
            if cid >= len(table[ctype]):
                L.err(f"{p}.channel_ids[{j}]", f"channel {cid}: the thread block holds {len(table[ctype])} {ctype} channel(s)")
    if op.tbg is not None:
        tid, size = op.tbg
        if size == 0 or tid >= size:
            L.err(f"{p}.tbg_info", f"tb_id {tid} of a group of {size}")
    if op.reduce_op is not None and op.reduce_op != "sum":
        L.warn(f"{p}.reduce_op", f"{op.reduce_op!r}: the executor ignores reduce_op and always sums")
    if name in PACKET_OPS and not plan.packet:
        L.err(p, f"packet operation {name} in a {plan.protocol} plan: scratch is sized for packets (2 x data) only "
                 "with protocol LL")
    if name == "nop":
        return
    if name == "barrier":
        if op.barrier_id is None or op.num_threadblocks is None:
            L.err(p, "a barrier needs barrier_id and num_threadblocks")
            return
        if op.barrier_id >= MAX_DEVICE_SYNCERS:
            L.err(f"{p}.barrier_id", f"{op.barrier_id}: the executor has {MAX_DEVICE_SYNCERS} barriers")
        if op.num_threadblocks == 0:
            L.err(f"{p}.num_threadblocks", "0 thread blocks never meet")
        barrier_users[op.barrier_id].add(t)
        barrier_sizes[op.barrier_id].add(op.num_threadblocks)
        return
    if name in ("sem_acquire", "sem_release"):
        sems = op.semaphore_ids or ()
        have = len(plan.gpus[pos].semaphores or ())
        if not sems:
            L.err(p, f"{name} needs semaphore_ids")
        if len(sems) > MAX_DEVICE_SEMAPHORES:
            L.err(f"{p}.semaphore_ids", f"{len(sems)} semaphores; an operation holds at most {MAX_DEVICE_SEMAPHORES}")
        for j, s in enumerate(sems):
            if s >= have:
                L.err(f"{p}.semaphore_ids[{j}]", f"semaphore {s} does not exist (gpu {pos} declares {have})")
        return
    if name in ("signal", "wait", "rlxsignal", "rlxwait", "flush"):
        if ctype not in ("memory", "port"):
            L.err(f"{p}.channel_type", f"{ctype!r}: {name} works on memory or port channels (anything else does nothing)")
            return
        if not ids:
            L.err(p, f"{name} without channel_ids does nothing")
        if name == "flush":
            if ctype != "port":
                L.err(f"{p}.channel_type", "flush works on port channels")
            if len(dst) < len(ids):
                L.warn(p, f"flush of {len(ids)} channel(s) with {len(dst)} dst_buff entries: the executor counts the "
                          "channels to flush by dst_buff (execution_kernel.hpp handleFlush), so "
                          + ("this flush does nothing" if not dst else "only the first ones are flushed"))
        if name in ("wait", "rlxwait") and ctype in ("memory", "port"):
            for j, cid in enumerate(ids):
                if cid < len(table[ctype]):
                    gid = table[ctype][cid]
                    chans = w.channels.get((pos, ctype), [])
                    if gid < len(chans) and chans[gid].partner is None:
                        L.err(f"{p}.channel_ids[{j}]", f"waits on {ctype} channel {gid} to gpu {chans[gid].peer}, "
                                                       "which has no partner there: nothing can signal it (hang)")
        if name in ("rlxsignal", "rlxwait") and ctype == "port":
            L.warn(p, f"{name} on a port channel is a plain (ordered) {name[3:]} in the executor")
        return
    # data operations
    if name in PUTS:
        if ctype not in ("memory", "port"):
            L.err(f"{p}.channel_type", f"{ctype!r}: puts go through memory or port channels")
            return
        if len(src) != len(dst) or not dst:
            L.err(p, f"{len(src)} src_buff and {len(dst)} dst_buff entries: a put copies src_buff[i] to dst_buff[i]")
        if ctype == "memory" and name != "put":
            L.err(p, f"{name} over a memory channel: the executor's memory-channel put does not signal or flush")
        if ctype == "port" and len(ids) != len(dst):
            L.err(f"{p}.channel_ids", f"{len(ids)} channel(s) for {len(dst)} destination(s): thread i puts dst_buff[i] "
                                      "through channel_ids[i]")
        if ctype == "memory" and len({b.type for b in src}) > 1:
            L.warn(f"{p}.src_buff", "sources in different buffers: the memory-channel put reads every source from "
                                    "src_buff[0]'s buffer")
        for j, b in enumerate(src):
            _local(L, plan, pos, f"{p}.src_buff[{j}]", b)
        for j, b in enumerate(dst):
            _remote(L, plan, pos, t, f"{p}.dst_buff[{j}]", b, ctype, w)
        for j, (a, b) in enumerate(zip(src, dst)):
            if a.size != b.size:
                L.warn(f"{p}.dst_buff[{j}]", f"{b.size} chunk(s) from a source of {a.size}: the put copies the "
                                             "destination's size")
        return
    if name == "get":
        if ctype != "memory":
            L.err(f"{p}.channel_type", "get reads through memory channels")
            return
        if len(src) != len(dst) or not src:
            L.err(p, "get copies src_buff[i] (remote) to dst_buff[i] (local)")
        for j, b in enumerate(src):
            _remote(L, plan, pos, t, f"{p}.src_buff[{j}]", b, ctype, w)
        for j, b in enumerate(dst):
            _local(L, plan, pos, f"{p}.dst_buff[{j}]", b)
        for j, (a, b) in enumerate(zip(src, dst)):
            if a.index != b.index:
                L.warn(f"{p}.dst_buff[{j}]", f"source chunk {a.index} and destination chunk {b.index} differ: the "
                                             "executor's get swaps the two offsets (reads the remote at the "
                                             "destination's offset and writes locally at the source's)")
        return
    if name in ("copy", "cpkt", "upkt"):
        if len(src) != 1 or len(dst) != 1:
            L.err(p, f"{name} copies src_buff[0] to dst_buff[0]; it has {len(src)} and {len(dst)}")
        for j, b in enumerate(src[:1]):
            _local(L, plan, pos, f"{p}.src_buff[{j}]", b)
        for j, b in enumerate(dst[:1]):
            _local(L, plan, pos, f"{p}.dst_buff[{j}]", b)
        if name == "upkt" and src and src[0].type != "s":
            L.err(f"{p}.src_buff[0]", "upkt reads packets from scratch whatever the type says")
        return
    if name in REDUCES or name in ("repkt", "respkt", "recpkt", "recspkt"):
        _reduce(L, plan, pos, t, p, op, w)
        return
    if name in ("ppkt", "rppkt"):
        if ctype not in ("memory", "port"):
            L.err(f"{p}.channel_type", f"{ctype!r}: {name} goes through memory or port channels")
            return
        if name == "ppkt" and len(src) != len(dst):
            L.err(p, "ppkt sends src_buff[i] to dst_buff[i]")
        if name == "rppkt" and len(src) != 1:
            L.err(p, "rppkt forwards one packet range (src_buff[0]) to every dst_buff")
        if ctype == "port" and len(ids) != len(dst):
            L.err(f"{p}.channel_ids", f"{len(ids)} channel(s) for {len(dst)} destination(s)")
        for j, b in enumerate(src):
            _local(L, plan, pos, f"{p}.src_buff[{j}]", b)
        if name == "rppkt" and src and src[0].type != "s":
            L.err(f"{p}.src_buff[0]", "rppkt reads packets from scratch whatever the type says")
        if name == "ppkt" and ctype == "port" and any(b.type != "s" for b in src):
            L.warn(f"{p}.src_buff", "a port-channel ppkt copies packets already built (by cpkt) in scratch")
        for j, b in enumerate(dst):
            _remote(L, plan, pos, t, f"{p}.dst_buff[{j}]", b, ctype, w)
            _remote_scratch(L, plan, pos, t, f"{p}.dst_buff[{j}]", b, ctype, w)
        return
    if name in ("glres", "gstore", "gstorepkt"):
        if ctype != "switch":
            L.err(f"{p}.channel_type", f"{name} goes through a switch channel")
        if name == "glres" and (not src or not src[0].is_switch):
            L.err(f"{p}.src_buff", "glres loads through a switch channel (switch_channel_id)")
        if name != "glres" and (not src or src[0].type is None):
            L.err(f"{p}.src_buff", f"{name} stores a local buffer")
        if not dst or not dst[0].is_switch:
            L.err(f"{p}.dst_buff", f"{name} stores through a switch channel (switch_channel_id)")
        for side, refs in (("src_buff", src), ("dst_buff", dst)):
            for j, b in enumerate(refs[:1]):
                if b.is_switch:
                    nv = table["switch"]
                    if b.switch_channel_id >= len(nv):
                        L.err(f"{p}.{side}[{j}]", f"switch channel {b.switch_channel_id}: the thread block holds {len(nv)}")
                    else:
                        groups = w.switches.get(pos, [])
                        if nv[b.switch_channel_id] < len(groups):
                            grp = groups[nv[b.switch_channel_id]]
                            for r in grp.ranks:
                                if 0 <= r < L.n:
                                    _range(L, plan, r, f"{p}.{side}[{j}]", b, grp.buffer)
                elif b.type is not None:
                    _local(L, plan, pos, f"{p}.{side}[{j}]", b)
        return


def _remote_scratch(L: _Linter, plan: Plan, pos: int, t: int, path: str, b: BufRef, ctype: str | None,
                    w: Wiring) -> None:
    if b.buffer_id is None or ctype not in ("memory", "port"):
        return
    ids = w.tb_remote[(pos, t)][ctype]
    if b.buffer_id < len(ids) and ids[b.buffer_id] < len(plan.gpus[pos].remote_buffers):
        rb = plan.gpus[pos].remote_buffers[ids[b.buffer_id]]
        if rb.type != "s":
            L.err(path, f"packets into gpu {rb.rank}'s {rb.type!r} buffer: the executor writes packets at the scratch "
                        "offset of the call (double buffering), so packet destinations must be scratch")


def _reduce(L: _Linter, plan: Plan, pos: int, t: int, p: str, op: Op, w: Wiring) -> None:
    name = op.name
    src, dst = op.src or (), op.dst or ()
    if not src or not dst:
        L.err(p, f"{name} needs src_buff[0] and dst_buff[0] (local)")
        return
    _local(L, plan, pos, f"{p}.src_buff[0]", src[0])
    _local(L, plan, pos, f"{p}.dst_buff[0]", dst[0])
    remote_src = name in ("rre", "rres")
    remote_dst_from = {"res": 1, "rres": 1, "respkt": 1, "recspkt": 2}.get(name)
    if name in ("recpkt", "recspkt"):
        if len(dst) < 2:
            L.err(f"{p}.dst_buff", f"{name} writes packets to dst_buff[1]")
        else:
            _local(L, plan, pos, f"{p}.dst_buff[1]", dst[1])
    for j, b in enumerate(src[1:], 1):
        if remote_src:
            _remote(L, plan, pos, t, f"{p}.src_buff[{j}]", b, op.channel_type, w)
            if op.channel_type != "memory":
                L.err(f"{p}.channel_type", f"{name} reads remote buffers through memory channels")
        else:
            _local(L, plan, pos, f"{p}.src_buff[{j}]", b)
            if name in ("repkt", "respkt", "recpkt", "recspkt") and b.type != "s":
                L.err(f"{p}.src_buff[{j}]", f"{name} reads packets from scratch whatever the type says")
    if remote_dst_from is None:
        extra = dst[2:] if name == "recpkt" else dst[1:]
        if extra:
            L.warn(f"{p}.dst_buff", f"{name} writes only dst_buff[0]; the executor ignores the other entries")
    else:
        for j, b in enumerate(dst[remote_dst_from:], remote_dst_from):
            _remote(L, plan, pos, t, f"{p}.dst_buff[{j}]", b, op.channel_type, w)
            if op.channel_type != "memory":
                L.err(f"{p}.channel_type", f"{name} writes remote buffers through memory channels")
            if name in ("respkt", "recspkt"):
                _remote_scratch(L, plan, pos, t, f"{p}.dst_buff[{j}]", b, op.channel_type, w)
    if name in REDUCES:
        for j, b in enumerate(src[1:], 1):
            if b.size != src[0].size:
                L.warn(f"{p}.src_buff[{j}]", "sources of different sizes: the executor reduces src_buff[0]'s size")


# ----- size-dependent rules -------------------------------------------------------------------------


def _sizes(L: _Linter, plan: Plan, size: int | None, w: Wiring) -> None:
    if not plan.gpus or L.report.errors and any(f.path.endswith("_chunks") or f.path == "buffer_alignment"
                                                for f in L.report.errors):
        return
    given = size is not None
    if size is None:
        size = smallest_size(plan)
        if size is None:
            L.err("gpus", "no message size splits into every GPU's chunks (check input_chunks / output_chunks)")
            return
    ins, outs = buffer_sizes(plan, size)
    for pos, g in enumerate(plan.gpus):
        why = check_message_size(plan, g, ins, outs)
        if why:
            if given:
                L.err(f"gpus[{pos}]", f"the executor refuses a call of {size} bytes: {why}")
            return
    # pipeline iterations and signal / wait balance at this size
    signals: Counter = Counter()
    waits: Counter = Counter()
    for pos, g in enumerate(plan.gpus):
        try:
            geo = geometry(plan, g, ins, outs)
        except Exception:
            return
        for t, tb in enumerate(g.threadblocks):
            table = w.tb_channels[(pos, t)]
            for i, op in enumerate(tb.ops):
                reps = 1
                inner: tuple[Op, ...] = (op,)
                if op.name == "pipeline" and op.iter_context:
                    unit, nchunks = op.iter_context
                    raw = geo.raw_iterations(unit, nchunks)
                    if raw >= MAX_PIPELINE_ITERATIONS:
                        L.err(f"{tb_path(pos, t)}.ops[{i}]", f"{raw} iterations at {size} bytes: the kernel counts "
                                                             f"them in 16 bits and runs {raw % MAX_PIPELINE_ITERATIONS}; "
                                                             "raise unit_size or lower max_message_size")
                    reps = geo.iterations(unit, nchunks)
                    inner = op.ops or ()
                for x in inner:
                    if x.name in ("signal", "rlxsignal", "wait", "rlxwait") and x.channel_type in ("memory", "port"):
                        for cid in x.channel_ids or ():
                            if cid < len(table[x.channel_type]):
                                key = (pos, x.channel_type, table[x.channel_type][cid])
                                (signals if "signal" in x.name else waits)[key] += reps
                    if x.name in ("pws", "pwsf") and x.channel_type == "port":
                        for cid in (x.channel_ids or ())[:len(x.dst or ())]:
                            if cid < len(table["port"]):
                                signals[(pos, "port", table["port"][cid])] += reps
    for (pos, ctype, idx), count in sorted(signals.items()):
        chans = w.channels.get((pos, ctype), [])
        if idx >= len(chans) or chans[idx].partner is None:
            continue
        e = chans[idx]
        got = waits.get((e.peer, ctype, e.partner), 0)
        if got != count:
            L.err(f"gpus[{pos}].channels", f"{ctype} channel {idx} to gpu {e.peer}: {count} signal(s) per call at "
                                           f"{size} bytes but gpu {e.peer} waits {got} time(s) on its end "
                                           f"(channel {e.partner}); " + ("a wait hangs" if got > count else
                                                                         "the surplus releases a wait of the next call early"))
    for (pos, ctype, idx), count in sorted(waits.items()):
        chans = w.channels.get((pos, ctype), [])
        if idx < len(chans) and chans[idx].partner is not None:
            e = chans[idx]
            if (e.peer, ctype, e.partner) not in signals:
                L.err(f"gpus[{pos}].channels", f"{ctype} channel {idx} to gpu {e.peer}: {count} wait(s) per call but gpu "
                                               f"{e.peer} never signals its end (channel {e.partner}): hang")
