"""The event engine against its recorded results (tests/engine_cases.py, tests/data/engine_golden.json): the same
times, bit for bit.

Programs: forestcoll trees of catalog fabrics (optimal and small k, allreduce and allgather), rings, the double
binary tree, hierarchical and direct baselines, MSCCL files, at 1 MiB (16 MiB and 1 GiB in the slow tier), one mix
under both fairness models with and without per-component solving, and 48 random programs.  Exact equality, not a
tolerance: the event-driven max-min model is sensitive to the last bit on symmetric fabrics (a 1e-15 change of
the capacities moves mi250:nodes=2's 256 MiB allreduce by 7e-5, docs/simulate.md), so an engine rewrite must keep
the same floating-point operations in the same order."""

from __future__ import annotations

import engine_cases
import numpy as np
import pytest

from forestcoll.simulate.engine import ProgramBuilder, lower_bound, run

GOLDEN = engine_cases.load()


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if engine_cases.is_slow(c) else c
                                  for c in engine_cases.case_ids(slow=True)])
def test_same_results_as_recorded(case):
    program, caps, kwargs = engine_cases.build(case)
    record = GOLDEN[case]
    assert engine_cases.program_digest(program, caps) == record["program"], (
        "this case's program changed (a program builder changed, not the engine): if that is deliberate, "
        "record it again with `python tests/engine_cases.py --update --slow`")
    assert engine_cases.result_digest(run(program, caps, **kwargs)) == record["result"]


def test_a_changed_result_is_caught():
    # the digest sees one ulp of one delivered time
    program, caps, kwargs = engine_cases.build("random|0")
    res = run(program, caps, **kwargs)
    assert engine_cases.result_digest(res) == GOLDEN["random|0"]["result"]
    i = int(np.flatnonzero(~np.isnan(res.delivered))[-1])
    res.delivered[i] = np.nextafter(res.delivered[i], np.inf)
    assert engine_cases.result_digest(res) != GOLDEN["random|0"]["result"]


def test_a_transfer_below_the_clocks_resolution_ends():
    # the engine of 05a23b7 never ends on this program (a 1-byte transfer whose last bytes take less than the
    # clock's resolution at 0.03 s: now + rem / rate == now, so time stands still); the engine finishes it then
    program, caps = engine_cases.random_program(0, [0.0, 1.0, 65536.0, 524288.0, 1 << 20])
    res = run(program, caps)
    assert not np.isnan(res.delivered).any()
    assert lower_bound(program, caps) <= res.time < 0.04


@pytest.mark.filterwarnings("error")  # a link of capacity 0 means "never", said without numpy's divide-by-zero warning
def test_stop_at_and_unreachable_transfers():
    prog = ProgramBuilder()
    a = prog.transfer([0], 100.0, 1e-6)  # 10 s on link 0, then 1 us
    prog.transfer([1], 50.0, after_delivered=[a])  # 10 s more on link 1
    prog.transfer([2], 10.0)  # a link of capacity 0: never runs
    program = prog.build()
    res = run(program, np.array([10.0, 5.0, 0.0]))
    assert res.delivered[0] == 10.0 + 1e-6 and res.delivered[1] == 10.0 + 1e-6 + 10.0
    assert np.isnan(res.delivered[2]) and res.time == res.delivered[1] and not res.stopped
    caps = np.array([10.0, 5.0, 1.0])
    assert run(program, caps).time == 10.0 + 1e-6 + 10.0
    for stop in (5.0, 10.0):
        early = run(program, caps, stop_at=stop)
        assert early.stopped and stop < early.time <= 20.000001
    assert not run(program, caps, stop_at=20.0 + 1e-3).stopped
