"""The interpreter's race check for an access of one chunk (``cnt=1``, most steps of a split or tree file) with
scalar reads and writes of the shadow memory instead of numpy's per-call vector operations: the same checks, in
the same order, so the same races reported and the same shadow state (tests/test_msccl_race_one.py compares it with
the vector path, :meth:`forestcoll.msccl.interpreter._Machine._access`)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SCALAR", "access_one", "clock_dtype"]

SCALAR = True  # False: every access takes the vector path (the tests' oracle)


def clock_dtype(ticks: int) -> type:
    """The vector clocks' integer type when no block's clock passes ``ticks`` (its transmissions times the
    iterations; clocks only count up from 0): uint8 below its maximum (a split file's 64 steps a block, two
    iterations), int16 below its, each halving the bytes each message's clock copies and merges, else int32."""
    if ticks < np.iinfo(np.uint8).max:
        return np.uint8
    return np.int16 if ticks < np.iinfo(np.int16).max else np.int32


def access_one(machine: Any, b: Any, t: Any, name: str, lo: int, write: bool, readers: int) -> None:
    """:meth:`~forestcoll.msccl.interpreter._Machine._access` for ``t.cnt == 1``: check the access of chunk ``lo``
    of buffer ``name`` by block ``b`` (its vector clock ``b.vc``) against the last write and, for a write, the
    readers since (``readers`` slots, filled from slot 0 after each write, so the first free slot ends them);
    report the first unordered one (:meth:`_race`), then record the access."""
    memname, base = machine.mem.alias[b.rank][name]
    sh = machine.shadow[(b.rank, memname)]
    row, it, vc, me = base + lo, b.iter, b.vc, b.gid
    clk = vc[me]
    wg = int(sh.w_gid[row, it])
    if wg >= 0 and wg != me and vc[wg] < sh.w_clk[row, it]:
        machine._race(b, t, name, lo, wg, int(sh.w_step[row, it]), write, True)
    if write:
        r_gid = sh.r_gid[row, it]
        if r_gid[0] >= 0:
            r_clk = sh.r_clk[row, it]
            for slot, rg in enumerate(r_gid.tolist()):
                if rg < 0:
                    break
                if rg != me and vc[rg] < r_clk[slot]:
                    machine._race(b, t, name, lo, rg, int(sh.r_step[row, it, slot]), True, False)
                    break
            r_gid.fill(-1)
        sh.w_gid[row, it] = me
        sh.w_clk[row, it] = clk
        sh.w_step[row, it] = b.idx
        sh.r_next[row, it] = 0
    else:
        slot = int(sh.r_next[row, it])
        sh.r_gid[row, it, slot] = me
        sh.r_clk[row, it, slot] = clk
        sh.r_step[row, it, slot] = b.idx
        sh.r_next[row, it] = (slot + 1) % readers
