"""Sizes the runtimes can run with the per-size candidates' files (``generate --sizes``).

A file of nchunksperloop chunks runs a call only when the call's element count (times ngpus for allgather and
reduce-scatter) splits into that many chunks; otherwise MSCCL passes the call to NCCL's own algorithm
(Azure/msccl-executor-nccl ``src/misc/msccl/msccl_lifecycle.cc``, ``mscclInternalSchedulerSelectAlgo``: the
``(count * sizeMultiplier) % nChunksPerLoop == 0`` test, then ``mscclFallBackSavedParams``).  On a rank count
that is not a power of two no power-of-two size splits into N*k chunks, and NCCL's own API cannot even express
a 16 MiB allgather on 20 ranks (each rank sends count elements: the total is a multiple of N); nccl-tests rounds
such a size down to a multiple of the ranks (NVIDIA/nccl-tests ``src/all_gather.cu``,
``AllGatherGetCollByteCount``: ``recvcount = (count/nranks)*nranks``).  So a size that no candidate's chunks
divide is chosen for at the nearest size below it that they divide, and the output says so
(:func:`runnable_sizes`); only a size below one loop of every candidate's chunks is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

from forestcoll.errors import UsageError
from forestcoll.schedule import Schedule
from forestcoll.units import format_size

__all__ = ["MOVE_AT_MOST", "loop_bytes", "runnable_sizes"]

# a size moves down by at most this fraction to let one more candidate's chunking divide it (the first, finest
# chunking always divides the moved size): 1/256 of 1 MiB is 4 KiB, where 20 ranks x k = 8 x 4 B is 640 B
MOVE_AT_MOST = Fraction(1, 256)


def loop_bytes(sched: Schedule, element_bytes: int) -> int:
    """Bytes of one loop of ``sched``'s file: ``element_bytes`` times its nchunksperloop (N*k, k*sum(w) with shard
    weights, k for rooted collectives): a call runs the file only when its size is a multiple of this."""
    from forestcoll import collectives
    from forestcoll.pieces import schedule_shards

    return element_bytes * collectives.get(sched.collective).chunks_per_loop(schedule_shards(sched), sched.k)


def runnable_sizes(sizes: Sequence[int], candidates: Mapping[str, Schedule],
                   element_bytes: int) -> tuple[list[int], list[str]]:
    """(``sizes`` with each one no candidate can run moved down to the nearest size the candidates' loops divide,
    duplicates dropped; a note per moved size).  The moved size is a multiple of the finest loop and of every
    coarser loop that costs at most :data:`MOVE_AT_MOST` of the size more, taken finest first.  UsageError when a
    size is below one loop of every candidate."""
    loops = sorted({loop_bytes(s, element_bytes) for s in candidates.values()})
    out: list[int] = []
    notes: list[str] = []
    for size in sizes:
        if any(size % unit == 0 for unit in loops):
            out.append(size)
            continue
        if size < loops[0]:
            raise UsageError(f"{format_size(size)} is less than one loop of every candidate's chunks ({loops[0]} bytes "
                             "at the least): no schedule's file can run a call that small")
        step = loops[0]
        for unit in loops[1:]:
            wider = math.lcm(step, unit)
            if size % wider <= size * MOVE_AT_MOST and size >= wider:
                step = wider
        moved = size - size % step
        fit = [name for name, s in candidates.items() if moved % loop_bytes(s, element_bytes) == 0]
        notes.append(f"{format_size(size)}: no candidate's file runs a call of that size (the runtime passes it to "
                     f"NCCL's own algorithm: its elements do not split into any candidate's chunks); chosen at "
                     f"{moved} bytes ({size - moved} fewer), the nearest size below that {len(fit)} of the "
                     f"{len(candidates)} candidates run")
        out.append(moved)
    return list(dict.fromkeys(out)), notes
