"""Matrix products fused with the collective that consumes them: row blocks overlap compute and communication.

``a @ b`` is computed one row block at a time; as soon as a block is ready its
collective starts on a communication thread (torch's matmul and the process
group's waits release the GIL) while the next block is computed.  The result
equals computing the whole product and then running the collective.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

from forestcoll.errors import UsageError
from forestcoll.runtime.plan import shard_bounds
from forestcoll.torch.executor import communicator

__all__ = ["matmul_all_reduce", "matmul_reduce_scatter"]


def _check(a: torch.Tensor, b: torch.Tensor, blocks: int) -> None:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise UsageError(f"need 2-D a (M x K) and b (K x N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if blocks < 1:
        raise UsageError(f"blocks must be >= 1, got {blocks}")


def matmul_all_reduce(a: torch.Tensor, b: torch.Tensor, schedule, group=None, *, blocks: int = 4,
                      op: object = "sum") -> torch.Tensor:
    """The reduction over ranks of ``a @ b`` (M x N), computed in ``blocks`` row blocks, each block's
    all-reduce overlapping the next block's product.  ``schedule``: a path, a Schedule or a Communicator."""
    _check(a, b, blocks)
    comm = communicator(schedule, group)
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.result_type(a, b), device=a.device)
    with ThreadPoolExecutor(1, thread_name_prefix="forestcoll-comm") as pool:
        pending = []
        for lo, hi in shard_bounds(a.shape[0], blocks):
            if lo == hi:
                continue
            torch.matmul(a[lo:hi], b, out=out[lo:hi])
            pending.append(pool.submit(comm.all_reduce, out[lo:hi], op))
        for f in pending:
            f.result()
    return out


def matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, schedule, group=None, *, blocks: int = 4,
                          op: object = "sum") -> torch.Tensor:
    """This rank's rows (block ``node`` of ``world`` equal row blocks) of the reduction over ranks of
    ``a @ b``.  Block j of the computation takes the j-th part of every rank's rows, so each block's
    reduce-scatter uses every tree of the schedule."""
    _check(a, b, blocks)
    comm = communicator(schedule, group)
    world = len(comm.schedule.ranks)
    if a.shape[0] % world:
        raise UsageError(f"matmul_reduce_scatter: {a.shape[0]} rows do not split into {world} equal blocks")
    rows = a.shape[0] // world
    out = torch.empty(rows, b.shape[1], dtype=torch.result_type(a, b), device=a.device)
    with ThreadPoolExecutor(1, thread_name_prefix="forestcoll-comm") as pool:
        pending = []
        for lo, hi in shard_bounds(rows, blocks):
            if lo == hi:
                continue
            idx = torch.cat([torch.arange(r * rows + lo, r * rows + hi, device=a.device) for r in range(world)])
            part = torch.matmul(a.index_select(0, idx), b)
            pending.append(pool.submit(comm.reduce_scatter, out[lo:hi], part, op))
        for f in pending:
            f.result()
    return out
