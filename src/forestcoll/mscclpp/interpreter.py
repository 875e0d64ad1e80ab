"""Run an MSCCL++ execution plan the way the executor does, on numpy buffers, and check the result.

Execution model (microsoft/mscclpp 1f5f065: ``execution_plan.cc``, ``executor.cc``,
``execution_kernel.hpp``; docs/mscclpp.md has the long form):

* Every GPU runs one kernel per call; its thread blocks run concurrently, each
  through its operations in order.  A ``pipeline`` repeats its inner operations
  ``ceil(num_chunks x chunk / unit_size)`` times (16-bit count), iteration ``i``
  moving bytes ``[i x unit, (i+1) x unit)`` of every buffer (packet operations
  redo their whole range).
* Chunk ``j`` of any buffer starts at ``j x chunk`` bytes, ``chunk`` being the
  input size over ``input_chunks`` (output over ``output_chunks`` when there are
  no input chunks); ``tbg_info`` splits a range among a group's thread blocks in
  alignment units.  Local references address this GPU's buffers; remote ones the
  peer's registered allocation, at this GPU's offsets.
* Memory-channel puts, gets, reductions and switch (NVLS) operations are done by
  the thread block's threads; port-channel puts by a proxy, asynchronously, in
  order per channel.  ``signal`` on a channel adds one to its partner's
  semaphore; ``wait`` consumes one (the k-th wait needs k signals).  Port signals
  are delivered after the channel's earlier puts.  ``sem_release`` /
  ``sem_acquire`` are GPU-wide counting semaphores; ``barrier`` meets
  ``num_threadblocks`` blocks.  Packet (LL) operations write data with the call's
  flag and readers spin until the flag matches.  Reductions always add (the
  executor ignores ``reduce_op``).

Race detection is happens-before with vector clocks, one clock per thread block,
per port-channel proxy and per host (the user code between calls).  Inside a
block only ``nop`` and ``barrier`` (``__syncthreads``) order the threads: a data
operation is ordered after earlier ones only across a ``nop``, a signal publishes
what the block did before its last ``nop``, and a wait only informs the thread
that waited (thread i handles ``channel_ids[i]``) until the next ``nop``.
Signals and waits carry release / acquire order; relaxed ones (``rlxsignal`` /
``rlxwait``) only order a later write after an earlier read (the handshake that
keeps a GPU from writing into a peer that is still reading).  A packet read is
ordered after the packet's write by its flag, nothing else.  Two accesses to the
same bytes, one a write, with no chain of these orders between them are a race.
With ``launches > 1`` consecutive calls run back to back; between two calls the
host of each GPU reads its output and writes the next input, after that GPU's
kernel has ended, and the next kernel starts after the host.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from forestcoll.errors import UsageError
from forestcoll.limits import (
    DENSE_RACE_CLOCK_BYTES,
    MAX_ITERATIONS,
    MAX_MSCCL_ELEMENTS,
    MAX_RACE_CLOCK_BYTES,
    MAX_SEED,
    check_count,
)
from forestcoll.mscclpp.clocks import BACKENDS
from forestcoll.mscclpp.machine import Machine
from forestcoll.mscclpp.plan import Plan, PlanError
from forestcoll.mscclpp.run_result import RunResult, Stuck
from forestcoll.mscclpp.semantics import COLLECTIVES, U32, buffer_sizes, check_message_size
from forestcoll.mscclpp.state import Fault, TbState
from forestcoll.progress import Progress

__all__ = ["DTYPES", "MODES", "PACKET_TYPES", "RunResult", "Stuck", "default_size", "run_file", "run_plan"]

DTYPES = ("float32", "float16", "int32", "uint32", "uint8")
PACKET_TYPES = ("LL16", "LL8")
MODES = ("in-place", "out-of-place")


# ----- the run -----------------------------------------------------------------------------------------


def default_size(plan: Plan) -> int:
    """A small size every GPU accepts, with chunks of several alignment units (so thread-block groups get a share
    each) and a whole number of packets."""
    n = max(len(plan.gpus), 1)
    a = plan.alignment or 16
    tbg = 1
    for g in plan.gpus:
        for tb in g.threadblocks:
            for op in tb.ops:
                for x in (op, *(op.ops or ())):
                    if x.tbg:
                        tbg = max(tbg, x.tbg[1])
    units = 2 * tbg
    g0 = plan.gpus[0] if plan.gpus else None
    chunks = (g0.input_chunks or g0.output_chunks or 1) if g0 else 1
    unit_bytes = math.lcm(a, 16)
    size = unit_bytes * units * chunks
    if plan.collective == "allgather" and g0 and g0.input_chunks:
        size = unit_bytes * units * g0.input_chunks * n
    elif plan.collective == "allgather" and g0:
        size = unit_bytes * units * (g0.output_chunks or 1)
    return size


def race_clocks(plan: Plan) -> tuple[int, str]:
    """(bytes, what they are) of the race detector's live vector clocks for ``plan``: an int32 per agent (thread
    blocks, port-channel proxies, hosts) in every thread block's and proxy's clock, two clocks each (release and
    control order) when the plan has relaxed operations, held dense (:class:`~forestcoll.mscclpp.clocks.DenseClock`).
    What the detector keeps besides (the knowledge each signal, release and barrier carries, frozen and shared) is
    smaller; the process takes about twice this.  Above :data:`DENSE_RACE_CLOCK_BYTES` the detector holds them
    shared instead (:class:`~forestcoll.mscclpp.clocks.SharedClock`), in a fraction of this (docs/limits.md)."""
    tbs = sum(len(g.threadblocks) for g in plan.gpus)
    ports = sum(len(c.connected_to or ()) for g in plan.gpus for c in g.channels if c.channel_type == "port")
    agents = tbs + ports + len(plan.gpus)
    relaxed = any(x.name in ("rlxsignal", "rlxwait") for g in plan.gpus for tb in g.threadblocks for op in tb.ops
                  for x in (op, *(op.ops or ())))
    levels = 2 if relaxed else 1
    need = (tbs + ports) * agents * 4 * levels
    return need, (f"{tbs:,} thread blocks' and {ports:,} port proxies' clocks x {levels} x {agents:,} agents x "
                  "4 bytes")


def race_clock_kind(plan: Plan) -> str:
    """The clocks the race detector holds for ``plan``: "dense" (the fastest) when :func:`race_clocks` is at most
    :data:`DENSE_RACE_CLOCK_BYTES`, else "shared" (a fraction of the memory, several times the CPU time)."""
    return "dense" if race_clocks(plan)[0] <= DENSE_RACE_CLOCK_BYTES else "shared"


def race_clocks_refused(plan: Plan) -> str | None:
    """Why the race detector is not run on ``plan`` (its clocks, counted dense, above :data:`MAX_RACE_CLOCK_BYTES`),
    or None."""
    need, what = race_clocks(plan)
    if need <= MAX_RACE_CLOCK_BYTES:
        return None
    return (f"its data-race detector would hold {need / 2**30:.1f} GiB of vector clocks ({what}; shared: a fraction of "
            f"it), above forestcoll's limit of {MAX_RACE_CLOCK_BYTES / 2**30:g} GiB")


def run_plan(plan: Plan, *, source: str = "plan", size: int | None = None, mode: str | None = None,
             dtype: str = "float32", launches: int = 1, race_check: bool = True, packet: str = "LL16",
             seed: int = 0, root: int | None = None, progress: Progress | None = None,
             clocks: str = "auto") -> RunResult:
    """Execute ``plan`` for a call of ``size`` bytes (the executor's size: the input, or the output for allgather;
    default: a small legal size) in ``mode`` (default: the plan's own), ``launches`` calls back to back, and check
    every call's result and (``race_check``) that no two unordered accesses touch the same bytes.  ``progress``
    (:mod:`forestcoll.progress`) hears the thread blocks done.  ``clocks`` picks the race detector's clock
    representation (:mod:`forestcoll.mscclpp.clocks`: "dense", "shared", or "auto": :func:`race_clock_kind`); the
    verdicts are the same."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    if packet not in PACKET_TYPES:
        raise UsageError(f"unknown packet type {packet!r}; choose LL16 or LL8")
    if clocks not in (*BACKENDS, "auto"):
        raise UsageError(f"unknown clock representation {clocks!r}; choose from auto, {', '.join(BACKENDS)}")
    check_count(launches, "launches", MAX_ITERATIONS, lo=1)
    if seed is not None:
        check_count(seed, "seed", MAX_SEED)
    if mode is None:
        mode = "in-place" if plan.inplace else "out-of-place"
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; choose in-place or out-of-place")
    if not plan.gpus:
        raise PlanError(f"{source}: the plan has no GPUs")
    for i, g in enumerate(plan.gpus):
        if g.id != i:
            raise PlanError(f"{source}: gpus[{i}] has id {g.id} (the executor requires id == position)")
    if root is not None:  # checked before the run: a root outside the plan was an IndexError, -1 the last GPU
        if plan.collective not in ("broadcast", "reduce"):
            raise UsageError(f"--root is for broadcast and reduce plans; {source} is {plan.collective}")
        if not 0 <= root < len(plan.gpus):
            raise UsageError(f"root {root} is not a GPU of this {len(plan.gpus)}-GPU plan (0..{len(plan.gpus) - 1})")
    if size is None:
        size = default_size(plan)
    if size < 1:
        raise UsageError(f"size must be >= 1 byte, got {size}")
    if size >= U32:
        raise UsageError(f"size {size}: the executor keeps offsets in 32 bits; interpret calls below 4 GiB")
    ins, outs = buffer_sizes(plan, size)
    itemsize = np.dtype(dtype).itemsize
    elements = len(plan.gpus) * (ins + outs) // itemsize
    if elements > MAX_MSCCL_ELEMENTS:
        raise UsageError(f"{source}: running a call of {size:,} bytes needs {elements:,} {dtype} elements "
                         f"({len(plan.gpus)} gpus x (input + output)), above forestcoll's limit of "
                         f"{MAX_MSCCL_ELEMENTS:,}; pass a smaller --size (see docs/limits.md)")
    for g in plan.gpus:
        why = check_message_size(plan, g, ins, outs)
        if why and "divides by it" not in why and "outside the plan's range" not in why:
            raise UsageError(f"{source}: the executor refuses a call of {size} bytes: {why}")
    if ins % itemsize or outs % itemsize:
        raise UsageError(f"size {size} is not a whole number of {dtype} elements")
    if race_check and (why := race_clocks_refused(plan)):
        raise UsageError(f"{source}: {why}; pass --no-race-check (see docs/limits.md)")
    result = RunResult(source, plan.collective, mode, size, ins, outs, dtype, launches, len(plan.gpus),
                       race_checked=race_check)
    for g in plan.gpus:
        why = check_message_size(plan, g, ins, outs)
        if why:
            result.notes.append(f"the executor would refuse this call: {why}")
            break
    if clocks == "auto":
        clocks = race_clock_kind(plan) if race_check else "dense"
    m = Machine(plan, size, mode, dtype, launches, race_check, packet, seed, source, result, clocks)
    result.threadblocks = len(m.tbs)
    t0 = time.perf_counter()
    try:
        m.run(progress, f"interpreting {source}")
    except Fault as exc:
        result.errors.append(str(exc))
        result.seconds = time.perf_counter() - t0
        return result
    result.seconds = time.perf_counter() - t0
    result.ops_executed, result.bytes_moved = m.ops_executed, m.moved
    stuck = [b for b in m.tbs if not b.done]
    if stuck:
        result.stuck = [_explain(m, b) for b in stuck]
        return result
    _leftovers(m, result)
    _check(m, result, root)
    return result


def run_file(path: str, **kwargs: Any) -> RunResult:
    """Read the plan at ``path`` and :func:`run_plan` it (what ``forestcoll mscclpp run`` does); a file that is
    not a plan raises a one-line :class:`PlanError`."""
    from forestcoll.mscclpp.plan import read_plan

    return run_plan(read_plan(path), source=str(path), **kwargs)


def _explain(m: Machine, b: TbState) -> Stuck:
    ins = b.prog[b.pc] if b.pc < len(b.prog) else None
    it = b.frames[-1][2] if b.frames and ins is not None and ins.inner else None
    reason = b.waiting or "not scheduled"
    key = b.blocked_on
    if key and key[0] == "chan":
        gpu, ctype, idx = key[1]
        end = m.wiring.channels[(gpu, ctype)][idx]
        peer = end.peer
        senders = []
        if end.partner is not None:
            for x in m.by_gpu[peer]:
                table = m.wiring.tb_channels[(peer, x.pos)].get(ctype, [])
                if end.partner in table:
                    senders.append(f"tb {x.pos} " + _where(x))
        reason += f"; gpu {peer}: " + ("; ".join(senders) if senders else
                                          f"no thread block holds its end (channel {end.partner})")
    return Stuck(b.gpu, b.pos, ins.path if ins else "end", ins.op.name if ins else "-", b.launch, it, reason)


def _where(x: TbState) -> str:
    if x.done:
        return "has finished"
    if x.pc >= len(x.prog):
        return "is at its end"
    ins = x.prog[x.pc]
    state = f"waits ({x.waiting})" if x.waiting else "is runnable"
    return f"is at {ins.path} ({ins.op.name}) and {state}"


def _leftovers(m: Machine, result: RunResult) -> None:
    for (gpu, ctype, idx), q in sorted(m.tokens.items()):
        if q:
            end = m.wiring.channels[(gpu, ctype)][idx]
            result.errors.append(f"{len(q)} signal(s) from gpu {end.peer} to gpu {gpu}'s {ctype} channel {idx} were never "
                                 "waited for: the next call's wait on it returns before its data is there")
    for key, v in sorted(m.sem_value.items()):
        if v != m.sem_init[key]:
            result.errors.append(f"gpu {key[0]} semaphore {key[1]} ends at {v}, not its initial {m.sem_init[key]}: the "
                                 "next call starts out of step")


def _check(m: Machine, result: RunResult, root: int | None) -> None:
    coll = m.plan.collective
    if coll not in COLLECTIVES:
        return
    n = m.n
    dt = m.dtype
    ins, outs = m.ins, m.outs
    for launch in range(m.launches):
        inputs = [x.view(dt) for x in m.inputs[launch]]
        got = [x.view(dt) for x in m.outputs[launch]]
        call = f"call {launch + 1}: " if m.launches > 1 else ""
        expect: dict[int, np.ndarray] = {}
        if coll == "allgather":
            full = np.concatenate(inputs)
            expect = {r: full for r in range(n)}
        elif coll == "allreduce":
            red = _sum(inputs, dt)
            expect = {r: red for r in range(n)}
        elif coll == "reducescatter":
            red = _sum(inputs, dt)
            k = outs // dt.itemsize
            expect = {r: red[r * k:(r + 1) * k] for r in range(n)}
        elif coll == "alltoall":
            k = ins // dt.itemsize // n
            expect = {r: np.concatenate([inputs[j][r * k:(r + 1) * k] for j in range(n)]) for r in range(n)}
        elif coll in ("broadcast", "reduce"):
            cands = [root] if root is not None else list(range(n))
            found = None
            for c in cands:
                if coll == "broadcast" and all(_same(got[r], inputs[c]) for r in range(n)):
                    found = c
                    break
                if coll == "reduce" and _same(got[c], _sum(inputs, dt)):
                    found = c
                    break
            if found is None:
                target = f"root {root}" if root is not None else "any root"
                result.errors.append(f"{call}the outputs are not a {coll} from {target}")
                result.checked = True
                continue
            result.root = found
            expect = {}
        elif coll == "sendrecv":
            for r in range(n):
                src = [j for j in range(n) if j != r and _same(got[r], inputs[j])]
                if not src:
                    result.errors.append(f"{call}gpu {r}'s output is no other GPU's input")
        result.checked = True
        for r in sorted(expect):
            diff = _first_difference(got[r], expect[r])
            if diff is not None:
                idx, a, e = diff
                never = " (never written)" if _blank(a, dt) else ""
                bad = int(np.sum(~_eq(got[r], expect[r])))
                byte = idx * dt.itemsize
                chunk = byte // m.geo[r].upper_chunk if m.geo[r].upper_chunk else 0
                result.errors.append(f"{call}gpu {r} output byte {byte} (chunk {chunk}): got {a}, expected {e}{never}; "
                                     f"{bad} of {got[r].size} elements wrong" + _last_writer(m, r, byte))
                if len(result.errors) >= 8:
                    return
        if m.mode == "out-of-place":
            for r in range(n):
                alloc, base, size = m.bufs[r].table["i"]
                now = alloc.data[base:base + size].view(dt)
                if launch == m.launches - 1 and not _same(now, inputs[r]):
                    result.errors.append(f"gpu {r} overwrote its input buffer in an out-of-place call")


def _last_writer(m: Machine, gpu: int, byte: int) -> str:
    """Who last wrote a byte of a GPU's output (known when races are tracked)."""
    if not m.race:
        return ""
    alloc, base, _size = m.bufs[gpu].table["o"]
    cell = (base + byte) // alloc.cell
    if cell >= alloc.ncells or alloc.w_agent[cell] < 0:
        return ""
    if alloc.w_instr[cell] < 0:
        return "; nothing wrote it during the call (it holds what the host wrote)"
    return "; last written by " + m._who(int(alloc.w_instr[cell]), int(alloc.w_tag[cell]), int(alloc.w_agent[cell]))


def _sum(inputs: list[np.ndarray], dt: np.dtype) -> np.ndarray:
    acc = inputs[0].copy()
    for x in inputs[1:]:
        acc = (acc + x).astype(dt)
    return acc


def _eq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return (a == b) | (np.isnan(a) & np.isnan(b))
    return a == b


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all(_eq(a, b)))


def _first_difference(a: np.ndarray, b: np.ndarray) -> tuple[int, Any, Any] | None:
    if a.shape != b.shape:
        return 0, f"{a.size} elements", f"{b.size}"
    ok = _eq(a, b)
    if bool(np.all(ok)):
        return None
    i = int(np.argmin(ok))
    return i, a[i], b[i]


def _blank(x: Any, dt: np.dtype) -> bool:
    if dt.kind == "f":
        return bool(np.isnan(x))
    return int(x) == int(np.full(1, 0xFF, np.uint8).repeat(dt.itemsize).view(dt)[0])
