"""forestcoll schedules on torch.distributed: point-to-point messages over a process group.

Rank i of the group runs compute node i of the schedule (or ``rank_map[i]``...
see :class:`Communicator`).  A call builds (once per collective, element count
and dtype) the rank's :class:`forestcoll.runtime.Plan`, then runs it:

* ``mode="async"`` (default): each round's message is cut into its in-tree and
  out-tree *streams* (tags 0 and 1; :func:`forestcoll.runtime.plan.async_ops`).
  Receives are posted in round order, a batch at a time between handling what
  has arrived (gloo moves a message only once its receive is posted), into one
  buffer kept between calls; a send leaves as soon as the receives it forwards
  have been applied (and the earlier sends of its stream to that peer have
  left), at most one round beyond the receives posted so far, and a received
  message is applied as soon as the earlier writes and reads of its ranges are
  done (dependency counters, no rescans).  Each tree's pieces thus flow down the tree without waiting for the rest
  of the machine, and reduce-scatter data never waits for allgather data merged
  into the same round.  gloo completes a receive only in a blocking wait, so a
  helper thread per (peer, stream) waits on its receives in order and the main
  thread takes whichever is in first (``threads=False``, and NCCL, whose wait does
  not block the host: the main thread waits on its earliest receive).  No
  deadlock: a rank waits on a receive of round r only while everything it needs
  is from rounds < r, so a cycle of waits would need rounds that decrease around
  it.  The result is the synchronous rounds' bit for bit.
* ``mode="rounds"``: per round one ``batch_isend_irecv`` with one message per
  peer, a wait, and the copies or reductions of what arrived.

Works with any backend that has point-to-point operations (gloo on CPU, NCCL
on GPUs).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from forestcoll.alltoall.schedule import AlltoallSchedule
from forestcoll.errors import ForestCollError, ScheduleError, UsageError
from forestcoll.runtime.plan import Op, Plan, async_ops, build_plans, phase_schedule
from forestcoll.schedule import Schedule, read_schedule

__all__ = ["DTYPES", "OPS", "CollectiveError", "Communicator", "communicator", "load"]

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
OPS = ("sum", "avg", "product", "max", "min")
MODES = ("async", "rounds")
_TORCH_OPS = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "product", dist.ReduceOp.MAX: "max",
              dist.ReduceOp.MIN: "min", dist.ReduceOp.AVG: "avg"}


class CollectiveError(ForestCollError, RuntimeError):
    """A collective failed at run time: a peer died, timed out or made a different call."""


def _combine(op: str) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """``dst <- dst op src`` in place."""
    if op in ("sum", "avg"):
        return lambda d, s: d.add_(s)
    if op == "product":
        return lambda d, s: d.mul_(s)
    if op == "max":
        return lambda d, s: torch.maximum(d, s, out=d)
    return lambda d, s: torch.minimum(d, s, out=d)


def _op_name(op: object) -> str:
    if isinstance(op, str) and op.lower() in OPS:
        return op.lower()
    if op in _TORCH_OPS:
        return _TORCH_OPS[op]
    raise UsageError(f"unsupported reduction {op!r}; use one of {', '.join(OPS)} (or torch.distributed.ReduceOp)")


def load(schedule: str | os.PathLike | Schedule | AlltoallSchedule) -> Schedule | AlltoallSchedule:
    """A schedule object from a path or an already loaded schedule (tree or all-to-all)."""
    if isinstance(schedule, (Schedule, AlltoallSchedule)):
        return schedule
    if isinstance(schedule, (str, os.PathLike)):
        return read_schedule(os.fspath(schedule))
    raise UsageError(f"schedule must be a path or a forestcoll Schedule, not {type(schedule).__name__}")


@dataclass
class Communicator:
    """Runs one schedule's collectives on a process group, caching plans per (collective, numel, dtype).

    ``rank_map[i]`` is the group rank that runs compute node i of the schedule (default: i).
    ``timeout`` bounds every wait (default: the group's own timeout).  ``check``: on the first
    call of each kind, the ranks compare a fingerprint of (schedule, rank map, call) with one small
    all-gather, so a mismatch is an error instead of a hang.  ``slice_bytes`` / ``max_slices``: the
    pipeline slicing, by default the simulator's (1 MiB, no cap), so a call runs the plan the simulator predicts.  ``mode``: ``"async"`` (per-message dependencies, the default)
    or ``"rounds"`` (global rounds); see the module docstring.  ``threads``: async receives waited by helper threads
    (first in, first handled) where the backend's wait blocks the host (gloo); False: in order.  ``trace``: a list that async runs append
    ``(time.perf_counter(), event, op index)`` to (events ``"start"``, ``"send"`` issued, ``"wait"`` blocking
    on op, ``"sent"`` / ``"recv"`` seen complete, ``"apply"``, ``"end"``; op indices into
    :meth:`async_plan_ops`), for measuring where the time goes; None (default) records nothing."""

    schedule: Schedule
    group: dist.ProcessGroup | None = None
    rank_map: Sequence[int] | None = None
    timeout: datetime.timedelta | float | None = None
    slice_bytes: int = 1 << 20
    max_slices: int | None = None
    check: bool = True
    mode: str = "async"
    threads: bool = True
    trace: list | None = None
    _plans: dict = field(default_factory=dict, init=False, repr=False)
    _async_ops: dict = field(default_factory=dict, init=False, repr=False)  # id(plan) -> its _AsyncSchedule
    _peers: list[int] = field(default_factory=list, init=False, repr=False)
    _waiters: dict = field(default_factory=dict, init=False, repr=False)  # (peer, stream) -> its _Waiter
    _arenas: dict = field(default_factory=dict, init=False, repr=False)  # (dtype, device) -> receive buffer

    def __post_init__(self) -> None:
        self.schedule = load(self.schedule)
        if not dist.is_available() or not dist.is_initialized():
            raise UsageError("torch.distributed is not initialised: call torch.distributed.init_process_group first")
        n = len(self.schedule.ranks)
        world = dist.get_world_size(self.group)
        if world != n:
            raise ScheduleError(f"the process group has {world} ranks but the schedule has {n} "
                                f"({self.schedule.topology}); rank i of the group runs compute node i")
        mapping = list(range(n)) if self.rank_map is None else [int(x) for x in self.rank_map]
        if sorted(mapping) != list(range(n)):
            raise UsageError(f"rank_map must list each group rank 0..{n - 1} once (compute node i runs on "
                             f"group rank rank_map[i]), got {list(self.rank_map or [])}")
        self.rank_map = mapping
        node_of = {g: i for i, g in enumerate(mapping)}
        self.node = node_of[dist.get_rank(self.group)]
        self._peers = [self._global(mapping[i]) for i in range(n)]
        if isinstance(self.timeout, (int, float)):
            self.timeout = datetime.timedelta(seconds=self.timeout)
        if self.mode not in MODES:
            raise UsageError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.slice_bytes < 1 or (self.max_slices is not None and self.max_slices < 1):
            raise UsageError("slice_bytes and max_slices must be >= 1 (max_slices None: no cap, as the simulator)")

    def __del__(self) -> None:
        for w in getattr(self, "_waiters", {}).values():
            w.jobs.put(None)

    def _global(self, group_rank: int) -> int:
        if self.group is None or self.group is dist.group.WORLD:
            return group_rank
        return dist.get_global_rank(self.group, group_rank)

    # ----- collectives -------------------------------------------------------------------

    def all_reduce(self, tensor: torch.Tensor, op: object = "sum") -> torch.Tensor:
        """In place: every rank's ``tensor`` becomes the reduction over ranks (like ``dist.all_reduce``)."""
        opn = _op_name(op)
        self._check_tensor(tensor, "tensor", opn)
        with _flat(tensor) as work:
            self._run("allreduce", work, work.numel(), opn)
            if opn == "avg":
                work.div_(len(self._peers))
        return tensor

    def all_gather(self, output: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
        """``output`` (``world * input.numel()`` elements) becomes every rank's ``input`` in rank order
        (like ``dist.all_gather_into_tensor``; ``input`` may be this rank's slot of ``output``)."""
        self._check_tensor(input, "input")
        self._check_tensor(output, "output")
        n, m = len(self._peers), input.numel()
        if output.numel() != n * m or output.dtype != input.dtype:
            raise UsageError(f"all_gather: output must have world size x input elements ({n} x {m}) of "
                             f"{input.dtype}, got {output.numel()} of {output.dtype}")
        with _flat(output) as work:
            slot = work[self.node * m:(self.node + 1) * m]
            src = input.reshape(-1)
            if m and slot.data_ptr() != src.data_ptr():
                slot.copy_(src)
            self._run("allgather", work, m, "sum")
        return output

    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, op: object = "sum") -> torch.Tensor:
        """``output`` becomes this rank's block (in rank order) of the reduction of every rank's ``input``
        (like ``dist.reduce_scatter_tensor``); ``input`` is left unchanged."""
        opn = _op_name(op)
        self._check_tensor(input, "input", opn)
        self._check_tensor(output, "output", opn)
        n, m = len(self._peers), output.numel()
        if input.numel() != n * m or output.dtype != input.dtype:
            raise UsageError(f"reduce_scatter: input must have world size x output elements ({n} x {m}) of "
                             f"{output.dtype}, got {input.numel()} of {input.dtype}")
        work = input.reshape(-1).clone()
        self._run("reduce_scatter", work, m, opn)
        mine = work[self.node * m:(self.node + 1) * m]
        if opn == "avg":
            mine.div_(n)
        output.copy_(mine.view(output.shape))
        return output

    def broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        """In place: every rank's ``tensor`` becomes the schedule root's (a broadcast schedule)."""
        self._check_tensor(tensor, "tensor")
        with _flat(tensor) as work:
            self._run("broadcast", work, work.numel(), "sum")
        return tensor

    def reduce(self, tensor: torch.Tensor, op: object = "sum") -> torch.Tensor:
        """The schedule root's ``tensor`` becomes the reduction over ranks; the others' are left unchanged."""
        opn = _op_name(op)
        self._check_tensor(tensor, "tensor", opn)
        root = self.schedule.ranks.index(self.schedule.root) if self.schedule.root else 0
        if self.node == root:
            with _flat(tensor) as work:
                self._run("reduce", work, work.numel(), opn)
                if opn == "avg":
                    work.div_(len(self._peers))
        else:
            self._run("reduce", tensor.reshape(-1).clone(), tensor.numel(), opn)
        return tensor

    # ----- machinery ---------------------------------------------------------------------

    def plan(self, collective: str, numel: int, dtype: torch.dtype) -> Plan:
        """This rank's plan for a call (cached), agreed with the other ranks on first use when ``check``."""
        key = (collective, numel, dtype)
        plan = self._plans.get(key)
        if plan is None:
            sched = phase_schedule(self.schedule, collective)
            size = torch.empty((), dtype=dtype).element_size()
            plan = build_plans(sched, numel, size, self.slice_bytes, self.max_slices)[self.node]
            if self.check:
                self._agree(key)
            self._plans[key] = plan
        return plan

    def _fingerprint(self) -> object:
        """What the ranks must share about the schedule (compared on a call's first use)."""
        return (self.schedule.collective, self.schedule.ranks, self.schedule.shard_weights,
                [(t.root, t.chunks, t.phase, t.edges) for t in self.schedule.trees])

    def _agree(self, key: tuple) -> None:
        text = repr((self._fingerprint(), self.rank_map, key, self.slice_bytes, self.max_slices))
        mine = int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")
        n = len(self._peers)
        device = _device_for(self.group)
        local = torch.tensor([mine], dtype=torch.int64, device=device)
        everyone = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(n)]
        work = dist.all_gather(everyone, local, group=self.group, async_op=True)
        self._wait([work], f"{key[0]}: agreeing on the call")
        values = [int(t.item()) for t in everyone]
        node_of = {g: i for i, g in enumerate(self.rank_map)}
        differ = [node_of[g] for g, v in enumerate(values) if v != mine]
        if differ:
            raise CollectiveError(f"{key[0]}: the ranks did not make the same call: compute nodes {differ} use a "
                                  f"different schedule, rank map, size ({key[1]} elements here) or dtype ({key[2]})")

    def _run(self, collective: str, work: torch.Tensor, numel: int, op: str) -> None:
        plan = self.plan(collective, numel, work.dtype)
        if plan.numel != work.numel():
            raise UsageError(f"{collective}: buffer of {work.numel()} elements, the plan needs {plan.numel}")
        combine = _combine(op)
        if self.mode == "async":
            self._run_async(collective, plan, work, combine)
            return
        peers, group = self._peers, self.group
        for rnd in plan.rounds:
            ops, pending = [], []
            for m in rnd.sends:
                segs = m.segments
                buf = work[segs[0].start:segs[0].stop] if len(segs) == 1 else \
                    torch.cat([work[s.start:s.stop] for s in segs])
                ops.append(dist.P2POp(dist.isend, buf, peers[m.peer], group))
            for m in rnd.recvs:
                segs = m.segments
                if len(segs) == 1 and not segs[0].reduce:
                    buf = work[segs[0].start:segs[0].stop]
                else:
                    buf = torch.empty(m.numel, dtype=work.dtype, device=work.device)
                    pending.append((m, buf))
                ops.append(dist.P2POp(dist.irecv, buf, peers[m.peer], group))
            self._wait(dist.batch_isend_irecv(ops), f"{collective} round {rnd.index}", rnd)
            for m, buf in pending:
                _apply(work, m, buf, combine)

    def async_plan_ops(self, collective: str, numel: int, dtype: torch.dtype) -> tuple[Op, ...]:
        """The operations an async run of this call performs (what ``trace`` indices refer to)."""
        return self._ops(self.plan(collective, numel, dtype))

    def _ops(self, plan: Plan) -> tuple[Op, ...]:
        return self._schedule_of(plan).ops

    def _schedule_of(self, plan: Plan) -> _AsyncSchedule:
        sched = self._async_ops.get(id(plan))
        if sched is None:
            sched = self._async_ops[id(plan)] = _AsyncSchedule.of(async_ops(plan))
        return sched

    def _run_async(self, collective: str, plan: Plan, work: torch.Tensor, combine) -> None:
        """The plan's messages as soon as their data is ready (see the module docstring)."""
        sched = self._schedule_of(plan)
        ops, dependents = sched.ops, sched.dependents
        # the process group's own send / recv (group ranks): what dist.isend / irecv call after their checks
        pg = self.group if self.group is not None else dist.group.WORLD
        peers = self.rank_map
        threaded, tagged = self._backend_waits()
        need = list(sched.deps)  # per op: how many of its dependencies are not done yet
        done = [False] * len(ops)
        sending: dict[int, object] = {}  # sends issued and not yet waited: op index -> work handle
        handles: dict[int, object] = {}  # receives in flight, when the main thread waits on them itself
        arrived: dict[int, torch.Tensor] = {}  # received, not yet applied
        applicable: list[int] = []  # received and every dependency done: apply next
        bufs: dict[int, torch.Tensor] = {}
        keys = [(o.message.peer, o.stream if tagged else 0) for o in ops]
        queues: dict[tuple[int, int], list[int]] = {}  # (peer, stream) -> its send op indices in order
        for i, o in enumerate(ops):
            if o.kind == "send":
                queues.setdefault(keys[i], []).append(i)
        heads = dict.fromkeys(queues, 0)
        check = set(queues)  # send queues whose head may have become ready
        needed = sched.needed  # sends whose buffer a later receive overwrites
        results: queue.SimpleQueue = queue.SimpleQueue()  # (op index, exception or None) from the waiters
        call = _Call()  # shared with the waiters: set failed when the call fails
        trace = self.trace
        clock = time.perf_counter
        if trace is not None:
            trace.append((clock(), "start", -1))
        recvs = sched.recvs  # receive op indices in round order: posted in this order, a batch at a time
        offsets = sched.offsets  # each receive's (and packed send's) place in the one buffer for all of them
        arena = self._arena(sched.arena, work)
        posted, receiving, left = 0, 0, len(ops)

        def finish(j: int) -> None:
            nonlocal left
            done[j] = True
            left -= 1
            for i in dependents[j]:
                need[i] -= 1
                if not need[i]:
                    if ops[i].kind == "send":
                        check.add(keys[i])
                    elif i in arrived:
                        applicable.append(i)

        def received(i: int, exc: BaseException | None) -> None:
            nonlocal receiving
            receiving -= 1
            if exc is not None:
                call.failed = True
                raise self._failure(f"{collective} round {ops[i].round}", ops[i], exc)
            if trace is not None:
                trace.append((clock(), "recv", i))
            arrived[i] = bufs.pop(i)
            if not need[i]:
                applicable.append(i)

        def post(count: int) -> None:
            """Post the next ``count`` receives (gloo sends a message only once its receive is posted, so they go
            early, but a batch at a time: messages that are in get handled between batches)."""
            nonlocal posted, receiving
            batch: dict[tuple[int, int], list] = {}
            stop = min(len(recvs), posted + count)
            for i in recvs[posted:stop]:
                o = ops[i]
                bufs[i] = arena[offsets[i]:offsets[i] + o.message.numel]
                h = self._issue(pg.recv, bufs[i], peers[o.message.peer], collective, o, keys[i][1])
                if threaded:
                    batch.setdefault(keys[i], []).append((h, i))
                else:
                    handles[i] = h
            receiving += stop - posted
            posted = stop
            for key, works in batch.items():
                self._waiter(key).jobs.put((works, results, self.timeout, call))
            check.update(queues)  # sends held back by the round horizon may go now

        try:
            post(_POST_BATCH)
            while left:
                moved = True
                while moved:
                    moved = False
                    # sends whose data is in, each peer and stream in order, up to a round after the receives
                    # posted so far (the early rounds' sends and receives first: they are the critical path)
                    horizon = ops[recvs[posted - 1]].round + 1 if posted < len(recvs) else 1 << 62
                    while check:
                        key = check.pop()
                        q, h = queues[key], heads[key]
                        while h < len(q) and not need[q[h]] and ops[q[h]].round <= horizon:
                            i = q[h]
                            segs = ops[i].message.segments
                            if len(segs) == 1:
                                buf = work[segs[0].start:segs[0].stop]
                            else:  # packed into its place in the arena (kept until the call's sends are out)
                                buf = arena[offsets[i]:offsets[i] + ops[i].message.numel]
                                torch.cat([work[s.start:s.stop] for s in segs], out=buf)
                            sending[i] = self._issue(pg.send, buf, peers[key[0]], collective, ops[i], key[1])
                            if trace is not None:
                                trace.append((clock(), "send", i))
                            h += 1
                            heads[key] = h
                            if i not in needed or len(segs) > 1:  # nothing waits for its buffer: done once issued
                                finish(i)
                                moved = True
                    if posted < len(recvs):
                        post(_POST_BATCH)
                        moved = True  # the horizon moved: held sends may go
                    while threaded:  # receives the waiters have seen complete, without blocking
                        try:
                            i, exc = results.get_nowait()
                        except queue.Empty:
                            break
                        received(i, exc)
                    if applicable:
                        applicable.sort()
                        for i in applicable:
                            _apply(work, ops[i].message, arrived.pop(i), combine)
                            if trace is not None:
                                trace.append((clock(), "apply", i))
                        batch, applicable[:] = list(applicable), []
                        for i in batch:
                            finish(i)
                        moved = True
                if not left:
                    break
                if posted < len(recvs):  # nothing to do but post receives: post more before blocking
                    post(_POST_BATCH)
                    continue
                # block: on a send a received message still waits for, else on the next receive to complete
                blockers = sorted({j for i in arrived for j in ops[i].after if not done[j] and (j in sending or j in handles)})
                if threaded and receiving and not any(j in sending for j in blockers):
                    blockers = []  # wait for whichever receive completes first
                j = blockers[0] if blockers else min(handles) if handles else -1
                if trace is not None:
                    trace.append((clock(), "wait", j))
                if j in sending:
                    self._wait([sending.pop(j)], f"{collective} round {ops[j].round}", ops[j])
                    finish(j)
                elif j in handles:  # a backend whose wait does not block the host (NCCL): in order
                    self._wait([handles.pop(j)], f"{collective} round {ops[j].round}", ops[j])
                    received(j, None)
                elif threaded and receiving:
                    received(*results.get())
                else:
                    raise CollectiveError(f"compute node {self.node}: {collective}: no operation can proceed "
                                          f"(a plan inconsistent across ranks?)")
            for j in sorted(sending):  # the sends' buffers stay alive (and the call open) until they are out
                self._wait([sending.pop(j)], f"{collective} round {ops[j].round}", ops[j])
        except BaseException:
            call.failed = True  # the waiters drop this call's remaining receives instead of waiting on them
            # receives still posted may land later: the next call gets a fresh buffer, not this one
            self._arenas.pop((work.dtype, work.device), None)
            raise
        if trace is not None:
            trace.append((clock(), "end", -1))

    def _arena(self, numel: int, work: torch.Tensor) -> torch.Tensor:
        """A buffer of ``numel`` elements for a call's receives, kept between calls (one per dtype and device,
        grown when a call needs more): fresh memory for every call would be paid in page faults."""
        key = (work.dtype, work.device)
        arena = self._arenas.get(key)
        if arena is None or arena.numel() < numel:
            arena = self._arenas[key] = torch.empty(numel, dtype=work.dtype, device=work.device)
        return arena[:numel]

    def _backend_waits(self) -> tuple[bool, bool]:
        """(wait on receives in helper threads, one tag per stream) for this group's backend.  gloo's wait
        blocks the host until the data is in, so a thread per stream waits and the main thread takes whichever
        completes first; NCCL's wait only orders the GPU stream (it returns at once), and NCCL ignores tags,
        so matching relies on the order of the calls: one stream per peer, waited in order."""
        nccl = dist.get_backend(self.group) == "nccl"
        return self.threads and not nccl, not nccl

    def _waiter(self, key: tuple[int, int]) -> _Waiter:
        w = self._waiters.get(key)
        if w is None:
            w = self._waiters[key] = _Waiter()
        return w

    def _issue(self, fn, buf: torch.Tensor, peer: int, collective: str, op: Op, tag: int = 0):
        """``fn([buf], peer, tag)``: a process group's send or recv, ``peer`` a rank of the group."""
        try:
            return fn([buf], peer, tag)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CollectiveError(f"compute node {self.node}: {collective} round {op.round} ({op.kind} with "
                                  f"compute node {op.message.peer}) failed: {first}") from exc

    def _failure(self, what: str, rnd: object, exc: BaseException) -> CollectiveError:
        """The error for a failed wait: ``rnd`` an Op (its peer is named), a Round (its peers) or None."""
        peers = ""
        if isinstance(rnd, Op):
            peers = f" ({'sending to' if rnd.kind == 'send' else 'receiving from'} compute node {rnd.message.peer})"
        elif rnd is not None:
            ids = sorted({m.peer for m in rnd.sends} | {m.peer for m in rnd.recvs})
            peers = f" (exchanging with compute nodes {ids})"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        err = CollectiveError(f"compute node {self.node}: {what}{peers} failed: {first}")
        err.__cause__ = exc
        return err

    def _wait(self, works: list, what: str, rnd: object = None) -> None:
        try:
            for w in works:
                if self.timeout is None:
                    w.wait()
                else:
                    w.wait(self.timeout)
        except RuntimeError as exc:
            raise self._failure(what, rnd, exc) from exc

    def _check_tensor(self, t: object, name: str, op: str = "sum") -> None:
        if not isinstance(t, torch.Tensor):
            raise UsageError(f"{name} must be a torch.Tensor, not {type(t).__name__}")
        if t.dtype not in DTYPES:
            raise UsageError(f"{name}: unsupported dtype {t.dtype}; forestcoll.torch supports "
                             + ", ".join(str(d).replace("torch.", "") for d in DTYPES))
        if op == "avg" and not t.dtype.is_floating_point:
            raise UsageError(f"{name}: op 'avg' needs a floating-point tensor, got {t.dtype}")


