"""Run an MSCCL algorithm the way the runtime's kernel does, on numpy buffers, and check the result.

Execution model (msccl-executor-nccl ``msccl_parser.cc`` / ``msccl_kernel.cu``):

* The parser turns each ``<tb>`` into *transmissions*: ``nop`` steps vanish,
  their dependencies move onto the next real step (which must carry its own);
  consecutive ``re`` steps into the same destination with no dependency of
  their own fuse into one (up to 16 sources).  That rewriting and the size
  regimes are :mod:`forestcoll.msccl.semantics`, shared with the simulator.
* Every thread block replays its transmissions once per pipeline iteration;
  iteration ``j`` moves slice ``j`` of every chunk.
* Before a transmission the block waits until each thread block it depends on
  has published a flag ``>= (j, deps)``.  Flags are ``(iteration, step)``
  pairs compared lexicographically; a block publishes one after each
  transmission with ``hasdep=1``, where ``step`` is the kernel's step counter
  (XML ``s`` numbering, provided every ``nop`` carries a dependency).
* Each (sender, receiver, channel) connection is a FIFO matched in order.  A
  step of ``cnt`` chunks is ``cnt`` primitive calls of one chunk slice each
  (the large-message regime, ``maxAllowedCount = 1``); a connection buffers
  ``slots`` calls (NCCL_STEPS / chunkSteps: 2 for Simple, 8 for LL and LL128),
  and a sender blocks while it is full.  Fewer slots never hides a deadlock
  that more slots would show, so ``slots=1`` is the strictest check.

The data are small integers (exact in every dtype), outputs and scratch start
as NaN (or a sentinel for integer types), and the result is compared with the
collective computed directly: concatenation for allgather, the reduction for
allreduce, and so on (:mod:`forestcoll.msccl.interp_buffers`).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict, deque
from typing import Any

import numpy as np

from forestcoll.errors import UsageError
from forestcoll.limits import MAX_ITERATIONS, MAX_MSCCL_ELEMENTS, MAX_SEED
from forestcoll.msccl.interp_buffers import OPS, Memory, allocate, check_outputs
from forestcoll.msccl.ir import READS, RECVS, SENDS, WRITES, Algo, MscclError, ThreadBlock, read_algo
from forestcoll.msccl.race_one import SCALAR, access_one, clock_dtype
from forestcoll.msccl.run_result import RunReport, RunResult, Stuck
from forestcoll.msccl.semantics import (
    DEFAULT_SLOTS,
    Transmission,
    buffer_sizes,
    by_rank,
    compile_tb,
    default_bytes,
    regime,
    size_multiplier,
)
from forestcoll.progress import Progress, report

__all__ = ["DTYPES", "MODES", "OPS", "run_algo", "run_file", "run_modes"]

DTYPES = ("float16", "float32", "float64", "int8", "int32", "int64")
MODES = ("in-place", "out-of-place")


# ----- the run ---------------------------------------------------------------------------------


class _Block:
    __slots__ = ("rank", "bid", "gid", "send", "recv", "chan", "trans", "idx", "unit", "iter", "deps_ok", "done",
                 "waiting", "vc", "snap", "merged")

    def __init__(self, rank: int, gid: int, tb: ThreadBlock, trans: list[Transmission], iterations: int) -> None:
        self.rank, self.bid, self.gid, self.send, self.recv, self.chan = rank, tb.id, gid, tb.send, tb.recv, tb.chan
        self.trans = trans
        self.idx = 0
        self.unit = 0
        self.iter = 0
        self.deps_ok = False
        self.done = not trans or iterations == 0
        self.waiting: tuple = ()
        self.vc: np.ndarray | None = None  # vector clock (race detection)
        self.snap: np.ndarray | None = None  # copy of vc shared by messages and flags until vc changes
        self.merged: dict[int, np.ndarray] = {}  # the last snapshot merged from each source


def _describe_block(b: _Block) -> str:
    if b.done:
        return "finished"
    t = b.trans[b.idx]
    return f"at step {t.s} ({t.type}) of iteration {b.iter}"


class _OutOfRange(Exception):
    pass


class _Shadow:
    """Who last wrote, and who read since, every chunk slice of one memory (for race detection)."""

    READERS = 16  # the latest readers kept per chunk slice

    def __init__(self, rows: int, iterations: int) -> None:
        self.w_gid = np.full((rows, iterations), -1, dtype=np.int32)
        self.w_clk = np.zeros((rows, iterations), dtype=np.int32)
        self.w_step = np.zeros((rows, iterations), dtype=np.int32)  # index of the writer's transmission
        self.r_gid = np.full((rows, iterations, self.READERS), -1, dtype=np.int32)
        self.r_clk = np.zeros((rows, iterations, self.READERS), dtype=np.int32)
        self.r_step = np.zeros((rows, iterations, self.READERS), dtype=np.int32)
        self.r_next = np.zeros((rows, iterations), dtype=np.int32)


class _Machine:
    """The state of one run: thread blocks, connections, flags, and (optionally) the race detector.

    Race detection is happens-before with vector clocks: program order inside
    a block, message send -> receive, and flag publish -> the wait it
    satisfies.  Two accesses to one chunk slice of a GPU's memory, one of them
    a write, that no chain of those orders are a data race: the runtime may run
    them either way round.  (A full connection also orders a receive before the
    send that reuses its slot, but that order depends on the buffer size, so
    it does not count.)
    """

    MAX_RACES = 10

    def __init__(self, algo: Algo, mem: Memory, cols: list[slice], op: str, slots: int, max_count: int,
                 race_check: bool, source: str, mode: str, result: RunResult) -> None:
        self.algo, self.mem, self.cols, self.reduce_fn = algo, mem, cols, OPS[op]
        self.slots, self.max_count, self.race_check = slots, max_count, race_check
        self.source, self.mode, self.result = source, mode, result
        g = algo.ngpus
        self.blocks: list[_Block] = []
        self.by_rank: list[dict[int, _Block]] = []
        self.sender: dict[tuple[int, int, int], _Block] = {}
        self.receiver: dict[tuple[int, int, int], _Block] = {}
        for r, gpu in enumerate(algo.gpus):
            table: dict[int, _Block] = {}
            for tb in gpu.tbs:
                if tb.id in table:
                    raise MscclError(f"{source}:{tb.line}: gpu {r} has two thread blocks with id {tb.id}")
                b = _Block(r, len(self.blocks), tb, compile_tb(tb, r, source), len(cols))
                table[tb.id] = b
                self.blocks.append(b)
                for peer, side, kind in ((tb.send, self.sender, "send"), (tb.recv, self.receiver, "recv")):
                    if peer < 0:
                        continue
                    if not 0 <= peer < g or peer == r:
                        raise MscclError(f"{source}:{tb.line}: gpu {r} tb {tb.id}: {kind} peer {peer} is not another gpu")
                    key = (r, peer, tb.chan) if kind == "send" else (peer, r, tb.chan)
                    if key in side:
                        raise MscclError(f"{source}:{tb.line}: gpu {r} tbs {side[key].bid} and {tb.id} both {kind} "
                                         f"{'to' if kind == 'send' else 'from'} gpu {peer} on channel {tb.chan}")
                    side[key] = b
            self.by_rank.append(table)
        for b in self.blocks:
            for t in b.trans:
                for d, _s in t.deps:
                    if d not in self.by_rank[b.rank]:
                        raise MscclError(f"{source}:{t.line}: gpu {b.rank} tb {b.bid} step {t.s} depends on tb {d}, "
                                         "which does not exist")
        conns = set(self.sender) | set(self.receiver)
        self.fifo: dict[tuple[int, int, int], deque] = {key: deque() for key in conns}
        self.flags: dict[tuple[int, int], tuple[tuple[int, int], np.ndarray | None]] = {}
        self.waiters: dict[tuple, list[_Block]] = {}
        self.mismatched: set[tuple[int, int, int]] = set()
        self.races: set[tuple] = set()
        self.shadow: dict[tuple[int, str], _Shadow] = {}
        if race_check:
            clock = clock_dtype(max((len(b.trans) for b in self.blocks), default=0) * len(cols))
            for b in self.blocks:
                b.vc = np.zeros(len(self.blocks), dtype=clock)
            for r, bufs in enumerate(mem.bufs):
                rows: dict[str, int] = defaultdict(int)
                for name, arr in bufs.items():
                    memname, base = mem.alias[r][name]
                    rows[memname] = max(rows[memname], base + arr.shape[0])
                for memname, size in rows.items():
                    self.shadow[(r, memname)] = _Shadow(max(size, 1), len(cols))
        self.transmissions = self.calls = self.moved = 0

    # -- synchronisation ---------------------------------------------------------------------

    def _wait(self, b: _Block, key: tuple) -> None:
        b.waiting = key
        self.waiters.setdefault(key, []).append(b)

    def _wake(self, key: tuple, ready: deque) -> None:
        woken = self.waiters.pop(key, None)
        if woken:
            for w in woken:
                w.waiting = ()
                ready.append(w)

    @staticmethod
    def _snapshot(b: _Block) -> np.ndarray | None:
        if b.vc is None:
            return None
        if b.snap is None:
            b.snap = b.vc.copy()
        return b.snap

    @staticmethod
    def _merge(b: _Block, other: np.ndarray | None, source: int) -> None:
        if other is None or b.merged.get(source) is other:
            return
        np.maximum(b.vc, other, out=b.vc)
        b.merged[source] = other
        b.snap = None

    # -- memory ------------------------------------------------------------------------------

    def _bounds(self, b: _Block, t: Transmission) -> None:
        """Every chunk the transmission touches lies inside its buffer."""
        bufs = self.mem.bufs[b.rank]
        ranges = []
        if t.type in READS:
            ranges += [(t.srcbuf, off) for off in t.srcoffs]
        if t.type in WRITES:
            ranges.append((t.dstbuf, t.dstoff))
        for name, lo in ranges:
            arr = bufs.get(name)
            if arr is None:
                raise _OutOfRange(f"gpu {b.rank} tb {b.bid} step {t.s} (line {t.line}): unknown buffer {name!r}")
            if lo < 0 or lo + t.cnt > arr.shape[0]:
                raise _OutOfRange(f"gpu {b.rank} tb {b.bid} step {t.s} (line {t.line}): chunks {lo}..{lo + t.cnt - 1} "
                                  f"are outside buffer {name}, which holds {arr.shape[0]} chunk(s) in this {self.mode} run")

    def _record(self, b: _Block, t: Transmission) -> None:
        """Check the transmission's accesses against earlier unordered ones, then remember them."""
        if t.type in READS:
            for off in t.srcoffs:
                self._access(b, t, t.srcbuf, off, False)
        if t.type in WRITES:
            self._access(b, t, t.dstbuf, t.dstoff, True)

    def _access(self, b: _Block, t: Transmission, name: str, lo: int, write: bool) -> None:
        if t.cnt == 1 and SCALAR:  # one chunk: the same checks with scalars (msccl/race_one.py)
            return access_one(self, b, t, name, lo, write, _Shadow.READERS)
        memname, base = self.mem.alias[b.rank][name]
        sh = self.shadow[(b.rank, memname)]
        rows = slice(base + lo, base + lo + t.cnt)
        it, vc, me = b.iter, b.vc, b.gid
        assert vc is not None
        clk = vc[me]
        w_gid = sh.w_gid[rows, it]
        seen = w_gid >= 0
        bad = seen & (w_gid != me) & (vc[np.where(seen, w_gid, 0)] < sh.w_clk[rows, it])
        if bad.any():
            j = int(np.argmax(bad))
            self._race(b, t, name, lo + j, int(w_gid[j]), int(sh.w_step[base + lo + j, it]), write, True)
        if write:
            r_gid = sh.r_gid[rows, it]
            seen = r_gid >= 0
            bad = seen & (r_gid != me) & (vc[np.where(seen, r_gid, 0)] < sh.r_clk[rows, it])
            if bad.any():
                j, slot = (int(x) for x in np.argwhere(bad)[0])
                self._race(b, t, name, lo + j, int(r_gid[j, slot]), int(sh.r_step[base + lo + j, it, slot]), True, False)
            sh.w_gid[rows, it] = me
            sh.w_clk[rows, it] = clk
            sh.w_step[rows, it] = b.idx
            sh.r_gid[rows, it] = -1
            sh.r_next[rows, it] = 0
        else:
            slot = sh.r_next[rows, it]
            idx = np.arange(rows.start, rows.stop)
            sh.r_gid[idx, it, slot] = me
            sh.r_clk[idx, it, slot] = clk
            sh.r_step[idx, it, slot] = b.idx
            sh.r_next[rows, it] = (slot + 1) % _Shadow.READERS

    def _race(self, b: _Block, t: Transmission, name: str, row: int, other_gid: int, other_idx: int,
              write: bool, other_write: bool) -> None:
        ob = self.blocks[other_gid]
        ot = ob.trans[other_idx]
        key = (b.rank, name, t.s, ob.bid, ot.s)
        if key in self.races or len(self.races) >= self.MAX_RACES:
            return
        self.races.add(key)
        self.result.errors.append(
            f"data race on gpu {b.rank}, buffer {name} chunk {row} (iteration {b.iter}): tb {b.bid} step {t.s} "
            f"({t.type}, line {t.line}) {'writes' if write else 'reads'} it and tb {ob.bid} step {ot.s} "
            f"({ot.type}, line {ot.line}) {'writes' if other_write else 'reads'} it, with no dependency ordering the two")

    # -- execution ---------------------------------------------------------------------------

    def _report(self, progress: Progress, stage: str) -> None:
        """Steps executed so far (every block's step index, counted over the iterations) out of all of them."""
        iterations = len(self.cols)
        total = sum(len(b.trans) for b in self.blocks) * iterations
        done = sum(len(b.trans) * iterations if b.done else b.iter * len(b.trans) + b.idx for b in self.blocks)
        report(progress, stage, min(done, total), total)

    def run(self, progress: Progress | None = None, stage: str = "running") -> None:
        ready: deque[_Block] = deque(b for b in self.blocks if not b.done)
        iterations = len(self.cols)
        reduce_fn = self.reduce_fn
        flags, race = self.flags, self.race_check
        tick, next_report = 0, 0.0
        while ready:
            if progress is not None:
                tick += 1
                if not tick & 255 and (clock := time.monotonic()) >= next_report:
                    next_report = clock + 0.1
                    self._report(progress, stage)
            b = ready.popleft()
            if b.done or b.waiting:
                continue
            bufs = self.mem.bufs[b.rank]
            while True:
                t = b.trans[b.idx]
                if not b.deps_ok:
                    blocked = False
                    for d, s in t.deps:
                        got = flags.get((b.rank, d))
                        if got is None or got[0] < (b.iter, s):
                            self._wait(b, ("flag", b.rank, d))
                            blocked = True
                            break
                    if blocked:
                        break
                    self._bounds(b, t)
                    if race:
                        for d, _s in t.deps:
                            self._merge(b, flags[(b.rank, d)][1], -1 - d)
                        b.vc[b.gid] += 1
                        b.snap = None
                    b.deps_ok = True
                col = self.cols[b.iter]
                kind = t.type
                if kind in ("cpy", "re"):
                    srcs = [bufs[t.srcbuf][off:off + t.cnt, col] for off in t.srcoffs]
                    dst = bufs[t.dstbuf]
                    rows = slice(t.dstoff, t.dstoff + t.cnt)
                    if kind == "cpy":
                        dst[rows, col] = srcs[0]
                    else:
                        acc = dst[rows, col].copy()
                        for x in srcs:
                            acc = reduce_fn(x, acc)
                        dst[rows, col] = acc
                    self.moved += t.cnt * (col.stop - col.start) * len(srcs)
                elif not self._transfer(b, t, kind, col, bufs, ready):
                    break
                # the transmission is complete
                if race:
                    self._record(b, t)
                self.transmissions += 1
                if t.hasdep:
                    flags[(b.rank, b.bid)] = ((b.iter, t.step), self._snapshot(b))
                    self._wake(("flag", b.rank, b.bid), ready)
                b.unit = 0
                b.deps_ok = False
                b.idx += 1
                if b.idx == len(b.trans):
                    b.idx = 0
                    b.iter += 1
                    if b.iter == iterations:
                        b.done = True
                        break

    def _transfer(self, b: _Block, t: Transmission, kind: str, col: slice, bufs: dict[str, np.ndarray],
                  ready: deque) -> bool:
        """Move the calls of a send / receive transmission; False when the block must wait."""
        fifo, slots, max_count = self.fifo, self.slots, self.max_count
        out_key = (b.rank, b.send, b.chan) if kind in SENDS else None
        in_key = (b.recv, b.rank, b.chan) if kind in RECVS else None
        out_q = fifo[out_key] if out_key is not None else None
        in_q = fifo[in_key] if in_key is not None else None
        race = self.race_check
        while b.unit < t.cnt:
            if in_q is not None and not in_q:
                self._wait(b, ("data", in_key))
                return False
            if out_q is not None and len(out_q) >= slots:
                self._wait(b, ("space", out_key))
                return False
            u = b.unit
            size = min(max_count, t.cnt - u)
            if in_q is not None:
                data, scnt, sender_gid, sender_s, clock = in_q.popleft()
                if race:
                    self._merge(b, clock, sender_gid)
                self._wake(("space", in_key), ready)
                if scnt != t.cnt and in_key not in self.mismatched:
                    self.mismatched.add(in_key)
                    sb = self.blocks[sender_gid]
                    self.result.errors.append(
                        f"connection gpu {sb.rank} -> gpu {b.rank} channel {b.chan}: tb {sb.bid} step {sender_s} on gpu "
                        f"{sb.rank} sends cnt {scnt} but tb {b.bid} step {t.s} (line {t.line}) receives cnt {t.cnt}")
                if data.shape[0] != size:
                    data = np.resize(data, (size, data.shape[1]))
                if kind in ("rrs", "rrc", "rrcs"):
                    lo = t.srcoffs[0] + u
                    data = self.reduce_fn(data, bufs[t.srcbuf][lo:lo + size, col])
                if kind in ("r", "rcs", "rrc", "rrcs"):
                    lo = t.dstoff + u
                    bufs[t.dstbuf][lo:lo + size, col] = data
            else:  # plain send
                lo = t.srcoffs[0] + u
                data = bufs[t.srcbuf][lo:lo + size, col].copy()
            if out_q is not None:
                out_q.append((data, t.cnt, b.gid, t.s, self._snapshot(b)))
                self._wake(("data", out_key), ready)
                self.moved += data.size
            self.calls += 1
            b.unit += size
        return True


