"""Execution plans: every schedule, lowered to rounds, computes its collective (numpy reference executor)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import fabrics, refused_for_imbalance
from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll import generate, load_topology
from forestcoll.errors import ScheduleError, UsageError
from forestcoll.runtime import build_plans, phase_schedule, shard_bounds, work_layout
from forestcoll.runtime.reference import run_plans, run_plans_async

REDUCE = {"sum": np.add, "product": np.multiply, "max": np.maximum, "min": np.minimum}


def run_collective(sched, coll: str, numel: int, op: str = "sum", seed: int = 0, slice_bytes: int = 64):
    """Run ``coll`` with ``sched`` on random int64 data; return (outputs, expected) per rank."""
    n = len(sched.ranks)
    part = phase_schedule(sched, coll)
    root = sched.ranks.index(sched.root) if sched.root else 0
    work, shards = work_layout(coll, n, numel, root)
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-3, 4, size=work).astype(np.int64) for _ in range(n)]
    if op == "product":
        inputs = [np.where(x == 0, 1, np.sign(x)) for x in inputs]
    works = [x.copy() for x in inputs]
    run_plans(build_plans(part, numel, 8, slice_bytes=slice_bytes, max_slices=4), works, op)
    total = inputs[0].copy()
    for x in inputs[1:]:
        REDUCE[op](total, x, out=total)
    if coll == "allreduce":
        return works, [total] * n
    if coll == "allgather":
        gathered = np.concatenate([inputs[i][a:b] for i, (a, b) in enumerate(shards)])
        return works, [gathered] * n
    if coll == "reduce_scatter":
        return [w[a:b] for w, (a, b) in zip(works, shards)], [total[a:b] for a, b in shards]
    if coll == "broadcast":
        return works, [inputs[root]] * n
    return [works[root]], [total]  # reduce: only the root's buffer is defined


CATALOG = ["ring:n=2", "ring:n=6", "switch:n=3", "hypercube:dim=3", "torus:dims=2x3", "dgx-1",
           "dgx-a100:nodes=2", "hgx-h100", "mi250:nodes=1"]


@pytest.mark.parametrize("spec", CATALOG)
@pytest.mark.parametrize("coll", ["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce"])
def test_catalog_schedules_compute_their_collective(spec, coll):
    topo = load_topology(spec)
    for k in (None, 1):
        sched = generate(topo, coll, k=k)
        for numel in (0, 1, 2, 7, 97, 1009):
            outs, want = run_collective(sched, coll, numel, seed=numel)
            for o, w in zip(outs, want):
                assert np.array_equal(o, w), (spec, coll, k, numel)


@pytest.mark.parametrize("op", ["sum", "product", "max", "min"])
def test_every_reduction(op):
    sched = generate(load_topology("dgx-1"), "allreduce")
    outs, want = run_collective(sched, "allreduce", 513, op=op)
    assert all(np.array_equal(o, w) for o, w in zip(outs, want))


@pytest.mark.parametrize("coll", ["allgather", "reduce_scatter"])
def test_allreduce_schedule_runs_its_phases(coll):
    sched = generate(load_topology("torus:dims=2x3"), "allreduce")
    assert phase_schedule(sched, coll).collective == coll
    outs, want = run_collective(sched, coll, 31)
    assert all(np.array_equal(o, w) for o, w in zip(outs, want))


def test_wrong_collective_is_refused():
    sched = generate(load_topology("ring:n=4"), "allgather")
    with pytest.raises(UsageError, match="cannot run allreduce"):
        phase_schedule(sched, "allreduce")
    with pytest.raises(UsageError, match="unknown collective"):
        phase_schedule(sched, "gather")
    with pytest.raises(UsageError, match="cannot run alltoall"):
        phase_schedule(sched, "alltoall")


@settings(max_examples=40, deadline=None)
@given(fabrics(max_compute=5, max_switches=2), st.sampled_from(["allreduce", "allgather", "reduce_scatter", "broadcast"]),
       st.sampled_from([None, 1, 2]), st.integers(0, 300))
def test_random_fabrics(topo, coll, k, numel):
    try:
        sched = generate(topo, coll, k=k)
    except Exception as exc:
        assert refused_for_imbalance(exc), exc
        return
    outs, want = run_collective(sched, coll, numel, seed=numel, slice_bytes=8 * max(1, numel // 5))
    assert all(np.array_equal(o, w) for o, w in zip(outs, want))


def test_rounds_have_one_message_per_peer_and_direction():
    sched = generate(load_topology("dgx-a100:nodes=2"), "allreduce")
    plans = build_plans(sched, 10**6, 4)
    for p in plans:
        for r in p.rounds:
            assert len({m.peer for m in r.sends}) == len(r.sends)
            assert len({m.peer for m in r.recvs}) == len(r.recvs)
            sent = {(s.start, s.stop) for m in r.sends for s in m.segments}
            got = {(s.start, s.stop) for m in r.recvs for s in m.segments}
            assert not sent & got  # never sends and receives the same range in one round


def test_pipelining_adds_one_round_per_extra_slice():
    sched = generate(load_topology("ring:n=4"), "allgather", k=1)
    one = build_plans(sched, 1 << 16, 4, slice_bytes=1 << 30, max_slices=1)[0]
    many = build_plans(sched, 1 << 16, 4, slice_bytes=1 << 12, max_slices=8)[0]
    assert len(many.rounds) == len(one.rounds) + 7  # 8 slices: 7 more rounds of pipeline
    assert sum(m.numel for r in many.rounds for m in r.recvs) == sum(m.numel for r in one.rounds for m in r.recvs)


def test_plans_slice_as_the_simulator_by_default():
    """The default plan cuts pieces as the simulator's default model (its slice, no cap on the count, the rule
    and depth of the piece's trees): a 64 MiB shard moves in far more than the old cap of 16 slices."""
    from forestcoll.pieces import cut_pieces, piece_rule, shape_trees, slices_for
    from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE

    sched = generate(load_topology("ring:n=4"), "allgather", k=1)
    numel = 16 << 20  # float32: a 64 MiB shard per rank
    plan = build_plans(sched, numel, 4)[0]
    assert plan == build_plans(sched, numel, 4, slice_bytes=DEFAULT_SLICE, max_slices=DEFAULT_MAX_SLICES)[0]
    k, pieces = cut_pieces(sched, shape_trees(sched), 1 << 62)
    assert k == 1 and {len(pc.trees) for pc in pieces} == {1}
    rule, depth = piece_rule(pieces[0].trees, False)
    slices = slices_for(numel * 4, DEFAULT_SLICE, DEFAULT_MAX_SLICES, rule=rule, depth=depth)
    assert slices > 16
    assert len(plan.rounds) == slices + depth - 1  # the deepest node gets the last slice depth - 1 rounds later