class _Call:
    """What an asynchronous call shares with its waiters: ``failed`` once it has failed (they then drop its
    remaining receives without waiting on them)."""

    failed: bool = False


@dataclass(frozen=True)
class _AsyncSchedule:
    """A plan's asynchronous operations with what a run needs precomputed: per op its number of dependencies
    and the ops that depend on it; the receives in round order; each receive's and each several-segment send's
    offset into one buffer for all of them (``arena`` elements); the sends whose buffer a later receive
    overwrites (``needed``)."""

    ops: tuple[Op, ...]
    deps: tuple[int, ...]
    dependents: tuple[tuple[int, ...], ...]
    recvs: tuple[int, ...]
    offsets: dict[int, int]
    arena: int
    needed: frozenset[int]

    @staticmethod
    def of(ops: tuple[Op, ...]) -> _AsyncSchedule:
        dependents: list[list[int]] = [[] for _ in ops]
        for i, o in enumerate(ops):
            for j in o.after:
                dependents[j].append(i)
        recvs = tuple(i for i, o in enumerate(ops) if o.kind == "recv")
        offsets, at = {}, 0
        for i, o in enumerate(ops):  # receives, and sends of several segments (packed before they leave)
            if o.kind == "recv" or len(o.message.segments) > 1:
                offsets[i] = at
                at += o.message.numel
        needed = frozenset(j for o in ops if o.kind == "recv" for j in o.after if ops[j].kind == "send")
        return _AsyncSchedule(ops, tuple(len(o.after) for o in ops), tuple(tuple(d) for d in dependents), recvs,
                              offsets, at, needed)


