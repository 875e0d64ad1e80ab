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
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forestcoll.errors import UsageError
from forestcoll.mscclpp.plan import BufRef, Op, Plan, PlanError
from forestcoll.mscclpp.semantics import (
    BUFFER_NAMES,
    COLLECTIVES,
    PIPELINED,
    U32,
    Geometry,
    buffer_sizes,
    check_message_size,
    geometry,
    packet_payload,
    scratch_offset,
    wire,
)

DTYPES = ("float32", "float16", "int32", "uint32", "uint8")
PACKET_TYPES = ("LL16", "LL8")
MODES = ("in-place", "out-of-place")
_READERS = 4


# ----- results -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stuck:
    """A thread block that cannot move at the end of a deadlocked run."""

    gpu: int
    tb: int
    path: str
    op: str
    launch: int
    iteration: int | None
    reason: str

    def format(self) -> str:
        it = f" iteration {self.iteration}" if self.iteration is not None else ""
        call = f" (call {self.launch})" if self.launch > 1 else ""
        return f"gpu {self.gpu} tb {self.tb} {self.path} ({self.op}{it}){call}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "tb": self.tb, "path": self.path, "op": self.op, "launch": self.launch,
                "iteration": self.iteration, "reason": self.reason}


@dataclass
class RunResult:
    """What one interpreted run did and whether the collective came out right (``ok``: right and race-free)."""

    source: str
    collective: str
    mode: str
    size: int
    input_size: int
    output_size: int
    dtype: str
    launches: int
    ngpus: int
    threadblocks: int = 0
    ops_executed: int = 0
    bytes_moved: int = 0
    seconds: float = 0.0
    checked: bool = False
    race_checked: bool = False
    root: int | None = None
    errors: list[str] = field(default_factory=list)
    races: list[str] = field(default_factory=list)
    relaxed: list[str] = field(default_factory=list)  # accesses ordered only through relaxed signals (warnings)
    stuck: list[Stuck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.races and not self.stuck

    @property
    def deadlocked(self) -> bool:
        return bool(self.stuck)

    @property
    def message(self) -> str:
        if self.stuck:
            return f"DEADLOCK: {len(self.stuck)} thread block(s) stuck; first: {self.stuck[0].format()}"
        if self.errors:
            return f"WRONG: {self.errors[0]}"
        if self.races:
            return f"RACE: {self.races[0]}"
        calls = f" in {self.launches} back-to-back calls" if self.launches > 1 else ""
        races = ", no data race" if self.race_checked else ""
        if not self.checked:
            return f"ran to completion{calls}{races} (no postcondition for {self.collective!r})"
        root = f" from root {self.root}" if self.root is not None else ""
        weak = f" ({len(self.relaxed)} access(es) ordered only by relaxed signals)" if self.relaxed else ""
        return (f"OK: {self.mode} {self.collective}{root} of {self.size} bytes right on {self.ngpus} GPUs{calls}{races}"
                + (", inputs untouched" if self.mode == "out-of-place" else "") + weak)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "message": self.message, "source": self.source, "collective": self.collective,
            "mode": self.mode, "size": self.size, "input_size": self.input_size, "output_size": self.output_size,
            "dtype": self.dtype, "launches": self.launches, "ngpus": self.ngpus, "threadblocks": self.threadblocks,
            "ops_executed": self.ops_executed, "bytes_moved": self.bytes_moved, "seconds": round(self.seconds, 4),
            "checked": self.checked, "race_checked": self.race_checked, "root": self.root, "errors": self.errors,
            "races": self.races, "relaxed_only": self.relaxed, "deadlock": [s.to_dict() for s in self.stuck], "notes": self.notes,
        }


class _Fault(Exception):
    """An access outside its buffer: the run stops (the executor would corrupt memory)."""


# ----- memory ------------------------------------------------------------------------------------------


