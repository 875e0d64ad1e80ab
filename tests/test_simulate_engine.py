"""The flow engine: fair sharing, dependencies, latency, closed forms on hand-made programs."""

from __future__ import annotations

import numpy as np
import pytest

from forestcoll.simulate.engine import ProgramBuilder, link_share_rates, max_min_rates, run


def _rates(fn, paths, weights, caps):
    ptr = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in paths], out=ptr[1:])
    idx = np.array([i for p in paths for i in p], dtype=np.int64)
    return fn(ptr, idx, np.arange(len(paths)), np.asarray(weights, dtype=float), np.asarray(caps, dtype=float))


def test_max_min_gives_leftovers_to_the_unconstrained():
    # flows 0 and 1 share link 0 (cap 10); flow 1 also crosses link 1 (cap 2): flow 0 gets 8
    rates = _rates(max_min_rates, [[0], [0, 1]], [1, 1], [10, 2])
    assert rates.tolist() == pytest.approx([8, 2])
    # per-link sharing is not work-conserving: flow 0 keeps its half
    assert _rates(link_share_rates, [[0], [0, 1]], [1, 1], [10, 2]).tolist() == pytest.approx([5, 2])


def test_weights_split_a_link_in_proportion():
    assert _rates(max_min_rates, [[0], [0]], [11, 2], [13]).tolist() == pytest.approx([11, 2])
    assert _rates(link_share_rates, [[0], [0]], [11, 2], [13]).tolist() == pytest.approx([11, 2])


def test_stream_order_dependencies_and_latency():
    prog = ProgramBuilder()
    a = prog.transfer([0], 10.0, latency=0.5, stream="s")
    b = prog.transfer([0], 10.0, latency=0.5, after_sent=[a], stream="s")
    c = prog.transfer([1], 4.0, latency=0.0, after_delivered=[b], stream="t")
    m = prog.marker(after_delivered=[a, c])
    res = run(prog.build(), np.array([10.0, 4.0]))
    # a: sent at 1, arrives 1.5; b follows a's sending: sent at 2, arrives 2.5; c: 2.5 .. 3.5
    assert res.sent[a] == pytest.approx(1.0) and res.delivered[a] == pytest.approx(1.5)
    assert res.sent[b] == pytest.approx(2.0) and res.delivered[b] == pytest.approx(2.5)
    assert res.delivered[c] == pytest.approx(3.5) and res.delivered[m] == pytest.approx(3.5)
    assert res.time == pytest.approx(3.5)


def test_concurrent_transfers_share_then_speed_up():
    prog = ProgramBuilder()
    prog.transfer([0], 10.0)
    prog.transfer([0], 30.0)
    res = run(prog.build("equal"), np.array([10.0]))
    # both at 5 until the first ends at t=2 (10 bytes), then the second alone at 10: 20 left -> t=4
    assert res.delivered.tolist() == pytest.approx([2.0, 4.0])


def test_dependencies_point_backwards():
    prog = ProgramBuilder()
    a = prog.transfer([0], 1.0)
    with pytest.raises(ValueError, match="not built before it"):
        prog.transfer([0], 1.0, after_delivered=[a + 1])
