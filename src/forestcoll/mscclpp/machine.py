"""The interpreter's machine: GPUs, their thread blocks, port-channel proxies and hosts, run to completion.

Core of :mod:`forestcoll.mscclpp.interpreter` (whose docstring states the execution and race model): set-up,
scheduling, the race detector's vector clocks and shadow checks, the host between calls.  Synchronisation
operations are in :mod:`.sync`, data operations in :mod:`.dataops`.
"""

from __future__ import annotations

import math
import time
from collections import deque
from typing import Any

import numpy as np

from forestcoll.mscclpp.clocks import Clock, backend
from forestcoll.mscclpp.dataops import DataOps
from forestcoll.mscclpp.plan import BufRef, Op, Plan, PlanError
from forestcoll.mscclpp.run_result import RunResult
from forestcoll.mscclpp.semantics import (
    BUFFER_NAMES,
    U32,
    Geometry,
    buffer_sizes,
    geometry,
    packet_payload,
    wire,
)
from forestcoll.mscclpp.state import READERS, Alloc, Buffers, Fault, Instr, TbState
from forestcoll.mscclpp.sync import SyncOps
from forestcoll.progress import Progress, report


class Machine(SyncOps, DataOps):
    MAX_RACES = 10

    def __init__(self, plan: Plan, size: int, mode: str, dtype: str, launches: int, race: bool, packet: str,
                 seed: int, source: str, result: RunResult, clocks: str = "shared") -> None:
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
        self.bufs: list[Buffers] = []
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
        self.instrs: list[Instr] = []
        self.tbs: list[TbState] = []
        self.by_gpu: list[list[TbState]] = []
        for pos, g in enumerate(plan.gpus):
            row = []
            for t, tb in enumerate(g.threadblocks):
                prog = self._compile(pos, t, tb.ops)
                b = TbState(pos, t, len(self.tbs), prog)
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
        self.waiters: dict[Any, list[TbState]] = {}
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
        self.knowledge = backend(clocks, self.nagents)  # makes the clocks; freezes what signals, releases and
        # barriers carry
        self.agent_vec: dict[int, tuple[Clock, Clock]] = {}
        self.host_vec: list[tuple[Clock, Clock] | None] = [None] * self.n
        self.start_vec: list[Clock | None] = [None] * self.n  # what a GPU's kernel knows when it starts
        # (operation, tag, writing agent) -> what a packet's writer knew; the agent tells apart the proxies of one
        # port put to several peers (each channel's proxy writes its own peer's packets)
        self.pkt_know: dict[tuple[int, int, int], tuple[Clock, Clock]] = {}
        self.host_clk = [0] * self.n
        self.races: set[tuple] = set()
        self.inputs: list[list[np.ndarray]] = []  # per launch, per gpu: the input written by the host
        self.outputs: list[list[np.ndarray]] = []  # per launch, per gpu: the output read by the host
        self.launch_done: list[int] = [0] * self.n  # calls each GPU finished
        self.ops_executed = 0
        self.moved = 0
        if race:
            zeros = self.knowledge.zeros
            for x in self.tbs:
                x.full = zeros()
                x.ctrl = zeros() if self.two_level else x.full
            for agent in self.port_agent.values():
                f = zeros()
                self.agent_vec[agent] = (f, zeros() if self.two_level else f)
                self.port_state[agent] = {"mark": None, "lanes": set(), "pre": None}

    # -- setup ---------------------------------------------------------------------------------------------

    def _all_instrs_preview(self):
        for g in self.plan.gpus:
            for tb in g.threadblocks:
                for op in tb.ops:
                    yield Instr(0, 0, 0, "", op, op.name)
                    for inner in op.ops or ():
                        yield Instr(0, 0, 0, "", inner, inner.name)

    def _allocs(self, pos: int) -> tuple[int, int]:
        if self.inplace and self.plan.collective == "allgather":
            return self.outs, self.outs
        if self.inplace and self.plan.collective == "reducescatter":
            return self.ins, self.ins
        if self.inplace:
            m = max(self.ins, self.outs)
            return m, m
        return self.ins, self.outs

    def _make_buffers(self, pos: int) -> Buffers:
        geo = self.geo[pos]
        ins, outs = self.ins, self.outs
        scr = Alloc(f"gpu {pos} scratch", geo.scratch_size, self.cell, self.race)
        coll = self.plan.collective
        if not self.inplace:
            a = Alloc(f"gpu {pos} input", ins, self.cell, self.race)
            b = Alloc(f"gpu {pos} output", outs, self.cell, self.race)
            return Buffers({"i": (a, 0, ins), "o": (b, 0, outs), "s": (scr, 0, geo.scratch_size)}, {"i": 0, "o": 0, "s": 0})
        if coll == "allgather":
            b = Alloc(f"gpu {pos} output", outs, self.cell, self.race)
            off = pos * ins
            return Buffers({"i": (b, off, ins), "o": (b, 0, outs), "s": (scr, 0, geo.scratch_size)}, {"i": off, "o": 0, "s": 0})
        if coll == "reducescatter":
            a = Alloc(f"gpu {pos} input", ins, self.cell, self.race)
            off = pos * outs
            return Buffers({"i": (a, 0, ins), "o": (a, off, outs), "s": (scr, 0, geo.scratch_size)}, {"i": 0, "o": off, "s": 0})
        a = Alloc(f"gpu {pos} buffer", max(ins, outs), self.cell, self.race)
        return Buffers({"i": (a, 0, ins), "o": (a, 0, outs), "s": (scr, 0, geo.scratch_size)}, {"i": 0, "o": 0, "s": 0})

    def _compile(self, pos: int, t: int, ops: tuple[Op, ...]) -> list[Instr]:
        prog: list[Instr] = []
        geo = self.geo[pos]
        for i, op in enumerate(ops):
            path = f"ops[{i}]"
            if op.name == "pipeline":
                unit, nchunks = op.iter_context or (0, 0)
                if unit == 0:
                    raise PlanError(f"{self.source}: gpus[{pos}].threadblocks[{t}].{path}: pipeline unit_size 0")
                iters = geo.iterations(unit, nchunks)
                inner = op.ops or ()
                prog.append(Instr(len(self.instrs), pos, t, path, op, "pipe", iters, unit, len(inner)))
                self.instrs.append(prog[-1])
                for j, x in enumerate(inner):
                    prog.append(Instr(len(self.instrs), pos, t, f"{path}.ops[{j}]", x, x.name, inner=True))
                    self.instrs.append(prog[-1])
                prog.append(Instr(len(self.instrs), pos, t, path, op, "endpipe"))
                self.instrs.append(prog[-1])
            else:
                prog.append(Instr(len(self.instrs), pos, t, path, op, op.name))
                self.instrs.append(prog[-1])
        return prog

    # -- references ----------------------------------------------------------------------------------------

    def _fail(self, b: TbState, ins: Instr, what: str) -> Fault:
        return Fault(f"gpu {b.gpu} tb {b.pos} {ins.path} ({ins.op.name}): {what}")

    def _span(self, pos: int, ref: BufRef, btype: str, op: Op) -> tuple[int, int]:
        """(start, bytes) of a reference in buffer ``btype`` as the parser computes it (tbg share applied)."""
        geo = self.geo[pos]
        start = geo.offset(ref.index, scratch=btype == "s")
        nbytes = geo.span(ref.index, ref.size)
        if op.tbg is not None and op.tbg[1] > 0:
            start, nbytes = geo.split(start, nbytes, op.tbg[0], op.tbg[1])
        return start, nbytes

    def _remote_of(self, b: TbState, ins: Instr, ref: BufRef, ctype: str | None) -> tuple[int, str]:
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

    def _switch_of(self, b: TbState, ins: Instr, ref: BufRef) -> tuple[str, tuple[int, ...]]:
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

    def _local(self, b: TbState, ins: Instr, pos: int, btype: str, start: int, nbytes: int) -> tuple[Alloc, int]:
        """Allocation and byte address of ``nbytes`` at ``start`` of GPU ``pos``'s own buffer ``btype``."""
        alloc, base, size = self.bufs[pos].table[btype]
        if start < 0 or start + nbytes > size:
            raise self._fail(b, ins, f"bytes {start}..{start + nbytes - 1} of gpu {pos}'s {BUFFER_NAMES[btype]} buffer, "
                                     f"which has {size} bytes in this call")
        alloc.ensure(base + start + nbytes)
        return alloc, base + start

    def _remote(self, b: TbState, ins: Instr, pos: int, btype: str, addr: int, nbytes: int) -> tuple[Alloc, int]:
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

    def _lane(self, b: TbState, lane: int) -> tuple[Clock, Clock]:
        ext = b.lanes.get(lane)
        if ext is None:
            return b.full, b.ctrl
        return ext

    def _lane_extend(self, b: TbState, lane: int) -> tuple[Clock, Clock]:
        ext = b.lanes.get(lane)
        if ext is None:
            f = b.full.copy()
            ext = (f, b.ctrl.copy() if self.two_level else f)
            b.lanes[lane] = ext
        return ext

    def _merge_into(self, dst: tuple[Clock, Clock], full: Clock | None, ctrl: Clock | None) -> None:
        if full is not None:
            dst[0].join(full)
        if ctrl is not None and self.two_level:
            dst[1].join(ctrl)

    def _sync_threads(self, b: TbState) -> None:
        """``__syncthreads``: every thread learns what any thread knew; a new segment starts."""
        if self.race:
            for f, c in b.lanes.values():
                b.full.join(f)
                if self.two_level:
                    b.ctrl.join(c)
            b.lanes.clear()
            b.full.set(b.agent, b.seg)
            if self.two_level:
                b.ctrl.set(b.agent, b.seg)
        b.seg += 1

    # -- race detection ------------------------------------------------------------------------------------

    def _access(self, alloc: Alloc, lo: int, hi: int, write: bool, agent: int, clk: int, know: tuple[Clock, Clock],
                instr: int, tag: int, packet_read: bool = False) -> list[tuple[int, int]]:
        """Check one access against the last write and recent reads of its bytes, then record it.  Write after
        read needs only the relaxed (control) order; a read or write after a write needs release / acquire order,
        and one ordered only through relaxed signals is reported apart.  A packet read skips the write check (its
        flags order it) and returns the (operation, tag, agent) keys of the packets' writers."""
        if hi <= lo:
            return []
        c0, c1 = lo // alloc.cell, -(-hi // alloc.cell)
        full, ctrl = know
        writers: list[tuple[int, int, int]] = []
        wa = alloc.w_agent[c0:c1]
        seen = wa >= 0
        if packet_read:
            if seen.any():
                keys = np.stack([alloc.w_instr[c0:c1][seen], alloc.w_tag[c0:c1][seen], wa[seen]], axis=1)
                writers = [(int(a), int(t), int(w)) for a, t, w in np.unique(keys, axis=0)]
        elif seen.any():
            safe = np.where(seen, wa, 0)
            same = (wa == agent) & (alloc.w_instr[c0:c1] == instr) & (alloc.w_tag[c0:c1] == tag)
            strong = (full.gather(safe) >= alloc.w_clk[c0:c1]) | same
            bad = seen & ~strong
            if bad.any():
                weak = bad & (ctrl.gather(safe) >= alloc.w_clk[c0:c1]) if self.two_level else np.zeros_like(bad)
                hard = bad & ~weak
                j = int(np.argmax(hard if hard.any() else bad))
                self._race(alloc, (c0 + j) * alloc.cell, write, instr, tag, True, int(alloc.w_instr[c0 + j]),
                           int(alloc.w_tag[c0 + j]), int(wa[j]), relaxed=not bool(hard.any()))
        if write:
            ra = alloc.r_agent[c0:c1]
            seen = ra >= 0
            if seen.any():
                safe = np.where(seen, ra, 0)
                ordered = (ctrl.gather(safe) >= alloc.r_clk[c0:c1]) | ((ra == agent) & (alloc.r_instr[c0:c1] == instr)
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
            alloc.r_next[c0:c1] = (slot + 1) % READERS
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

    def _race(self, alloc: Alloc, byte: int, write: bool, instr: int, tag: int, other_write: bool, oinstr: int,
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

    def run(self, progress: Progress | None = None, stage: str = "running the plan") -> None:
        """Run every thread block to its end (or until all wait); ``progress`` hears the blocks done (every 0.1 s)."""
        for pos in range(self.n):
            self._host(pos, first=True)
        ready: deque[TbState] = deque(self.tbs)
        next_report = 0.0
        while ready:
            b = ready.popleft()
            if b.done or b.waiting:
                continue
            self._step(b, ready)
            if progress is not None and (now := time.monotonic()) >= next_report:
                next_report = now + 0.1
                report(progress, stage, sum(1 for t in self.tbs if t.done), len(self.tbs))
        report(progress, stage, sum(1 for t in self.tbs if t.done), len(self.tbs))

    def _wait(self, b: TbState, key: Any, why: str) -> None:
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

    def _step(self, b: TbState, ready: deque) -> None:
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

    def _finish(self, b: TbState, ready: deque) -> None:
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
                        x.full.join(hf)
                        if self.two_level:
                            x.ctrl.join(hc)
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
                f = self.knowledge.zeros()
                know = (f, self.knowledge.zeros() if self.two_level else f)
                self.host_vec[pos] = know
            for x in self.by_gpu[pos]:
                self._merge_into(know, x.full, x.ctrl)
                for lf, lc in x.lanes.values():
                    self._merge_into(know, lf, lc)
            self.host_clk[pos] += 1
            know[0].set(agent, self.host_clk[pos])
            if self.two_level:
                know[1].set(agent, self.host_clk[pos])
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
            self.start_vec[pos] = self.knowledge.freeze(self.host_vec[pos][0])
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
                self.start_vec[pos] = self.knowledge.freeze(self.host_vec[pos][0])
            if first and self.race:
                for x in self.by_gpu[pos]:
                    hf, hc = self.host_vec[pos]
                    x.full.join(hf)
                    if self.two_level:
                        x.ctrl.join(hc)

    # -- one operation -------------------------------------------------------------------------------------

    def _frame(self, b: TbState, ins: Instr) -> tuple[int, int | None, int | None]:
        """(offset, unit size, iteration) of a pipeline's inner operation; (0, None, None) outside pipelines."""
        if ins.inner and b.frames:
            fr = b.frames[-1]
            return (fr[2] * fr[4]) % U32, fr[4], fr[2]
        return 0, None, None

    def _tag(self, b: TbState, it: int | None) -> int:
        return (b.launch << 16) | (it or 0)

    def _exec(self, b: TbState, ins: Instr, ready: deque) -> bool:
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