class _Alloc:
    """One device allocation (bytes), grown lazily up to ``size``, with its race shadow."""

    def __init__(self, name: str, size: int, cell: int, race: bool) -> None:
        self.name, self.size, self.cell, self.race = name, size, cell, race
        self.data = np.full(0, 0xFF, dtype=np.uint8)
        self.ncells = 0
        if race:
            self.w_agent = np.full(0, -1, np.int32)
            self.w_clk = np.zeros(0, np.int32)
            self.w_instr = np.zeros(0, np.int32)
            self.w_tag = np.zeros(0, np.int32)
            self.r_agent = np.full((0, _READERS), -1, np.int32)
            self.r_clk = np.zeros((0, _READERS), np.int32)
            self.r_instr = np.zeros((0, _READERS), np.int32)
            self.r_tag = np.zeros((0, _READERS), np.int32)
            self.r_next = np.zeros(0, np.int8)

    def ensure(self, end: int) -> None:
        if end <= len(self.data):
            return
        new = min(self.size, max(end, 2 * len(self.data), 4096))
        grown = np.full(new, 0xFF, dtype=np.uint8)
        grown[:len(self.data)] = self.data
        self.data = grown
        if self.race:
            cells = -(-new // self.cell)
            extra = cells - self.ncells

            def pad(a: np.ndarray, fill: int) -> np.ndarray:
                shape = (extra,) + a.shape[1:]
                return np.concatenate([a, np.full(shape, fill, dtype=a.dtype)])

            self.w_agent = pad(self.w_agent, -1)
            self.w_clk = pad(self.w_clk, 0)
            self.w_instr = pad(self.w_instr, 0)
            self.w_tag = pad(self.w_tag, 0)
            self.r_agent = pad(self.r_agent, -1)
            self.r_clk = pad(self.r_clk, 0)
            self.r_instr = pad(self.r_instr, 0)
            self.r_tag = pad(self.r_tag, 0)
            self.r_next = pad(self.r_next, 0)
            self.ncells = cells


@dataclass
class _Buffers:
    """A GPU's logical buffers: type -> (allocation, byte offset in it, size)."""

    table: dict[str, tuple[_Alloc, int, int]]
    const: dict[str, int]  # offset of the buffer in its allocation (added to remote offsets by the accessor)


# ----- program -----------------------------------------------------------------------------------------


@dataclass
class _Instr:
    gid: int  # global index (names the operation in race reports)
    gpu: int
    tb: int
    path: str
    op: Op
    kind: str  # op name, or "pipe" / "endpipe"
    iters: int = 0  # pipeline: iterations at this size
    unit: int = 0
    body: int = 0  # pipeline: number of inner instructions
    inner: bool = False


class _Tb:
    __slots__ = ("gpu", "pos", "agent", "prog", "pc", "frames", "seg", "full", "ctrl", "lanes", "done", "launch",
                 "waiting", "ticket", "gen", "blocked_on")

    def __init__(self, gpu: int, pos: int, agent: int, prog: list[_Instr]) -> None:
        self.gpu, self.pos, self.agent, self.prog = gpu, pos, agent, prog
        self.pc = 0
        self.frames: list[list[int]] = []  # [start pc, end pc, iteration, iterations, unit]
        self.seg = 1
        self.full: np.ndarray | None = None
        self.ctrl: np.ndarray | None = None
        self.lanes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.done = False
        self.launch = 1
        self.waiting: str = ""
        self.ticket: dict[int, int] = {}  # semaphore -> ticket while blocked in sem_acquire
        self.gen: int | None = None  # barrier generation while blocked
        self.blocked_on: Any = None


class _Machine:
    MAX_RACES = 10

    def __init__(self, plan: Plan, size: int, mode: str, dtype: str, launches: int, race: bool, packet: str,
                 seed: int, source: str, result: RunResult) -> None:
        self.plan, self.size, self.mode, self.dtype = plan, size, mode, np.dtype(dtype)
        self.launches, self.race, self.packet, self.source, self.result = launches, race, packet, source, result
        self.rng = np.random.default_rng(seed)
        self.n = len(plan.gpus)
        self.wiring = wire(plan)
        self.ins, self.outs = buffer_sizes(plan, size)
        self.inplace = mode == "in-place"
        self.payload = packet_payload(packet)
        self.two_level = any(x.op.name in ("rlxsignal", "rlxwait") for x in self._all_instrs_preview())
        # geometry and memory
        self.geo: list[Geometry] = []
        self.bufs: list[_Buffers] = []
        cell = math.gcd(16, plan.alignment or 16, 8 if packet == "LL16" else 4)
        for pos, g in enumerate(plan.gpus):
            send_alloc, recv_alloc = self._allocs(pos)
            self.geo.append(geometry(plan, g, self.ins, self.outs, send_alloc, recv_alloc))
        for x in self._all_instrs_preview():
            if x.op.iter_context:
                cell = math.gcd(cell, x.op.iter_context[0] or cell)
        self.cell = max(cell, 1)
        for pos in range(self.n):
            self.bufs.append(self._make_buffers(pos))
        # program
        self.instrs: list[_Instr] = []
        self.tbs: list[_Tb] = []
        self.by_gpu: list[list[_Tb]] = []
        for pos, g in enumerate(plan.gpus):
            row = []
            for t, tb in enumerate(g.threadblocks):
                prog = self._compile(pos, t, tb.ops)
                b = _Tb(pos, t, len(self.tbs), prog)
                row.append(b)
                self.tbs.append(b)
            self.by_gpu.append(row)
        nports = {pos: len(self.wiring.channels.get((pos, "port"), [])) for pos in range(self.n)}
        self.port_agent: dict[tuple[int, int], int] = {}
        a = len(self.tbs)
        for pos in range(self.n):
            for c in range(nports[pos]):
                self.port_agent[(pos, c)] = a
                a += 1
        self.host_agent = list(range(a, a + self.n))
        self.nagents = a + self.n
        # synchronisation state
        self.tokens: dict[tuple[int, str, int], deque] = {}  # channel end -> unconsumed signals (cumulative knowledge)
        self.last_cum: dict[tuple[int, str, int], tuple[Any, Any]] = {}
        self.waiters: dict[Any, list[_Tb]] = {}
        self.sem_value: dict[tuple[int, int], int] = {}
        self.sem_init: dict[tuple[int, int], int] = {}
        self.sem_releases: dict[tuple[int, int], list[tuple[Any, Any]]] = {}  # cumulative knowledge per release
        self.sem_tickets: dict[tuple[int, int], int] = {}
        for pos, g in enumerate(plan.gpus):
            for s, v in enumerate(g.semaphores or ()):
                self.sem_value[(pos, s)] = v
                self.sem_init[(pos, s)] = v
                self.sem_releases[(pos, s)] = []
                self.sem_tickets[(pos, s)] = 0
        self.barriers: dict[tuple[int, int], list] = {}  # (gpu, id) -> [arrivals, n, [knowledge per generation]]
        self.port_state: dict[int, dict[str, Any]] = {}  # agent -> put bookkeeping
        self.agent_vec: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.host_vec: list[tuple[np.ndarray, np.ndarray] | None] = [None] * self.n
        self.start_vec: list[np.ndarray | None] = [None] * self.n  # what a GPU's kernel knows when it starts
        self.pkt_know: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.host_clk = [0] * self.n
        self.races: set[tuple] = set()
        self.inputs: list[list[np.ndarray]] = []  # per launch, per gpu: the input written by the host
        self.outputs: list[list[np.ndarray]] = []  # per launch, per gpu: the output read by the host
        self.launch_done: list[int] = [0] * self.n  # calls each GPU finished
        self.ops_executed = 0
        self.moved = 0
        if race:
            for x in self.tbs:
                x.full = np.zeros(self.nagents, np.int32)
                x.ctrl = np.zeros(self.nagents, np.int32) if self.two_level else x.full
            for agent in self.port_agent.values():
                f = np.zeros(self.nagents, np.int32)
                self.agent_vec[agent] = (f, np.zeros(self.nagents, np.int32) if self.two_level else f)
                self.port_state[agent] = {"mark": None, "lanes": set(), "pre": None}

    # -- setup ---------------------------------------------------------------------------------------------

    def _all_instrs_preview(self):
        for g in self.plan.gpus:
            for tb in g.threadblocks:
                for op in tb.ops:
                    yield _Instr(0, 0, 0, "", op, op.name)
                    for inner in op.ops or ():
                        yield _Instr(0, 0, 0, "", inner, inner.name)

    def _allocs(self, pos: int) -> tuple[int, int]:
        if self.inplace and self.plan.collective == "allgather":
            return self.outs, self.outs
        if self.inplace and self.plan.collective == "reducescatter":
            return self.ins, self.ins
        if self.inplace:
            m = max(self.ins, self.outs)
            return m, m
        return self.ins, self.outs

    def _make_buffers(self, pos: int) -> _Buffers:
        geo = self.geo[pos]
        ins, outs = self.ins, self.outs
        scr = _Alloc(f"gpu {pos} scratch", geo.scratch_size, self.cell, self.race)
        coll = self.plan.collective
        if not self.inplace:
            a = _Alloc(f"gpu {pos} input", ins, self.cell, self.race)
            b = _Alloc(f"gpu {pos} output", outs, self.cell, self.race)
            return _Buffers({"i": (a, 0, ins), "o": (b, 0, outs), "s": (scr, 0, geo.scratch_size)}, {"i": 0, "o": 0, "s": 0})
        if coll == "allgather":
            b = _Alloc(f"gpu {pos} output", outs, self.cell, self.race)
            off = pos * ins
            return _Buffers({"i": (b, off, ins), "o": (b, 0, outs), "s": (scr, 0, geo.scratch_size)}, {"i": off, "o": 0, "s": 0})
        if coll == "reducescatter":
            a = _Alloc(f"gpu {pos} input", ins, self.cell, self.race)
            off = pos * outs
            return _Buffers({"i": (a, 0, ins), "o": (a, off, outs), "s": (scr, 0, geo.scratch_size)}, {"i": 0, "o": off, "s": 0})
        a = _Alloc(f"gpu {pos} buffer", max(ins, outs), self.cell, self.race)
        return _Buffers({"i": (a, 0, ins), "o": (a, 0, outs), "s": (scr, 0, geo.scratch_size)}, {"i": 0, "o": 0, "s": 0})

    def _compile(self, pos: int, t: int, ops: tuple[Op, ...]) -> list[_Instr]:
        prog: list[_Instr] = []
        geo = self.geo[pos]
        for i, op in enumerate(ops):
            path = f"ops[{i}]"
            if op.name == "pipeline":
                unit, nchunks = op.iter_context or (0, 0)
                if unit == 0:
                    raise PlanError(f"{self.source}: gpus[{pos}].threadblocks[{t}].{path}: pipeline unit_size 0")
                iters = geo.iterations(unit, nchunks)
                inner = op.ops or ()
                prog.append(_Instr(len(self.instrs), pos, t, path, op, "pipe", iters, unit, len(inner)))
                self.instrs.append(prog[-1])
                for j, x in enumerate(inner):
                    prog.append(_Instr(len(self.instrs), pos, t, f"{path}.ops[{j}]", x, x.name, inner=True))
                    self.instrs.append(prog[-1])
                prog.append(_Instr(len(self.instrs), pos, t, path, op, "endpipe"))
                self.instrs.append(prog[-1])
            else:
                prog.append(_Instr(len(self.instrs), pos, t, path, op, op.name))
                self.instrs.append(prog[-1])
        return prog

    # -- references ----------------------------------------------------------------------------------------

    def _fail(self, b: _Tb, ins: _Instr, what: str) -> _Fault:
        return _Fault(f"gpu {b.gpu} tb {b.pos} {ins.path} ({ins.op.name}): {what}")

    def _span(self, pos: int, ref: BufRef, btype: str, op: Op) -> tuple[int, int]:
        """(start, bytes) of a reference in buffer ``btype`` as the parser computes it (tbg share applied)."""
        geo = self.geo[pos]
        start = geo.offset(ref.index, scratch=btype == "s")
        nbytes = geo.span(ref.index, ref.size)
        if op.tbg is not None and op.tbg[1] > 0:
            start, nbytes = geo.split(start, nbytes, op.tbg[0], op.tbg[1])
        return start, nbytes

    def _remote_of(self, b: _Tb, ins: _Instr, ref: BufRef, ctype: str | None) -> tuple[int, str]:
        if ctype not in ("memory", "port") or ref.buffer_id is None:
            raise self._fail(b, ins, "a remote buffer reference needs buffer_id and a memory or port channel_type")
        ids = self.wiring.tb_remote[(b.gpu, b.pos)][ctype]
        if ref.buffer_id >= len(ids):
            raise self._fail(b, ins, f"remote buffer_id {ref.buffer_id}: the thread block lists {len(ids)} for {ctype}")
        rbs = self.plan.gpus[b.gpu].remote_buffers
        rid = ids[ref.buffer_id]
        if rid >= len(rbs):
            raise self._fail(b, ins, f"remote buffer {rid} does not exist")
        rb = rbs[rid]
        if not 0 <= rb.rank < self.n:
            raise self._fail(b, ins, f"remote buffer of gpu {rb.rank}, which is not in the plan")
        return rb.rank, rb.type

    def _switch_of(self, b: _Tb, ins: _Instr, ref: BufRef) -> tuple[str, tuple[int, ...]]:
        nv = self.wiring.tb_channels[(b.gpu, b.pos)]["switch"]
        if ref.switch_channel_id is None or ref.switch_channel_id >= len(nv):
            raise self._fail(b, ins, f"switch channel {ref.switch_channel_id}: the thread block holds {len(nv)}")
        groups = self.wiring.switches.get(b.gpu, [])
        if nv[ref.switch_channel_id] >= len(groups):
            raise self._fail(b, ins, f"switch channel {nv[ref.switch_channel_id]} does not exist on gpu {b.gpu}")
        grp = groups[nv[ref.switch_channel_id]]
        return grp.buffer, grp.ranks

    def _adj(self, pos: int, btype: str, off: int) -> int:
        geo = self.geo[pos]
        if geo.reuse and btype == "s" and geo.scratch_chunk:
            return off % geo.scratch_chunk
        return off

    def _local(self, b: _Tb, ins: _Instr, pos: int, btype: str, start: int, nbytes: int) -> tuple[_Alloc, int]:
        """Allocation and byte address of ``nbytes`` at ``start`` of GPU ``pos``'s own buffer ``btype``."""
        alloc, base, size = self.bufs[pos].table[btype]
        if start < 0 or start + nbytes > size:
            raise self._fail(b, ins, f"bytes {start}..{start + nbytes - 1} of gpu {pos}'s {BUFFER_NAMES[btype]} buffer, "
                                     f"which has {size} bytes in this call")
        alloc.ensure(base + start + nbytes)
        return alloc, base + start

    def _remote(self, b: _Tb, ins: _Instr, pos: int, btype: str, addr: int, nbytes: int) -> tuple[_Alloc, int]:
        """``nbytes`` at byte ``addr`` of GPU ``pos``'s allocation holding ``btype`` (registered memory is the whole
        allocation; the executor's remote offsets are the accessing GPU's, its buffer offset included)."""
        alloc, _base, _size = self.bufs[pos].table[btype]
        if addr < 0 or addr + nbytes > alloc.size:
            raise self._fail(b, ins, f"bytes {addr}..{addr + nbytes - 1} of gpu {pos}'s {BUFFER_NAMES[btype]} "
                                     f"allocation, which has {alloc.size} bytes")
        alloc.ensure(addr + nbytes)
        return alloc, addr

    def _const(self, pos: int, btype: str) -> int:
        """constSrcOffset / constDstOffset: where GPU ``pos``'s buffer starts in its allocation (0 for scratch)."""
        return self.bufs[pos].const[btype]

    # -- knowledge -----------------------------------------------------------------------------------------

    def _lane(self, b: _Tb, lane: int) -> tuple[np.ndarray, np.ndarray]:
        ext = b.lanes.get(lane)
        if ext is None:
            return b.full, b.ctrl
        return ext

    def _lane_extend(self, b: _Tb, lane: int) -> tuple[np.ndarray, np.ndarray]:
        ext = b.lanes.get(lane)
        if ext is None:
            f = b.full.copy()
            ext = (f, b.ctrl.copy() if self.two_level else f)
            b.lanes[lane] = ext
        return ext

    def _merge_into(self, dst: tuple[np.ndarray, np.ndarray], full: np.ndarray | None, ctrl: np.ndarray | None) -> None:
        if full is not None:
            np.maximum(dst[0], full, out=dst[0])
        if ctrl is not None and self.two_level:
            np.maximum(dst[1], ctrl, out=dst[1])

    def _sync_threads(self, b: _Tb) -> None:
        """``__syncthreads``: every thread learns what any thread knew; a new segment starts."""
        if self.race:
            for f, c in b.lanes.values():
                np.maximum(b.full, f, out=b.full)
                if self.two_level:
                    np.maximum(b.ctrl, c, out=b.ctrl)
            b.lanes.clear()
            b.full[b.agent] = b.seg
            if self.two_level:
                b.ctrl[b.agent] = b.seg
        b.seg += 1

    # -- race detection ------------------------------------------------------------------------------------

    def _access(self, alloc: _Alloc, lo: int, hi: int, write: bool, agent: int, clk: int, know: tuple[np.ndarray, np.ndarray],
                instr: int, tag: int, packet_read: bool = False) -> list[tuple[int, int]]:
        """Check one access against the last write and recent reads of its bytes, then record it.  Write after
        read needs only the relaxed (control) order; a read or write after a write needs release / acquire order,
        and one ordered only through relaxed signals is reported apart.  A packet read skips the write check (its
        flags order it) and returns the (operation, tag) keys of the packets' writers."""
        if hi <= lo:
            return []
        c0, c1 = lo // alloc.cell, -(-hi // alloc.cell)
        full, ctrl = know
        writers: list[tuple[int, int]] = []
        wa = alloc.w_agent[c0:c1]
        seen = wa >= 0
        if packet_read:
            if seen.any():
                keys = np.stack([alloc.w_instr[c0:c1][seen], alloc.w_tag[c0:c1][seen]], axis=1)
                writers = [(int(a), int(t)) for a, t in np.unique(keys, axis=0)]
        elif seen.any():
            safe = np.where(seen, wa, 0)
            same = (wa == agent) & (alloc.w_instr[c0:c1] == instr) & (alloc.w_tag[c0:c1] == tag)
            strong = (full[safe] >= alloc.w_clk[c0:c1]) | same
            bad = seen & ~strong
            if bad.any():
                weak = bad & (ctrl[safe] >= alloc.w_clk[c0:c1]) if self.two_level else np.zeros_like(bad)
                hard = bad & ~weak
                j = int(np.argmax(hard if hard.any() else bad))
                self._race(alloc, (c0 + j) * alloc.cell, write, instr, tag, True, int(alloc.w_instr[c0 + j]),
                           int(alloc.w_tag[c0 + j]), int(wa[j]), relaxed=not bool(hard.any()))
        if write:
            ra = alloc.r_agent[c0:c1]
            seen = ra >= 0
            if seen.any():
                safe = np.where(seen, ra, 0)
                ordered = (ctrl[safe] >= alloc.r_clk[c0:c1]) | ((ra == agent) & (alloc.r_instr[c0:c1] == instr)
                                                                & (alloc.r_tag[c0:c1] == tag))
                bad = seen & ~ordered
                if bad.any():
                    j, k = (int(x) for x in np.argwhere(bad)[0])
                    self._race(alloc, (c0 + j) * alloc.cell, True, instr, tag, False, int(alloc.r_instr[c0 + j, k]),
                               int(alloc.r_tag[c0 + j, k]), int(ra[j, k]))
            alloc.w_agent[c0:c1] = agent
            alloc.w_clk[c0:c1] = clk
            alloc.w_instr[c0:c1] = instr
            alloc.w_tag[c0:c1] = tag
            alloc.r_agent[c0:c1] = -1
            alloc.r_next[c0:c1] = 0
        else:
            slot = alloc.r_next[c0:c1].astype(np.intp)
            rows = np.arange(c0, c1)
            alloc.r_agent[rows, slot] = agent
            alloc.r_clk[rows, slot] = clk
            alloc.r_instr[rows, slot] = instr
            alloc.r_tag[rows, slot] = tag
            alloc.r_next[c0:c1] = (slot + 1) % _READERS
        return writers

    def _who(self, instr: int, tag: int, agent: int) -> str:
        launch, it = divmod(tag, 1 << 16)
        if instr < 0:
            g = self.host_agent.index(agent) if agent in self.host_agent else "?"
            when = "before call 1" if launch == 0 else f"after call {launch}"
            return f"the host of gpu {g} ({when})"
        x = self.instrs[instr]
        via = " (through its port channel's proxy)" if agent >= len(self.tbs) and agent not in self.host_agent else ""
        itx = f" iteration {it}" if x.inner else ""
        call = f" of call {launch}" if self.launches > 1 else ""
        return f"gpu {x.gpu} tb {x.tb} {x.path} ({x.op.name}{itx}{call}){via}"

    def _race(self, alloc: _Alloc, byte: int, write: bool, instr: int, tag: int, other_write: bool, oinstr: int,
              otag: int, oagent: int, relaxed: bool = False) -> None:
        me = self._who(instr, tag, self._current_agent)
        other = self._who(oinstr, otag, oagent)
        key = (alloc.name, instr if instr >= 0 else -1, oinstr, relaxed)
        if key in self.races or len(self.races) >= self.MAX_RACES:
            return
        self.races.add(key)
        what = (f"{alloc.name} byte {byte}: {me} {'writes' if write else 'reads'} it and {other} "
                f"{'wrote' if other_write else 'read'} it")
        if relaxed:
            self.result.relaxed.append(what + " ordered only by relaxed signals (no release / acquire: the write is "
                                              "not guaranteed visible)")
        else:
            self.result.races.append(what + " with nothing ordering the two")

    # -- running -------------------------------------------------------------------------------------------

    def run(self) -> None:
        for pos in range(self.n):
            self._host(pos, first=True)
        ready: deque[_Tb] = deque(self.tbs)
        while ready:
            b = ready.popleft()
            if b.done or b.waiting:
                continue
            self._step(b, ready)

    def _wait(self, b: _Tb, key: Any, why: str) -> None:
        b.waiting = why
        b.blocked_on = key
        self.waiters.setdefault(key, []).append(b)

    def _wake(self, key: Any, ready: deque) -> None:
        woken = self.waiters.pop(key, None)
        if woken:
            for w in woken:
                w.waiting = ""
                w.blocked_on = None
                ready.append(w)

    def _step(self, b: _Tb, ready: deque) -> None:
        prog = b.prog
        while True:
            if b.pc >= len(prog):
                self._finish(b, ready)
                return
            ins = prog[b.pc]
            if ins.kind == "pipe":
                if ins.iters == 0:
                    b.pc += ins.body + 2
                    continue
                b.frames.append([b.pc + 1, b.pc + 1 + ins.body, 0, ins.iters, ins.unit])
                b.pc += 1
                continue
            if ins.kind == "endpipe":
                fr = b.frames[-1]
                fr[2] += 1
                if fr[2] < fr[3]:
                    b.pc = fr[0]
                else:
                    b.frames.pop()
                    b.pc += 1
                continue
            if not self._exec(b, ins, ready):
                return
            self.ops_executed += 1
            b.pc += 1

    def _finish(self, b: _Tb, ready: deque) -> None:
        b.done = True
        self._sync_threads(b)  # the kernel's end: every thread's work is complete
        row = self.by_gpu[b.gpu]
        if all(x.done for x in row):
            self.launch_done[b.gpu] += 1
            self._host(b.gpu, first=False)
            if b.launch < self.launches:
                for x in row:
                    x.done = False
                    x.pc = 0
                    x.launch += 1
                    if self.race:
                        hf, hc = self.host_vec[x.gpu]
                        np.maximum(x.full, hf, out=x.full)
                        if self.two_level:
                            np.maximum(x.ctrl, hc, out=x.ctrl)
                    self._sync_threads(x)
                    ready.append(x)

    # -- the host between calls ------------------------------------------------------------------------

    def _fill(self, n: int) -> np.ndarray:
        dt = self.dtype
        count = n // dt.itemsize
        top = 3 if dt != np.dtype("uint8") else max(1, 255 // max(self.n, 1) // 2)
        if dt == np.dtype("float16"):
            top = max(1, min(3, 2048 // max(self.n, 1)))
        vals = self.rng.integers(0, top + 1, size=count).astype(dt)
        return vals.view(np.uint8)

    def _host(self, pos: int, first: bool) -> None:
        """The user code on GPU ``pos``: reads the output of the call that ended, writes the next input."""
        bufs = self.bufs[pos]
        agent = self.host_agent[pos]
        launch = self.launch_done[pos]
        if self.race:
            know = self.host_vec[pos]
            if know is None:
                f = np.zeros(self.nagents, np.int32)
                know = (f, np.zeros(self.nagents, np.int32) if self.two_level else f)
                self.host_vec[pos] = know
            for x in self.by_gpu[pos]:
                self._merge_into(know, x.full, x.ctrl)
                for lf, lc in x.lanes.values():
                    self._merge_into(know, lf, lc)
            self.host_clk[pos] += 1
            know[0][agent] = self.host_clk[pos]
            if self.two_level:
                know[1][agent] = self.host_clk[pos]
        self._current_agent = agent
        tag = launch << 16
        if not first:
            alloc, base, size = bufs.table["o"]
            alloc.ensure(base + size)
            if self.race:
                self._access(alloc, base, base + size, False, agent, self.host_clk[pos], self.host_vec[pos], -1, tag)
            while len(self.outputs) < launch:
                self.outputs.append([None] * self.n)  # type: ignore[list-item]
            self.outputs[launch - 1][pos] = alloc.data[base:base + size].copy()
        if self.race:
            self.start_vec[pos] = self.host_vec[pos][0].copy()
        if first or launch < self.launches:
            alloc, base, size = bufs.table["i"]
            alloc.ensure(base + size)
            data = self._fill(size)
            if self.race:
                self._access(alloc, base, base + size, True, agent, self.host_clk[pos], self.host_vec[pos], -1, tag)
            alloc.data[base:base + size] = data
            while len(self.inputs) <= launch:
                self.inputs.append([None] * self.n)  # type: ignore[list-item]
            self.inputs[launch][pos] = data.copy()
            if self.race:
                self.start_vec[pos] = self.host_vec[pos][0].copy()
            if first and self.race:
                for x in self.by_gpu[pos]:
                    hf, hc = self.host_vec[pos]
                    np.maximum(x.full, hf, out=x.full)
                    if self.two_level:
                        np.maximum(x.ctrl, hc, out=x.ctrl)

    # -- one operation -------------------------------------------------------------------------------------

    def _frame(self, b: _Tb, ins: _Instr) -> tuple[int, int | None, int | None]:
        """(offset, unit size, iteration) of a pipeline's inner operation; (0, None, None) outside pipelines."""
        if ins.inner and b.frames:
            fr = b.frames[-1]
            return (fr[2] * fr[4]) % U32, fr[4], fr[2]
        return 0, None, None

    def _tag(self, b: _Tb, it: int | None) -> int:
        return (b.launch << 16) | (it or 0)

    def _exec(self, b: _Tb, ins: _Instr, ready: deque) -> bool:
        name = ins.kind
        self._current_agent = b.agent
        if name == "nop":
            self._sync_threads(b)
            return True
        if name == "barrier":
            return self._barrier(b, ins, ready)
        if name in ("signal", "rlxsignal"):
            self._signal(b, ins, ready)
            return True
        if name in ("wait", "rlxwait"):
            return self._wait_op(b, ins, ready)
        if name == "flush":
            self._flush(b, ins)
            return True
        if name == "sem_release":
            self._sem_release(b, ins, ready)
            return True
        if name == "sem_acquire":
            return self._sem_acquire(b, ins, ready)
        return self._data(b, ins, ready)

    # -- synchronisation operations ---------------------------------------------------------------------

    def _channel(self, b: _Tb, ins: _Instr, ctype: str, cid: int):
        table = self.wiring.tb_channels[(b.gpu, b.pos)].get(ctype, [])
        if cid >= len(table):
            raise self._fail(b, ins, f"{ctype} channel {cid}: the thread block holds {len(table)}")
        ends = self.wiring.channels.get((b.gpu, ctype), [])
        if table[cid] >= len(ends):
            raise self._fail(b, ins, f"{ctype} channel {table[cid]} does not exist on gpu {b.gpu}")
        return ends[table[cid]]

    def _published(self, b: _Tb, lane: int, relaxed: bool, port_agent: int | None = None) -> tuple[Any, Any, Any]:
        """What a signal (or release) by thread ``lane`` of ``b`` carries: (release knowledge, control knowledge,
        the kernel-start knowledge).  A relaxed signal releases nothing written during the kernel."""
        if not self.race:
            return None, None, None
        f, c = self._lane(b, lane)
        full = f.copy()
        ctrl = c.copy() if self.two_level else full
        full[b.agent] = b.seg - 1
        if self.two_level:
            ctrl[b.agent] = b.seg - 1
        if port_agent is not None:
            af, ac = self._agent_published(port_agent, b, lane)
            np.maximum(full, af, out=full)
            if self.two_level:
                np.maximum(ctrl, ac, out=ctrl)
        start = self.start_vec[b.gpu]
        if relaxed:
            return start, ctrl, start
        return full, ctrl, start

    def _agent_published(self, agent: int, b: _Tb, lane: int) -> tuple[np.ndarray, np.ndarray]:
        st = self.port_state[agent]
        if st["mark"] == (b.agent, b.seg) and (st["lanes"] - {lane}) and st["pre"] is not None:
            return st["pre"]
        return self.agent_vec[agent]

    def _deliver(self, end, token: tuple[Any, Any, Any], ready: deque) -> None:
        if end.partner is None:
            return  # an unpaired channel: the signal reaches a semaphore no channel waits on
        key = (end.peer, end.type, end.partner)
        q = self.tokens.setdefault(key, deque())
        if self.race:
            # a wait synchronises with every earlier signal on the semaphore (one release sequence): keep the
            # cumulative knowledge up to each signal
            last = self.last_cum.get(key)
            if last is not None:
                token = tuple(np.maximum(x, y) if x is not y else x for x, y in zip(token, last))
            self.last_cum[key] = token
            q.append(token)
        else:
            q.append(None)
        self._wake(("chan", key), ready)

    def _signal(self, b: _Tb, ins: _Instr, ready: deque) -> None:
        op = ins.op
        relaxed = ins.kind == "rlxsignal"
        ctype = op.channel_type
        if ctype not in ("memory", "port"):
            return
        for lane, cid in enumerate(op.channel_ids or ()):
            end = self._channel(b, ins, ctype, cid)
            agent = self.port_agent.get((b.gpu, end.index)) if ctype == "port" else None
            token = self._published(b, lane, relaxed and ctype == "memory", agent)
            self._deliver(end, token, ready)

    def _wait_op(self, b: _Tb, ins: _Instr, ready: deque) -> bool:
        op = ins.op
        ctype = op.channel_type
        if ctype not in ("memory", "port"):
            return True
        ends = [self._channel(b, ins, ctype, cid) for cid in op.channel_ids or ()]
        need: dict[tuple, int] = {}
        for end in ends:
            key = (end.gpu, end.type, end.index)
            need[key] = need.get(key, 0) + 1
        for key, k in need.items():
            if len(self.tokens.get(key, ())) < k:
                end = self.wiring.channels[(key[0], key[1])][key[2]]
                self._wait(b, ("chan", key), f"waits for a signal from gpu {end.peer} on {ctype} channel {key[2]}")
                return False
        relaxed = ins.kind == "rlxwait" and ctype == "memory"
        for lane, end in enumerate(ends):
            tok = self.tokens[(end.gpu, end.type, end.index)].popleft()
            if self.race and tok is not None:
                full, ctrl, start = tok
                ext = self._lane_extend(b, lane)
                # a relaxed wait acquires nothing but what was visible before the signaller's kernel began
                self._merge_into(ext, start if relaxed else full, ctrl)
        return True

    def _flush(self, b: _Tb, ins: _Instr) -> None:
        op = ins.op
        if op.channel_type != "port" and op.channel_type is not None:
            pass
        n = len(op.dst or ())  # handleFlush counts channels by dst_buff (executor quirk)
        for lane, cid in enumerate((op.channel_ids or ())[:n]):
            end = self._channel(b, ins, "port", cid)
            if self.race:
                agent = self.port_agent[(b.gpu, end.index)]
                af, ac = self._agent_published(agent, b, lane)
                self._merge_into(self._lane_extend(b, lane), af, ac)

    def _sem(self, b: _Tb, ins: _Instr, s: int) -> tuple[int, int]:
        key = (b.gpu, s)
        if key not in self.sem_value:
            raise self._fail(b, ins, f"semaphore {s} does not exist on gpu {b.gpu}")
        return key

    def _sem_release(self, b: _Tb, ins: _Instr, ready: deque) -> None:
        for lane, s in enumerate(ins.op.semaphore_ids or ()):
            key = self._sem(b, ins, s)
            self.sem_value[key] += 1
            if self.race:
                full, ctrl, _start = self._published(b, lane, False)
                rel = self.sem_releases[key]
                if rel:
                    pf, pc = rel[-1]
                    full = np.maximum(full, pf)
                    ctrl = np.maximum(ctrl, pc) if self.two_level else full
                rel.append((full, ctrl))
            else:
                self.sem_releases[key].append((None, None))
            self._wake(("sem", key), ready)

    def _sem_acquire(self, b: _Tb, ins: _Instr, ready: deque) -> bool:
        sems = ins.op.semaphore_ids or ()
        for s in sems:
            key = self._sem(b, ins, s)
            if s not in b.ticket:
                b.ticket[s] = self.sem_tickets[key]
                self.sem_tickets[key] += 1
        for s in sems:
            key = (b.gpu, s)
            needed = b.ticket[s] + 1 - self.sem_init[key]  # releases this acquire waits for (first come, first served)
            if len(self.sem_releases[key]) < needed:
                self._wait(b, ("sem", key), f"waits on semaphore {s} (value {self.sem_value[key]}; needs release "
                                            f"{needed}, {len(self.sem_releases[key])} so far)")
                return False
        for lane, s in enumerate(sems):
            key = (b.gpu, s)
            needed = b.ticket.pop(s) + 1 - self.sem_init[key]
            self.sem_value[key] -= 1
            if self.race and needed >= 1:
                full, ctrl = self.sem_releases[key][needed - 1]
                self._merge_into(self._lane_extend(b, lane), full, ctrl)
        return True

    def _barrier(self, b: _Tb, ins: _Instr, ready: deque) -> bool:
        op = ins.op
        nblocks = op.num_threadblocks or 0
        if b.gen is None:
            self._sync_threads(b)
            if nblocks <= 1:
                return True
            key = (b.gpu, op.barrier_id)
            st = self.barriers.setdefault(key, [0, nblocks, {}])
            if st[1] != nblocks:
                raise self._fail(b, ins, f"barrier {op.barrier_id} used with {nblocks} and {st[1]} thread blocks")
            gen = st[0] // nblocks
            st[0] += 1
            b.gen = gen
            if self.race:
                f = b.full.copy()
                c = b.ctrl.copy() if self.two_level else f
                f[b.agent] = b.seg - 1
                prev = st[2].get(gen)
                if prev is not None:
                    np.maximum(f, prev[0], out=f)
                    if self.two_level:
                        np.maximum(c, prev[1], out=c)
                st[2][gen] = (f, c)
            if st[0] % nblocks == 0:
                self._wake(("barrier", key, gen), ready)
        key = (b.gpu, op.barrier_id)
        st = self.barriers[key]
        if st[0] < (b.gen + 1) * nblocks:
            self._wait(b, ("barrier", key, b.gen), f"waits at barrier {op.barrier_id} ({st[0] - b.gen * nblocks} of "
                                                   f"{nblocks} thread blocks arrived)")
            return False
        if self.race:
            f, c = st[2][b.gen]
            self._merge_into((b.full, b.ctrl), f, c)
        b.gen = None
        self._sync_threads(b)
        return True

    # -- data operations --------------------------------------------------------------------------------

    def _data(self, b: _Tb, ins: _Instr, ready: deque) -> bool:
        op = ins.op
        name = ins.kind
        off, unit, it = self._frame(b, ins)
        pipelined = unit is not None and name in PIPELINED
        tag = self._tag(b, it)
        geo = self.geo[b.gpu]
        flag = b.launch
        soff = scratch_offset(geo, self.plan, flag)
        src, dst = op.src or (), op.dst or ()
        know = (b.full, b.ctrl)

        def size_of(nbytes: int) -> int:
            if not pipelined:
                return nbytes
            return min((nbytes - off) % U32, unit)

        def adj(pos: int, btype: str) -> int:
            return self._adj(pos, btype, off) if pipelined else 0

        def rd(alloc: _Alloc, lo: int, n: int, pkt: bool = False, agent: int | None = None, clk: int = 0,
               k: Any = None) -> np.ndarray:
            nonlocal know
            if self.race:
                writers = self._access(alloc, lo, lo + n, False, b.agent if agent is None else agent,
                                       b.seg if agent is None else clk, know if k is None else k, ins.gid, tag, pkt)
                if pkt and writers:
                    # a packet read is ordered after the packet's writer (its flag): it learns what the writer knew
                    f = know[0].copy()
                    c = know[1].copy() if self.two_level else f
                    for w in writers:
                        got = self.pkt_know.get(w)
                        if got is not None:
                            np.maximum(f, got[0], out=f)
                            if self.two_level:
                                np.maximum(c, got[1], out=c)
                    know = (f, c)
                    self._merge_into(self._lane_extend(b, -1), f, c)
            return alloc.data[lo:lo + n]

        def wr(alloc: _Alloc, lo: int, data: np.ndarray, agent: int | None = None, clk: int = 0, k: Any = None,
               pkt: bool = False) -> None:
            if self.race:
                kk = know if k is None else k
                self._access(alloc, lo, lo + len(data), True, b.agent if agent is None else agent,
                             b.seg if agent is None else clk, kk, ins.gid, tag)
                if pkt and (ins.gid, tag) not in self.pkt_know:
                    f = kk[0].copy()
                    c = kk[1].copy() if self.two_level else f
                    if agent is None:
                        f[b.agent] = max(int(f[b.agent]), b.seg)
                        c[b.agent] = max(int(c[b.agent]), b.seg)
                    self.pkt_know[(ins.gid, tag)] = (f, c)
            alloc.data[lo:lo + len(data)] = data
            self.moved += len(data)

        def local_ref(ref: BufRef, packets: bool = False) -> tuple[str, int, int]:
            if ref.type is None:
                raise self._fail(b, ins, "a local buffer reference needs 'type'")
            start, nbytes = self._span(b.gpu, ref, ref.type, op)
            return ref.type, start, nbytes

        # -- packets: check readiness first (the kernel spins until every flag matches)
        pkt_reads: list[tuple[_Alloc, int, int]] = []
        if name in ("upkt", "rppkt", "respkt", "repkt", "recpkt", "recspkt", "gstorepkt"):
            if name == "gstorepkt":
                t, s0, n0 = local_ref(src[0])
                alloc, lo = self._local(b, ins, b.gpu, t, 2 * s0 + (soff if t == "s" else 0), 2 * n0)
                pkt_reads.append((alloc, lo, n0))
            else:
                srcs = src[:1] if name in ("upkt", "rppkt") else src[1:]
                for ref in srcs:
                    start, nbytes = self._span(b.gpu, ref, "s", op)
                    if name not in ("upkt", "rppkt"):
                        nbytes = self._span(b.gpu, src[0], src[0].type or "s", op)[1]
                    alloc, lo = self._local(b, ins, b.gpu, "s", soff + 2 * start, 2 * nbytes)
                    pkt_reads.append((alloc, lo, nbytes))
            for alloc, lo, nbytes in pkt_reads:
                if not self._packets_ready(alloc, lo, nbytes, flag):
                    self._wait(b, ("pkt", b.gpu), f"waits for packets (flag {flag}) at byte {lo} of {alloc.name}")
                    return False

        # -- execute
        if name in ("put", "pws", "pwsf"):
            ctype = op.channel_type
            if ctype == "memory":
                if not src:
                    raise self._fail(b, ins, "a put needs src_buff")
                base_type = src[0].type or "i"
                for i, dref in enumerate(dst):
                    sref = src[i] if i < len(src) else BufRef(0, 0, "i")
                    _t, s0, _n = local_ref(sref) if sref.type else (base_type, 0, 0)
                    rank, rtype = self._remote_of(b, ins, dref, "memory")
                    d0, dn = self._span(b.gpu, dref, rtype, op)
                    n = size_of(dn)
                    sa, slo = self._local(b, ins, b.gpu, base_type, s0 + adj(b.gpu, sref.type or base_type), n)
                    da, dlo = self._remote(b, ins, rank, rtype, d0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
                    wr(da, dlo, rd(sa, slo, n).copy())
            elif ctype == "port":
                for tid, dref in enumerate(dst):
                    cids = op.channel_ids or ()
                    if tid >= len(cids) or tid >= len(src):
                        raise self._fail(b, ins, f"destination {tid} has no channel or source")
                    end = self._channel(b, ins, "port", cids[tid])
                    agent = self.port_agent[(b.gpu, end.index)]
                    t, s0, _n = local_ref(src[tid])
                    rank, rtype = self._remote_of(b, ins, dref, "port")
                    d0, dn = self._span(b.gpu, dref, rtype, op)
                    n = size_of(dn)
                    sa, slo = self._local(b, ins, b.gpu, t, s0 + adj(b.gpu, t), n)
                    da, dlo = self._remote(b, ins, rank, rtype, d0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
                    clk, k = self._port_issue(agent, b, tid)
                    wr(da, dlo, rd(sa, slo, n, agent=agent, clk=clk, k=k).copy(), agent=agent, clk=clk, k=k)
                    if name in ("pws", "pwsf"):
                        self._deliver(end, self._published(b, tid, False, agent), ready)
                    if name == "pwsf" and self.race:
                        af, ac = self._agent_published(agent, b, tid)
                        self._merge_into(self._lane_extend(b, tid), af, ac)
            else:
                raise self._fail(b, ins, f"a put through a {ctype!r} channel")
        elif name == "get":
            for i, sref in enumerate(src):
                if i >= len(dst):
                    break
                dref = dst[i]
                rank, rtype = self._remote_of(b, ins, sref, "memory")
                s0, sn = self._span(b.gpu, sref, rtype, op)
                t, d0, _dn = local_ref(dref)
                n = size_of(sn)
                # the executor swaps the offsets: it writes locally at the source's offset and reads the remote at the
                # destination's (execution_kernel.hpp handleGet)
                la, llo = self._local(b, ins, b.gpu, t, s0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
                ra, rlo = self._remote(b, ins, rank, rtype, d0 + adj(b.gpu, t), n)
                wr(la, llo, rd(ra, rlo, n).copy())
        elif name == "copy":
            t, s0, sn = local_ref(src[0])
            u, d0, _dn = local_ref(dst[0])
            n = size_of(sn)
            if n:
                sa, slo = self._local(b, ins, b.gpu, t, s0 + adj(b.gpu, t), n)
                da, dlo = self._local(b, ins, b.gpu, u, d0 + adj(b.gpu, u), n)
                wr(da, dlo, rd(sa, slo, n).copy())
        elif name in ("re", "res", "rre", "rres"):
            self._reduce(b, ins, src, dst, size_of, adj, rd, wr, local_ref)
        elif name in ("ppkt", "rppkt", "cpkt", "upkt", "respkt", "repkt", "recpkt", "recspkt", "gstorepkt"):
            self._packet_op(b, ins, src, dst, soff, flag, rd, wr, local_ref, pkt_reads, ready)
            self._wake(("pkt", b.gpu), ready)
            for rank in self._packet_targets(b, ins):
                self._wake(("pkt", rank), ready)
        elif name in ("glres", "gstore"):
            self._switch(b, ins, src, dst, size_of, adj, rd, wr, local_ref)
        else:
            raise self._fail(b, ins, f"unknown operation {name!r}")
        return True

    def _port_issue(self, agent: int, b: _Tb, lane: int) -> tuple[int, tuple[np.ndarray, np.ndarray] | None]:
        """A put pushed to a port channel's proxy by thread ``lane``: the proxy learns what that thread knows."""
        if not self.race:
            return 0, None
        f, c = self.agent_vec[agent]
        st = self.port_state[agent]
        if st["mark"] != (b.agent, b.seg):
            st["mark"] = (b.agent, b.seg)
            st["lanes"] = set()
            st["pre"] = (f.copy(), c.copy() if self.two_level else None)
            if not self.two_level:
                st["pre"] = (st["pre"][0], st["pre"][0])
        st["lanes"].add(lane)
        lf, lc = self._lane(b, lane)
        np.maximum(f, lf, out=f)
        f[b.agent] = max(f[b.agent], b.seg - 1)
        if self.two_level:
            np.maximum(c, lc, out=c)
            c[b.agent] = max(c[b.agent], b.seg - 1)
        f[agent] += 1
        if self.two_level:
            c[agent] = f[agent]
        return int(f[agent]), (f, c)

    def _reduce(self, b, ins, src, dst, size_of, adj, rd, wr, local_ref) -> None:
        op = ins.op
        name = ins.kind
        dt = self.dtype
        t0, s0, sn = local_ref(src[0])
        n = size_of(sn)
        if n == 0:
            return
        sa, slo = self._local(b, ins, b.gpu, t0, s0 + adj(b.gpu, t0), n)
        acc = rd(sa, slo, n).copy().view(dt)
        for ref in src[1:]:
            if name in ("rre", "rres"):
                rank, rtype = self._remote_of(b, ins, ref, op.channel_type)
                r0, _rn = self._span(b.gpu, ref, rtype, op)
                ra, rlo = self._remote(b, ins, rank, rtype, r0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
            else:
                t, r0, _rn = local_ref(ref)
                ra, rlo = self._local(b, ins, b.gpu, t, r0 + adj(b.gpu, t), n)
            acc = acc + rd(ra, rlo, n).view(dt)
        data = np.ascontiguousarray(acc).view(np.uint8)
        u, d0, _dn = local_ref(dst[0])
        da, dlo = self._local(b, ins, b.gpu, u, d0 + adj(b.gpu, u), n)
        wr(da, dlo, data)
        if name in ("res", "rres"):
            for ref in dst[1:]:
                rank, rtype = self._remote_of(b, ins, ref, op.channel_type)
                r0, _rn = self._span(b.gpu, ref, rtype, op)
                ra, rlo = self._remote(b, ins, rank, rtype, r0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
                wr(ra, rlo, data)

    def _switch(self, b, ins, src, dst, size_of, adj, rd, wr, local_ref) -> None:
        op = ins.op
        dt = self.dtype
        if not dst:
            raise self._fail(b, ins, f"{op.name} needs dst_buff")
        dbuf, dranks = self._switch_of(b, ins, dst[0])
        d0, dn = self._span(b.gpu, dst[0], dbuf, op)
        if op.name == "glres":
            sbuf, sranks = self._switch_of(b, ins, src[0])
            s0, sn = self._span(b.gpu, src[0], sbuf, op)
            n = size_of(sn)
            if n == 0:
                return
            acc = None
            for r in sranks:
                ra, rlo = self._remote(b, ins, r, sbuf, s0 + self._const(b.gpu, sbuf) + adj(r, sbuf), n)
                v = rd(ra, rlo, n).view(dt)
                acc = v.copy() if acc is None else acc + v
            data = np.ascontiguousarray(acc).view(np.uint8)
        else:
            t, s0, sn = local_ref(src[0])
            n = size_of(sn)
            if n == 0:
                return
            sa, slo = self._local(b, ins, b.gpu, t, s0 + adj(b.gpu, t), n)
            data = rd(sa, slo, n).copy()
        for r in dranks:
            ra, rlo = self._remote(b, ins, r, dbuf, d0 + self._const(b.gpu, dbuf) + adj(r, dbuf), n)
            wr(ra, rlo, data)

    # -- packets ----------------------------------------------------------------------------------------

    def _to_packets(self, data: np.ndarray, flag: int) -> np.ndarray:
        w = data.view(np.uint32)
        f = np.uint32(flag % U32)
        if self.packet == "LL16":
            words = w.reshape(-1, 2)
            out = np.empty((words.shape[0], 4), np.uint32)
            out[:, 0] = words[:, 0]
            out[:, 1] = f
            out[:, 2] = words[:, 1]
            out[:, 3] = f
        else:
            out = np.empty((len(w), 2), np.uint32)
            out[:, 0] = w
            out[:, 1] = f
        return out.reshape(-1).view(np.uint8)

    def _from_packets(self, pkts: np.ndarray) -> np.ndarray:
        w = pkts.view(np.uint32)
        if self.packet == "LL16":
            words = w.reshape(-1, 4)[:, [0, 2]]
        else:
            words = w.reshape(-1, 2)[:, :1]
        return np.ascontiguousarray(words).reshape(-1).view(np.uint8)

    def _packets_ready(self, alloc: _Alloc, lo: int, nbytes: int, flag: int) -> bool:
        if nbytes % self.payload:
            return True  # reported when the op runs
        w = alloc.data[lo:lo + 2 * nbytes].view(np.uint32)
        flags = w.reshape(-1, 4)[:, [1, 3]] if self.packet == "LL16" else w.reshape(-1, 2)[:, 1:]
        return bool(np.all(flags == np.uint32(flag % U32)))

    def _packet_targets(self, b: _Tb, ins: _Instr) -> set[int]:
        out = set()
        for ref in ins.op.dst or ():
            if ref.buffer_id is not None and ins.op.channel_type in ("memory", "port"):
                try:
                    out.add(self._remote_of(b, ins, ref, ins.op.channel_type)[0])
                except _Fault:
                    pass
            if ref.switch_channel_id is not None:
                try:
                    out.update(self._switch_of(b, ins, ref)[1])
                except _Fault:
                    pass
        return out

    def _packet_op(self, b, ins, src, dst, soff, flag, rd, wr, local_ref, pkt_reads, ready) -> None:
        op = ins.op
        name = ins.kind
        dt = self.dtype
        pay = self.payload

        def check(nbytes: int) -> None:
            if nbytes % pay:
                raise self._fail(b, ins, f"{nbytes} bytes is not a whole number of {pay}-byte packet payloads")

        if name == "cpkt":
            t, s0, sn = local_ref(src[0])
            u, d0, _dn = local_ref(dst[0])
            check(sn)
            sa, slo = self._local(b, ins, b.gpu, t, s0 + (soff if t == "s" else 0), sn)
            da, dlo = self._local(b, ins, b.gpu, u, 2 * d0 + (soff if u == "s" else 0), 2 * sn)
            wr(da, dlo, self._to_packets(rd(sa, slo, sn).copy(), flag), pkt=True)
            return
        if name == "upkt":
            alloc, lo, n = pkt_reads[0]
            check(n)
            u, d0, _dn = local_ref(dst[0])
            da, dlo = self._local(b, ins, b.gpu, u, d0 + (soff if u == "s" else 0), n)
            wr(da, dlo, self._from_packets(rd(alloc, lo, 2 * n, pkt=True).copy()))
            return
        if name == "ppkt":
            ctype = op.channel_type
            if not src:
                raise self._fail(b, ins, "ppkt needs src_buff")
            for i, dref in enumerate(dst):
                sref = src[i] if i < len(src) else src[0]
                rank, rtype = self._remote_of(b, ins, dref, ctype)
                d0, _dn = self._span(b.gpu, dref, rtype, op)
                if ctype == "memory":
                    t0 = src[0].type or "i"
                    s0 = self._span(b.gpu, sref, sref.type or t0, op)[0]
                    n = self._span(b.gpu, sref, sref.type or t0, op)[1]
                    check(n)
                    sa, slo = self._local(b, ins, b.gpu, t0, s0 + (soff if t0 == "s" else 0), n)
                    da, dlo = self._remote(b, ins, rank, rtype, 2 * (d0 + self._const(b.gpu, rtype)) + soff, 2 * n)
                    wr(da, dlo, self._to_packets(rd(sa, slo, n).copy(), flag), pkt=True)
                else:
                    cids = op.channel_ids or ()
                    if i >= len(cids):
                        raise self._fail(b, ins, f"destination {i} has no channel")
                    end = self._channel(b, ins, "port", cids[i])
                    agent = self.port_agent[(b.gpu, end.index)]
                    t, s0, n = local_ref(sref)
                    sa, slo = self._local(b, ins, b.gpu, t, 2 * s0 + (soff if t == "s" else 0), 2 * n)
                    da, dlo = self._remote(b, ins, rank, rtype, 2 * (d0 + self._const(b.gpu, rtype)) + soff, 2 * n)
                    clk, k = self._port_issue(agent, b, i)
                    wr(da, dlo, rd(sa, slo, 2 * n, agent=agent, clk=clk, k=k).copy(), agent=agent, clk=clk, k=k, pkt=True)
            return
        if name == "rppkt":
            alloc, lo, n = pkt_reads[0]
            check(n)
            data = self._from_packets(rd(alloc, lo, 2 * n, pkt=True).copy())
            ctype = op.channel_type
            if ctype == "port":
                self._sync_threads(b)  # the port variant reads every packet, then __syncthreads, then puts
            for i, dref in enumerate(dst):
                rank, rtype = self._remote_of(b, ins, dref, ctype)
                d0, _dn = self._span(b.gpu, dref, rtype, op)
                da, dlo = self._remote(b, ins, rank, rtype, 2 * (d0 + self._const(b.gpu, rtype)) + soff, 2 * n)
                if ctype == "memory":
                    wr(da, dlo, self._to_packets(data, flag), pkt=True)
                else:
                    cids = op.channel_ids or ()
                    if i >= len(cids):
                        raise self._fail(b, ins, f"destination {i} has no channel")
                    end = self._channel(b, ins, "port", cids[i])
                    agent = self.port_agent[(b.gpu, end.index)]
                    clk, k = self._port_issue(agent, b, i)
                    raw = rd(alloc, lo, 2 * n, pkt=True, agent=agent, clk=clk, k=k).copy()
                    wr(da, dlo, raw, agent=agent, clk=clk, k=k, pkt=True)
            return
        if name in ("respkt", "repkt", "recpkt", "recspkt"):
            t, s0, n = local_ref(src[0])
            check(n)
            acc = np.zeros(n // dt.itemsize, dt)
            for alloc, lo, _nb in pkt_reads:
                acc = acc + self._from_packets(rd(alloc, lo, 2 * n, pkt=True).copy()).view(dt)
            sa, slo = self._local(b, ins, b.gpu, t, s0 + (soff if t == "s" else 0), n)
            acc = acc + rd(sa, slo, n).view(dt)
            data = np.ascontiguousarray(acc).view(np.uint8)
            u, d0, _dn = local_ref(dst[0])
            da, dlo = self._local(b, ins, b.gpu, u, d0 + (soff if u == "s" else 0), n)
            wr(da, dlo, data)
            first_remote = 1
            if name in ("recpkt", "recspkt"):
                if len(dst) < 2:
                    raise self._fail(b, ins, f"{name} needs a packet destination in dst_buff[1]")
                v, p0, _pn = local_ref(dst[1])
                pa, plo = self._local(b, ins, b.gpu, v, 2 * p0 + (soff if v == "s" else 0), 2 * n)
                wr(pa, plo, self._to_packets(data, flag), pkt=True)
                first_remote = 2
            if name in ("respkt", "recspkt"):
                pk = self._to_packets(data, flag)
                for ref in dst[first_remote:]:
                    rank, rtype = self._remote_of(b, ins, ref, op.channel_type)
                    r0, _rn = self._span(b.gpu, ref, rtype, op)
                    ra, rlo = self._remote(b, ins, rank, rtype, soff + 2 * (r0 + self._const(b.gpu, rtype)), 2 * n)
                    wr(ra, rlo, pk, pkt=True)
            return
        if name == "gstorepkt":
            alloc, lo, n = pkt_reads[0]
            check(n)
            data = self._from_packets(rd(alloc, lo, 2 * n, pkt=True).copy())
            dbuf, dranks = self._switch_of(b, ins, dst[0])
            d0, _dn = self._span(b.gpu, dst[0], dbuf, op)
            for r in dranks:
                ra, rlo = self._remote(b, ins, r, dbuf, soff + 2 * (d0 + self._const(b.gpu, dbuf)), 2 * n)
                wr(ra, rlo, self._to_packets(data, flag), pkt=True)
            return
        raise self._fail(b, ins, f"unknown packet operation {name!r}")


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


def run_plan(plan: Plan, *, source: str = "plan", size: int | None = None, mode: str | None = None,
             dtype: str = "float32", launches: int = 1, race_check: bool = True, packet: str = "LL16",
             seed: int = 0, root: int | None = None) -> RunResult:
    """Execute ``plan`` for a call of ``size`` bytes (the executor's size: the input, or the output for allgather;
    default: a small legal size) in ``mode`` (default: the plan's own), ``launches`` calls back to back, and check
    every call's result and (``race_check``) that no two unordered accesses touch the same bytes."""
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    if packet not in PACKET_TYPES:
        raise UsageError(f"unknown packet type {packet!r}; choose LL16 or LL8")
    if launches < 1:
        raise UsageError(f"launches must be >= 1, got {launches}")
    if mode is None:
        mode = "in-place" if plan.inplace else "out-of-place"
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; choose in-place or out-of-place")
    if not plan.gpus:
        raise PlanError(f"{source}: the plan has no GPUs")
    for i, g in enumerate(plan.gpus):
        if g.id != i:
            raise PlanError(f"{source}: gpus[{i}] has id {g.id} (the executor requires id == position)")
    if size is None:
        size = default_size(plan)
    if size < 1:
        raise UsageError(f"size must be >= 1 byte, got {size}")
    if size >= U32:
        raise UsageError(f"size {size}: the executor keeps offsets in 32 bits; interpret calls below 4 GiB")
    ins, outs = buffer_sizes(plan, size)
    itemsize = np.dtype(dtype).itemsize
    for g in plan.gpus:
        why = check_message_size(plan, g, ins, outs)
        if why and "divides by it" not in why and "outside the plan's range" not in why:
            raise UsageError(f"{source}: the executor refuses a call of {size} bytes: {why}")
    if ins % itemsize or outs % itemsize:
        raise UsageError(f"size {size} is not a whole number of {dtype} elements")
    result = RunResult(source, plan.collective, mode, size, ins, outs, dtype, launches, len(plan.gpus),
                       race_checked=race_check)
    for g in plan.gpus:
        why = check_message_size(plan, g, ins, outs)
        if why:
            result.notes.append(f"the executor would refuse this call: {why}")
            break
    m = _Machine(plan, size, mode, dtype, launches, race_check, packet, seed, source, result)
    result.threadblocks = len(m.tbs)
    t0 = time.perf_counter()
    try:
        m.run()
    except _Fault as exc:
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


def _explain(m: _Machine, b: _Tb) -> Stuck:
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


def _where(x: _Tb) -> str:
    if x.done:
        return "has finished"
    if x.pc >= len(x.prog):
        return "is at its end"
    ins = x.prog[x.pc]
    state = f"waits ({x.waiting})" if x.waiting else "is runnable"
    return f"is at {ins.path} ({ins.op.name}) and {state}"


def _leftovers(m: _Machine, result: RunResult) -> None:
    for (gpu, ctype, idx), q in sorted(m.tokens.items()):
        if q:
            end = m.wiring.channels[(gpu, ctype)][idx]
            result.errors.append(f"{len(q)} signal(s) from gpu {end.peer} to gpu {gpu}'s {ctype} channel {idx} were never "
                                 "waited for: the next call's wait on it returns before its data is there")
    for key, v in sorted(m.sem_value.items()):
        if v != m.sem_init[key]:
            result.errors.append(f"gpu {key[0]} semaphore {key[1]} ends at {v}, not its initial {m.sem_init[key]}: the "
                                 "next call starts out of step")


def _check(m: _Machine, result: RunResult, root: int | None) -> None:
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


def _last_writer(m: _Machine, gpu: int, byte: int) -> str:
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
