"""mi21: race_pool.Forked runs calls in forked children (the per-size MSCCL++ plans' compared simulations and
self-checks), with the values and errors of the same calls in this process; the per-size plans written with worker
processes are byte for byte those written with one."""

from __future__ import annotations

import os

import pytest

from forestcoll.errors import UsageError
from forestcoll.simulate.race_pool import Forked


def _square(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def _fails(message: str) -> None:
    raise UsageError(message)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_forked_gives_the_values_and_errors_of_the_calls(workers):
    pool = Forked(workers)
    jobs = [pool.submit(_square, x) for x in range(7)]  # more jobs than workers: submit waits for one to end
    bad = pool.submit(_fails, "no such thing")
    assert [j.result()[0] for j in jobs] == [x * x for x in range(7)]
    assert all((j.result()[1] == os.getpid()) == (workers == 1) for j in jobs)  # children, unless one worker
    with pytest.raises(UsageError, match="no such thing"):
        bad.result()
    pool.close()
    assert pool.running == []


@pytest.mark.slow
def test_per_size_plans_are_the_same_with_workers(tmp_path):
    """ring:n=4 allgather at 64 KiB .. 1 GiB, self-checked: LL and Simple plans, ll_reach's probes, a size cut for
    itself; the files, their notes, checks and rates are those of one process."""
    from forestcoll.simulate.select import export_by_size

    got = {}
    for workers in (1, 2):
        out = export_by_size("ring:n=4", "allgather", [64 << 10, 1 << 20, 16 << 20, 1 << 30],
                             str(tmp_path / str(workers)), format="mscclpp", workers=workers)
        files = {name: (tmp_path / str(workers) / name).read_bytes()
                 for name in sorted(os.listdir(tmp_path / str(workers)))}
        got[workers] = (files, [(r.range.to_dict(), r.result.notes, r.result.checks and len(r.result.checks))
                                for r in out.ranges])
    assert got[1] == got[2] and len(got[1][0]) >= 2
    assert any("-LL-" in name for name in got[1][0]), list(got[1][0])