def test_plans_are_deterministic():
    sched = generate(load_topology("mi250:nodes=1"), "allreduce")
    assert build_plans(sched, 12345, 2) == build_plans(sched, 12345, 2)


@given(st.integers(0, 10**6), st.integers(1, 64))
def test_shard_bounds_cover_evenly(n, parts):
    b = shard_bounds(n, parts)
    assert b[0][0] == 0 and b[-1][1] == n and all(x[1] == y[0] for x, y in zip(b, b[1:]))
    sizes = [hi - lo for lo, hi in b]
    assert max(sizes) - min(sizes) <= 1


def test_mismatched_receiver_is_caught():
    sched = generate(load_topology("ring:n=3"), "allgather")
    plans = build_plans(sched, 10, 4)
    broken = [plans[0], plans[1].__class__(plans[1].collective, 1, 3, plans[1].numel, plans[1].rounds[1:]), plans[2]]
    with pytest.raises(ScheduleError, match="round"):
        run_plans(broken, [np.zeros(30, dtype=np.int64) for _ in range(3)])


def test_bad_arguments():
    sched = generate(load_topology("ring:n=3"), "allgather")
    with pytest.raises(UsageError):
        build_plans(sched, -1, 4)
    with pytest.raises(UsageError):
        build_plans(sched, 10, 0)


def _inputs(sched, coll: str, numel: int, seed: int):
    n = len(sched.ranks)
    root = sched.ranks.index(sched.root) if sched.root else 0
    work, _shards = work_layout(coll, n, numel, root)
    rng = np.random.default_rng(seed)
    return [rng.integers(-1000, 1000, size=work).astype(np.int64) for _ in range(n)]


ASYNC_CATALOG = ["ring:n=6", "hypercube:dim=3", "dgx-1", "dgx-a100:nodes=2", "mi250:nodes=1"]


@pytest.mark.parametrize("spec", ASYNC_CATALOG)
@pytest.mark.parametrize("coll", ["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce"])
def test_async_execution_equals_the_rounds(spec, coll):
    """The asynchronous order (early receives, sends as soon as their data is in) gives the synchronous
    rounds' result bit for bit, on a network that buffers one message per connection and posts one receive
    per peer ahead, whatever order the ranks take turns in (no deadlock: run_plans_async raises on one)."""
    sched = generate(load_topology(spec), coll)
    part = phase_schedule(sched, coll)
    for numel, seed in ((97, 1), (1009, 2)):
        plans = build_plans(part, numel, 8, slice_bytes=64, max_slices=4)
        inputs = _inputs(sched, coll, numel, seed)
        sync = [x.copy() for x in inputs]
        run_plans(plans, sync, "sum")
        for order_seed in range(3):
            works = [x.copy() for x in inputs]
            run_plans_async(plans, works, "sum", capacity=1, window=1, seed=order_seed)
            for a, b in zip(works, sync):
                assert np.array_equal(a, b), (spec, coll, numel, order_seed)


