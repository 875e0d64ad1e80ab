"""forestcoll all-to-all schedules on torch.distributed (``all_to_all_single`` with equal splits).

Rank s's input block t (``count = input.numel() / world`` elements) ends in
rank t's output block s, as in ``torch.distributed.all_to_all_single`` without
split sizes.  A call builds (once per element count and dtype) the rank's
:class:`forestcoll.alltoall.plan.RankPlan`: its own block is copied locally,
then round h runs hop h of every flow (a relaying rank receives into a scratch
buffer in round h and forwards from it in round h+1) as one
``batch_isend_irecv`` with at most one packed message per peer and direction.
Group checks, call agreement, timeouts and :class:`CollectiveError` are the
tree executor's (:class:`forestcoll.torch.executor.Communicator`).
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict

import torch
import torch.distributed as dist

from forestcoll.alltoall.plan import RankPlan, plan_alltoall
from forestcoll.alltoall.schedule import AlltoallSchedule
from forestcoll.errors import ScheduleError, UsageError
from forestcoll.torch.executor import Communicator, load

__all__ = ["AlltoallCommunicator", "all_to_all_single"]


class AlltoallCommunicator(Communicator):
    """Runs an all-to-all schedule on a process group (same options as :class:`Communicator`;
    ``slice_bytes`` / ``max_slices`` are not used: a flow's hops run in consecutive rounds)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.schedule, AlltoallSchedule):
            raise ScheduleError(f"a {self.schedule.collective} schedule cannot run alltoall; generate one with "
                                f"--collective alltoall")

    def _fingerprint(self) -> object:
        digest = hashlib.sha256(repr([(f.src, f.dst, f.fraction, f.path) for f in self.schedule.flows]).encode())
        return (self.schedule.collective, self.schedule.ranks, digest.hexdigest())

    def plan(self, collective: str, numel: int, dtype: torch.dtype) -> RankPlan:  # type: ignore[override]
        """This rank's all-to-all plan for ``numel`` elements per pair (cached; agreed on first use)."""
        if collective != "alltoall":
            raise ScheduleError(f"an alltoall schedule cannot run {collective}; generate one with --collective {collective}")
        key = (collective, numel, dtype)
        plan = self._plans.get(key)
        if plan is None:
            built = plan_alltoall(self.schedule, numel)
            if not built.ok:
                raise ScheduleError(f"alltoall: {built.message}")
            plan = built.plans[self.node]
            if self.check:
                self._agree(key)
            self._plans[key] = plan
        return plan

    def all_to_all_single(self, output: torch.Tensor, input: torch.Tensor) -> torch.Tensor:
        """``output`` block s (in rank order) becomes rank s's ``input`` block of this rank; both tensors have
        ``world * count`` elements of one dtype.  ``input`` is left unchanged (it may not overlap ``output``
        unless it is the same tensor, which is then done in place through a copy)."""
        self._check_tensor(input, "input")
        self._check_tensor(output, "output")
        n = len(self._peers)
        if input.numel() != output.numel() or input.dtype != output.dtype or input.numel() % n:
            raise UsageError(f"all_to_all_single: input and output must have the same dtype and the same number "
                             f"of elements, a multiple of the world size {n}; got {input.numel()} {input.dtype} "
                             f"and {output.numel()} {output.dtype}")
        count = input.numel() // n
        src = input.reshape(-1).contiguous()
        out = output.view(-1) if output.is_contiguous() else torch.empty(output.numel(), dtype=output.dtype,
                                                                         device=output.device)
        if src.numel() and src.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
            src = src.clone()
        self._exchange(src, out, count)
        if out.data_ptr() != output.data_ptr() or not output.is_contiguous():
            output.copy_(out.view(output.shape))
        return output

    def _exchange(self, src: torch.Tensor, out: torch.Tensor, count: int) -> None:
        plan = self.plan("alltoall", count, src.dtype)
        bufs = {"input": src, "output": out,
                "scratch": torch.empty(plan.scratch, dtype=src.dtype, device=src.device)}
        c = plan.copy
        out[c.start:c.start + c.length].copy_(src[c.start:c.start + c.length])
        peers, group = self._peers, self.group
        for h, rnd in enumerate(plan.rounds):
            ops, pending = [], []
            for m in rnd.sends:
                parts = [bufs[s.buffer][s.start:s.start + s.length] for s in m.segments]
                ops.append(dist.P2POp(dist.isend, parts[0] if len(parts) == 1 else torch.cat(parts), peers[m.peer], group))
            for m in rnd.recvs:
                if len(m.segments) == 1:
                    s = m.segments[0]
                    buf = bufs[s.buffer][s.start:s.start + s.length]
                else:
                    buf = torch.empty(m.numel, dtype=src.dtype, device=src.device)
                    pending.append((m, buf))
                ops.append(dist.P2POp(dist.irecv, buf, peers[m.peer], group))
            if ops:
                self._wait(dist.batch_isend_irecv(ops), f"alltoall round {h}", rnd)
            for m, buf in pending:
                pos = 0
                for s in m.segments:
                    bufs[s.buffer][s.start:s.start + s.length].copy_(buf[pos:pos + s.length])
                    pos += s.length


_CACHE: OrderedDict[tuple, AlltoallCommunicator] = OrderedDict()
_CACHE_SIZE = 8


def alltoall_communicator(schedule, group=None) -> AlltoallCommunicator:
    """The cached :class:`AlltoallCommunicator` for ``schedule`` (a path, an AlltoallSchedule or a communicator)."""
    if isinstance(schedule, AlltoallCommunicator):
        return schedule
    if isinstance(schedule, Communicator):
        raise ScheduleError(f"a {schedule.schedule.collective} communicator cannot run alltoall; build an "
                            f"AlltoallCommunicator from an all-to-all schedule")
    if isinstance(schedule, (str, os.PathLike)):
        path = os.path.realpath(os.fspath(schedule))
        key: tuple = ("path", path, os.stat(path).st_mtime_ns if os.path.exists(path) else 0, id(group))
    else:
        key = ("obj", id(schedule), id(group))
    comm = _CACHE.get(key)
    if comm is None:
        comm = AlltoallCommunicator(load(schedule), group)
        comm._keep = (schedule, group)  # the ids in the key stay valid while cached
        _CACHE[key] = comm
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    _CACHE.move_to_end(key)
    return comm


def all_to_all_single(output: torch.Tensor, input: torch.Tensor, schedule, group=None) -> torch.Tensor:
    """Like ``torch.distributed.all_to_all_single(output, input, group=group)`` (equal splits) with a forestcoll
    all-to-all schedule (a path, an :class:`AlltoallSchedule` or an :class:`AlltoallCommunicator`)."""
    return alltoall_communicator(schedule, group).all_to_all_single(output, input)