_POST_BATCH = 16  # receives posted at a time by an asynchronous call (see Communicator._run_async)


class _Waiter:
    """A daemon thread that waits on one receive stream's operations in order (they complete in order) and
    reports each, with the exception its wait raised or None, to the call's queue (up to the first failure);
    a job is (list of (work handle, op index), queue, timeout, the call's :class:`_Call`); ``None`` stops the
    thread.  The waits release the GIL, so the main thread applies and forwards whichever message is in first."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="forestcoll-wait", daemon=True).start()

    def _loop(self) -> None:
        while (job := self.jobs.get()) is not None:
            works, results, timeout, call = job
            job = None
            works.reverse()
            while works:  # each handle is dropped before its completion is reported: once the call has
                work, index = works.pop()  # returned, this thread holds none (torch must be free to tear down)
                if call.failed:
                    works.clear()
                    break
                try:
                    if timeout is None:
                        work.wait()
                    else:
                        work.wait(timeout)
                except Exception as exc:  # handed to the main thread, which raises it
                    work = None
                    works.clear()
                    call.failed = True
                    results.put((index, exc))
                    break
                work = None
                results.put((index, None))
            works = results = call = None


def _apply(work: torch.Tensor, message, buf: torch.Tensor, combine) -> None:
    off = 0
    for s in message.segments:
        part = buf[off:off + s.stop - s.start]
        off += s.stop - s.start
        if s.reduce:
            combine(work[s.start:s.stop], part)
        else:
            work[s.start:s.stop].copy_(part)


def _device_for(group: dist.ProcessGroup | None) -> torch.device:
    backend = dist.get_backend(group)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class _flat:
    """A flat contiguous view of a tensor for the duration of a call; non-contiguous tensors go through
    a copy that is written back at the end."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.copy = not t.is_contiguous()

    def __enter__(self) -> torch.Tensor:
        self.flat = self.t.contiguous().view(-1) if self.copy else self.t.view(-1)
        return self.flat

    def __exit__(self, *exc: object) -> None:
        if self.copy and exc[0] is None:
            self.t.copy_(self.flat.view(self.t.shape))


_CACHE: OrderedDict[tuple, Communicator] = OrderedDict()
_CACHE_SIZE = 8


def communicator(schedule: str | os.PathLike | Schedule | Communicator, group=None) -> Communicator:
    """The cached :class:`Communicator` for ``schedule`` (a path, a Schedule or a Communicator) on ``group``."""
    if isinstance(schedule, Communicator):
        return schedule
    if isinstance(schedule, Schedule):
        key: tuple = ("obj", id(schedule), id(group))
    else:
        path = os.path.realpath(os.fspath(schedule))
        key = ("path", path, os.stat(path).st_mtime_ns if os.path.exists(path) else 0, id(group))
    comm = _CACHE.get(key)
    if comm is None:
        comm = Communicator(load(schedule), group)
        _CACHE[key] = comm
        comm._keep = (schedule, group)  # the ids in the key stay valid while cached
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return comm
