"""forestcoll schedules as torch.distributed collectives (``pip install forestcoll[torch]``).

    import forestcoll.torch as fct
    fct.all_reduce(tensor, "sched.json")            # in place, like torch.distributed.all_reduce
    fct.all_gather(output, input, "allgather.json")
    fct.reduce_scatter(output, input, "rs.json", op="max")
    fct.all_to_all_single(output, input, "alltoall.json")   # equal splits, like torch's

Rank i of the group runs compute node i of the schedule.  The functions keep the
last few :class:`Communicator` objects (per schedule and group) so plans are
built once per (collective, size, dtype); hold a ``Communicator`` yourself to
control that, the rank map, timeouts and slicing.
"""

from __future__ import annotations

import torch

from forestcoll.torch.alltoall import AlltoallCommunicator, all_to_all_single
from forestcoll.torch.executor import DTYPES, OPS, CollectiveError, Communicator, communicator, load
from forestcoll.torch.overlap import matmul_all_reduce, matmul_reduce_scatter

__all__ = ["DTYPES", "OPS", "AlltoallCommunicator", "CollectiveError", "Communicator", "all_gather", "all_to_all_single", "all_reduce", "broadcast",
           "communicator", "load", "matmul_all_reduce", "matmul_reduce_scatter", "reduce", "reduce_scatter"]

def all_reduce(tensor: torch.Tensor, schedule, group=None, op: object = "sum") -> torch.Tensor:
    """In-place all-reduce of ``tensor`` over ``group`` with a forestcoll allreduce schedule."""
    return communicator(schedule, group).all_reduce(tensor, op)


def all_gather(output: torch.Tensor, input: torch.Tensor, schedule, group=None) -> torch.Tensor:
    """``output`` = every rank's ``input`` in rank order (allgather or allreduce schedule)."""
    return communicator(schedule, group).all_gather(output, input)


def reduce_scatter(output: torch.Tensor, input: torch.Tensor, schedule, group=None, op: object = "sum") -> torch.Tensor:
    """``output`` = this rank's block of the reduction of ``input`` (reduce_scatter or allreduce schedule)."""
    return communicator(schedule, group).reduce_scatter(output, input, op)


def broadcast(tensor: torch.Tensor, schedule, group=None) -> torch.Tensor:
    """In-place broadcast from the schedule's root."""
    return communicator(schedule, group).broadcast(tensor)


def reduce(tensor: torch.Tensor, schedule, group=None, op: object = "sum") -> torch.Tensor:
    """Reduction into the schedule root's ``tensor``."""
    return communicator(schedule, group).reduce(tensor, op)