def run_algo(
    algo: Algo,
    *,
    source: str = "algo.xml",
    mode: str | None = None,
    count: int | None = None,
    dtype: str = "float32",
    op: str = "sum",
    iterations: int = 2,
    slots: int | None = None,
    nbytes: int | None | str = "auto",
    max_count: int | None = None,
    root: int | None = None,
    race_check: bool = True,
    seed: int = 0,
    progress: Progress | None = None,
) -> RunResult:
    """Execute ``algo`` once (one buffer ``mode``) and check the collective's postcondition.

    ``count`` is the element count of the API call (per rank, as in NCCL); it
    must make ``count x sizeMultiplier / nchunksperloop`` a whole number of
    elements per chunk, as the runtime requires.  The default gives every chunk
    two elements per iteration.  ``nbytes`` picks the size regime the runtime
    would be in ("auto": the file's maxBytes, or unbounded when 0; None:
    unbounded), which fixes chunks per primitive call and the pipeline
    iterations (at most ``iterations``); ``max_count`` overrides the former.
    ``race_check`` reports accesses to one chunk that no dependency orders.
    """
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    if op not in OPS:
        raise UsageError(f"unknown reduction op {op!r}; choose from {', '.join(OPS)}")
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise UsageError(f"iterations must be in 1..{MAX_ITERATIONS}, got {iterations}")
    if slots is None:
        slots = DEFAULT_SLOTS.get(algo.proto, 2)
    if slots < 1:
        raise UsageError(f"slots must be >= 1, got {slots}")
    if isinstance(nbytes, int) and nbytes < 1:
        raise UsageError(f"bytes must be >= 1, got {nbytes}")
    reg = regime(algo, default_bytes(algo) if nbytes == "auto" else nbytes, iterations)  # type: ignore[arg-type]
    iterations = reg.iterations
    if max_count is None:
        max_count = reg.max_count
    if max_count < 1:
        raise UsageError(f"max_count must be >= 1, got {max_count}")
    if mode is None:
        mode = "out-of-place" if algo.outofplace else "in-place"
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r}; choose in-place or out-of-place")
    algo = by_rank(algo, source)
    g, n = algo.ngpus, algo.nchunksperloop
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(f"seed must be in 0..{MAX_SEED}, got {seed}")
    if root is not None and algo.coll not in ("broadcast", "reduce"):
        raise UsageError(f"--root is for broadcast and reduce files; {source} is {algo.coll}")
    if root is not None and not 0 <= root < g:
        raise UsageError(f"root {root} is not a gpu of this {g}-gpu algorithm")
    if algo.coll in ("allgather", "reducescatter", "alltoall") and n % g:
        raise MscclError(f"{source}: nchunksperloop={n} is not a multiple of ngpus={g}, which {algo.coll} needs")
    mult = size_multiplier(algo.coll, algo.ngpus)
    if count is None:
        step = n // math.gcd(n, mult)  # the smallest count the runtime accepts
        count = step * -(-2 * iterations // (step * mult // n))
    if count < 1 or (count * mult) % n:
        raise UsageError(f"count {count} does not split into {n} equal chunks (count x {mult} must be a multiple of "
                         f"nchunksperloop={n}); the runtime would not use this algorithm")
    chunk = count * mult // n
    n_in, n_out = buffer_sizes(algo)
    elements = sum(n_in + n_out + gpu.s_chunks for gpu in algo.gpus) * chunk * (2 if race_check else 1)
    if elements > MAX_MSCCL_ELEMENTS:
        raise UsageError(f"{source}: running it needs {elements:,} elements ({g} gpus x (input + output + scratch "
                         f"chunks) x {chunk} per chunk), above forestcoll's limit of {MAX_MSCCL_ELEMENTS:,}; "
                         "pass a smaller --count (see docs/limits.md)")
    iterations = min(iterations, chunk)
    result = RunResult(source, algo.coll, mode, g, count, chunk, dtype, op, iterations, slots,
                       nbytes=reg.nbytes, max_count=max_count, race_checked=race_check)
    mem = allocate(algo, mode, chunk, dtype, op, seed)
    bounds = np.linspace(0, chunk, iterations + 1).round().astype(int)
    cols = [slice(int(bounds[j]), int(bounds[j + 1])) for j in range(iterations)]
    machine = _Machine(algo, mem, cols, op, slots, max_count, race_check, source, mode, result)
    t0 = time.perf_counter()
    try:
        machine.run(progress, f"running {mode or 'the file'} in the interpreter")
    except _OutOfRange as exc:
        result.errors.append(str(exc))
        result.seconds = time.perf_counter() - t0
        return result
    result.seconds = time.perf_counter() - t0
    result.transmissions, result.calls, result.elements_moved = machine.transmissions, machine.calls, machine.moved
    stuck = [b for b in machine.blocks if not b.done]
    if stuck:
        result.stuck = [_explain(b, machine) for b in stuck]
        return result
    for key, q in sorted(machine.fifo.items()):
        if q:
            result.errors.append(f"{len(q)} call(s) sent from gpu {key[0]} to gpu {key[1]} on channel {key[2]} were never received")
    check_outputs(algo, mem, mode, op, root, result)
    return result


def _explain(b: _Block, m: _Machine) -> Stuck:
    by_rank, sender, receiver, fifo, flags, slots = m.by_rank, m.sender, m.receiver, m.fifo, m.flags, m.slots
    t = b.trans[b.idx]
    kind = b.waiting[0] if b.waiting else ""
    if kind == "flag":
        d = b.waiting[2]
        need = next(s for dd, s in t.deps if dd == d and (flags.get((b.rank, dd)) is None or flags[(b.rank, dd)][0] < (b.iter, s)))
        target = by_rank[b.rank][d]
        got = flags[(b.rank, d)][0] if (b.rank, d) in flags else None
        have = "nothing yet" if got is None else f"(iteration {got[0]}, step {got[1]})"
        reason = (f"waits for tb {d} to reach step {need} of iteration {b.iter}; tb {d} has published {have} "
                  f"and is {_describe_block(target)}")
    elif kind == "data":
        key = b.waiting[1]
        other = sender.get(key)
        peer = f"gpu {key[0]}"
        who = f"{peer} tb {other.bid} is {_describe_block(other)}" if other else f"{peer} has no tb sending here on channel {key[2]}"
        reason = f"waits to receive from {peer} on channel {key[2]}; {who}"
    elif kind == "space":
        key = b.waiting[1]
        other = receiver.get(key)
        peer = f"gpu {key[1]}"
        who = f"{peer} tb {other.bid} is {_describe_block(other)}" if other else f"{peer} has no tb receiving on channel {key[2]}"
        reason = f"waits to send to {peer} on channel {key[2]} (connection full: {len(fifo[key])} of {slots} slot(s)); {who}"
    else:
        reason = "not scheduled"
    return Stuck(b.rank, b.bid, b.iter, t.s, t.line, t.type, reason)


def run_modes(algo: Algo, mode: str | None = None, **kwargs: Any) -> list[RunResult]:
    """Run every buffer mode the file declares (or just ``mode``)."""
    if mode is not None:
        declared = {"in-place": algo.inplace, "out-of-place": algo.outofplace}
        if mode not in declared:
            raise UsageError(f"unknown mode {mode!r}; choose in-place or out-of-place")
        if not declared[mode]:
            source = kwargs.get("source", "the file")
            other = [m for m, on in declared.items() if on]
            raise UsageError(f"{source} does not declare {mode} calls ({mode.replace('-', '')}=0; it declares "
                             f"{', '.join(other) or 'no mode'}), so the runtime never runs it {mode}")
        return [run_algo(algo, mode=mode, **kwargs)]
    modes = [m for m, on in (("in-place", algo.inplace), ("out-of-place", algo.outofplace)) if on] or ["out-of-place"]
    return [run_algo(algo, mode=m, **kwargs) for m in modes]


def run_file(path: str, mode: str | None = None, **kwargs: Any) -> RunReport:
    """Read an MSCCL file and run it in every mode it declares (or just ``mode``), as ``forestcoll msccl run``."""
    algo, _text = read_algo(path)
    return RunReport(path, algo, run_modes(algo, mode, source=path, **kwargs))