@given(st.sampled_from(["allreduce", "reduce_scatter", "broadcast"]), st.integers(0, 10**6))
@settings(max_examples=15, deadline=None)
def test_async_random_turns_products(coll, seed):
    """Non-commutative-in-floats but exact-in-integers products and maxima: the same values as the rounds."""
    sched = generate(load_topology("torus:dims=2x3"), coll, k=2)
    plans = build_plans(phase_schedule(sched, coll), 211, 8, slice_bytes=32, max_slices=4)
    for op in ("product", "max"):
        inputs = [np.sign(x) + (x == 0) if op == "product" else x for x in _inputs(sched, coll, 211, seed)]
        sync = [x.copy() for x in inputs]
        run_plans(plans, sync, op)
        works = [x.copy() for x in inputs]
        run_plans_async(plans, works, op, capacity=1, window=1, seed=seed)
        assert all(np.array_equal(a, b) for a, b in zip(works, sync))


def test_async_dependencies_are_needed():
    """Without the dependencies async_ops computes, the same turns give a different (wrong) result: the test
    above can fail."""
    import forestcoll.runtime.reference as ref
    from forestcoll.runtime.plan import Op, async_ops

    sched = generate(load_topology("ring:n=6"), "allreduce")
    plans = build_plans(phase_schedule(sched, "allreduce"), 1009, 8, slice_bytes=64, max_slices=4)
    inputs = _inputs(sched, "allreduce", 1009, 3)
    sync = [x.copy() for x in inputs]
    run_plans(plans, sync, "sum")
    free = ref.async_ops
    try:
        ref.async_ops = lambda p: tuple(Op(o.kind, o.round, o.message, ()) for o in async_ops(p))
        works = [x.copy() for x in inputs]
        ref.run_plans_async(plans, works, "sum", capacity=4, window=4, seed=0)
    finally:
        ref.async_ops = free
    assert not all(np.array_equal(a, b) for a, b in zip(works, sync))


def test_async_deadlock_is_reported():
    """Two ranks that each wait for the other's message before sending their own: one clear error."""
    from forestcoll.runtime.plan import Message, Plan, Round, Segment

    a = Plan("allgather", 0, 2, 4, (Round(0, (), (Message(1, (Segment(0, 2, False),)),)), Round(1, (Message(1, (Segment(0, 2, False),)),), ())))
    b = Plan("allgather", 1, 2, 4, (Round(0, (), (Message(0, (Segment(2, 4, False),)),)), Round(1, (Message(0, (Segment(2, 4, False),)),), ())))
    with pytest.raises(ScheduleError, match="deadlock"):
        run_plans_async([a, b], [np.zeros(4), np.zeros(4)], "sum")


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "torus:dims=2x3"])
def test_async_streams_split_in_tree_from_out_tree_segments(spec):
    """An allreduce round's message to a peer carries reduce-scatter (combined) and allgather (overwritten)
    segments; async_ops cuts it into stream 0 (in-tree) and stream 1 (out-tree), and what a rank sends on a
    stream to a peer is exactly what that peer receives on it, message by message (they match in order)."""
    from forestcoll.runtime.plan import async_ops

    sched = generate(load_topology(spec), "allreduce")
    plans = build_plans(phase_schedule(sched, "allreduce"), 100_003, 4, slice_bytes=4096, max_slices=4)
    ops = [async_ops(p) for p in plans]
    mixed = sum(1 for p in plans for rnd in p.rounds for m in rnd.sends if len({s.reduce for s in m.segments}) == 2)
    assert mixed, "the test needs messages that carry both kinds"
    for rank_ops in ops:
        for o in rank_ops:
            assert {s.stream for s in o.message.segments} == {o.stream}
            assert all(s.reduce == (o.stream == 0) for s in o.message.segments)
    for r, rank_ops in enumerate(ops):
        for q, other in enumerate(ops):
            for stream in (0, 1):
                sent = [(o.round, o.message.segments) for o in rank_ops
                        if o.kind == "send" and o.message.peer == q and o.stream == stream]
                got = [(o.round, o.message.segments) for o in other
                       if o.kind == "recv" and o.message.peer == r and o.stream == stream]
                assert sent == got
