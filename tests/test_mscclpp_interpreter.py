"""The MSCCL++ interpreter: executor semantics per operation family, results, deadlocks, races, real plans, mutants."""

from __future__ import annotations

import copy
import json

import pytest
from mscclpp_plans import (
    NOP,
    allgather_put,
    allreduce_packets,
    allreduce_rre,
    gpu,
    loc,
    op,
    parsed,
    plan,
    rem,
    sig,
    tb,
    wait,
)
from test_mscclpp_plan import REAL

from forestcoll.errors import UsageError
from forestcoll.mscclpp.interpreter import default_size, run_plan
from forestcoll.mscclpp.plan import plan_from_json, read_plan

RACY = {"execution-plans_reduce_tbg.json"}  # a genuine race in mscclpp's own test plan (see the test below)
RELAXED = {"execution-plans_reduce_nvls.json", "execution-plans_reduce_nvls_pipeline.json"}


def run(d, **kw):
    return run_plan(parsed(d), **kw)


# ----- real plans ----------------------------------------------------------------------------------------


@pytest.mark.skipif(not REAL, reason="../shared/data/mscclpp-plans not available")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_plans_run_right(path):
    plan_ = read_plan(path)
    for launches in (1, 2):
        r = run_plan(plan_, source=path.name, launches=launches)
        assert r.checked and not r.errors and not r.stuck, r.message
        if path.name in RACY:
            assert r.races and not r.ok
        else:
            assert r.ok, r.message
        assert bool(r.relaxed) == (path.name in RELAXED)


def test_reduce_tbg_race_is_named():
    path = next((p for p in REAL if p.name == "execution-plans_reduce_tbg.json"), None)
    if path is None:
        pytest.skip("../shared/data/mscclpp-plans not available")
    r = run_plan(read_plan(path), source=path.name)
    # gpu 1 tb 1 copies the second half of chunks 0-1 into scratch and signals only gpu 0 tb 1, but the thread-block
    # group split of gpu 0's one-chunk get gives tb 0 the first half of chunk 1, which tb 1 of gpu 1 wrote
    assert r.races[0].startswith("gpu 1 scratch byte 64: gpu 0 tb 0 ops[7] (get) reads it and gpu 1 tb 1 ops[0] "
                                 "(copy) wrote it with nothing ordering the two")


def test_legacy_plan_runs_with_a_note():
    path = next((p for p in REAL if p.name == "execution-files_allreduce_pipeline.json"), None)
    if path is None:
        pytest.skip("../shared/data/mscclpp-plans not available")
    r = run_plan(read_plan(path))
    assert r.ok and any("divides by it" in n for n in r.notes)


def _walk(d):
    for g in d["gpus"]:
        for t in g["threadblocks"]:
            for i, o in enumerate(t["ops"]):
                yield g, t, t["ops"], i, o
                for j, x in enumerate(o.get("ops", [])):
                    yield g, t, o["ops"], j, x


def _mutants(d):
    """(kind, mutated plan) pairs: a wait removed, a signal removed, a put removed, a peer changed, a chunk moved."""
    sites = list(_walk(d))
    picks = {
        "wait removed": [k for k, s in enumerate(sites) if s[4]["name"] == "wait"],
        "signal removed": [k for k, s in enumerate(sites) if s[4]["name"] == "signal"],
        "put removed": [k for k, s in enumerate(sites) if s[4]["name"] in ("put", "ppkt", "rppkt", "pws", "pwsf")],
        "chunk moved": [k for k, s in enumerate(sites) if s[4].get("src_buff")],
    }
    for kind, ks in picks.items():
        for k in ks[:2] + ks[-1:]:
            m = copy.deepcopy(d)
            _g, _t, ops, i, o = list(_walk(m))[k]
            if kind == "chunk moved":
                o["src_buff"][0]["index"] += 1
            else:
                ops[i] = {"name": "nop"}
            yield kind, m
    n = len(d["gpus"])
    for gi in range(min(n, 2)):
        m = copy.deepcopy(d)
        g = m["gpus"][gi]
        if g["remote_buffers"]:
            g["remote_buffers"][0]["rank"] = (g["remote_buffers"][0]["rank"] + 1) % n
        else:
            c = next(c for c in g["channels"] if c.get("connected_to"))
            c["connected_to"][0] = (c["connected_to"][0] + 1) % n
        yield "peer changed", m


@pytest.mark.skipif(not REAL, reason="../shared/data/mscclpp-plans not available")
@pytest.mark.parametrize("path", [p for p in REAL if p.name not in ("execution-files_allreduce_pipeline.json",)],
                         ids=lambda p: p.name)
def test_mutants_of_real_plans_are_caught(path):
    base = json.loads(path.read_text())
    for kind, m in _mutants(base):
        r = run_plan(plan_from_json(m, path.name), launches=2)
        assert not r.ok, f"{kind}: {r.message}"
        if r.stuck:
            assert all(s.path.startswith("ops[") for s in r.stuck)
            assert "tb " in r.message and "ops[" in r.message
        elif r.races and not r.errors:
            assert " tb " in r.message and "ops[" in r.message


# ----- operation families ----------------------------------------------------------------------------------


def test_memory_put_signal_wait():
    r = run(allgather_put(), launches=2)
    assert r.ok and r.checked and r.message.startswith("OK: in-place allgather of 64 bytes right on 2 GPUs")
    r = run(allgather_put(handshake=False), launches=2)
    # without the start handshake a GPU's second call writes into a peer whose host is still reading the first
    assert not r.ok and "(put of call 2) writes it and the host of gpu 0 (after call 1) read it" in r.races[0]
    assert run(allgather_put(handshake=False)).ok  # one call alone is fine


def test_port_put_needs_a_flush_before_the_call_ends():
    assert run(allgather_put(port=True), launches=2).ok
    r = run(allgather_put(port=True, flush=False), launches=2)
    assert r.races and "(through its port channel's proxy) read it" in r.races[0]


def test_read_reduce_and_packets():
    for d in (allreduce_rre(), allreduce_packets()):
        r = run(d, launches=3)
        assert r.ok, r.message
    assert run(allreduce_rre(), mode="out-of-place").errors  # the plan writes its input: wrong out of place


def test_missing_wait_is_reported():
    d = allgather_put()
    for g in d["gpus"]:
        g["threadblocks"][0]["ops"][6] = NOP  # the final wait
    r = run(d)
    assert r.races and "ops[3] (put)" in r.races[0] and "the host of gpu" in r.races[0]
    assert any("were never waited for" in e for e in r.errors)


def test_a_race_is_reported_even_when_the_values_come_out_right():
    r = run(allgather_put(handshake=False), launches=2)
    assert not r.errors and r.races and not r.ok


def test_missing_nop_between_put_and_signal_is_a_race():
    d = allgather_put()
    for g in d["gpus"]:
        g["threadblocks"][0]["ops"][4] = sig(0)  # put; signal (no __syncthreads in between)
        g["threadblocks"][0]["ops"][5] = NOP
    r = run(d)
    assert r.races and "ops[3] (put)" in r.races[0]


def test_deadlock_names_blocks_and_operations():
    d = allgather_put()
    for g in d["gpus"]:
        ops = g["threadblocks"][0]["ops"]
        ops.insert(3, wait(0))  # both wait before anybody signals
    r = run(d)
    assert r.deadlocked and len(r.stuck) == 2
    s = r.stuck[0]
    assert (s.gpu, s.tb, s.path, s.op) == (0, 0, "ops[3]", "wait")
    assert "waits for a signal from gpu 1 on memory channel 0" in s.reason and "tb 0 is at ops[3] (wait)" in s.reason
    assert r.message.startswith("DEADLOCK: 2 thread block(s) stuck; first: gpu 0 tb 0 ops[3] (wait)")


def test_surplus_signals_are_reported():
    d = allgather_put()
    d["gpus"][0]["threadblocks"][0]["ops"].insert(5, sig(0))
    r = run(d)
    assert any("never waited for" in e for e in r.errors)


def _copy_plan(ops0, i=1, o=1, s=2, sems=None, extra_tbs=()):
    """A one-GPU-pair 'test' plan whose gpu 0 runs ``ops0`` (gpu 1 idles)."""
    g0 = gpu(0, i, o, s, [tb(0, ops0), *extra_tbs], semaphores=sems)
    g1 = gpu(1, i, o, s, [tb(0, [NOP])], semaphores=sems)
    return plan("test", [g0, g1], inplace=False)


def test_copy_pipeline_iterations_and_partial_last_one():
    d = _copy_plan([{"name": "pipeline", "iter_context": {"unit_size": 32, "num_chunks": 1},
                     "ops": [op("copy", src=[loc("i", 0)], dst=[loc("o", 0)])]}])
    r = run(d, size=48)  # one chunk of 48 bytes, moved 32 + 16
    assert r.ok and r.ops_executed == 2 + 1  # two iterations of the copy, gpu 1's nop
    assert not r.checked  # 'test' has no postcondition
    m = run_plan(parsed(d), size=48)
    assert m.bytes_moved == 48


def test_pipeline_overrun_wraps_like_the_kernel():
    # a one-chunk copy inside a pipeline of num_chunks 2: iteration 2 starts past the copy's end, the kernel's
    # unsigned size wraps and it copies a whole unit beyond the range: out of the buffer here
    d = _copy_plan([{"name": "pipeline", "iter_context": {"unit_size": 32, "num_chunks": 3},
                     "ops": [op("copy", src=[loc("i", 0)], dst=[loc("o", 0)])]}])
    r = run(d, size=32)  # iteration 1 copies nothing (32 - 32 bytes), iteration 2 wraps (32 - 64) to a whole unit
    assert r.errors and "bytes 64..95 of gpu 0's input buffer, which has 32 bytes" in r.errors[0]


def test_semaphores_and_barriers_order_thread_blocks():
    producer = tb(0, [op("copy", src=[loc("i", 0)], dst=[loc("s", 0)]), NOP, {"name": "sem_release", "semaphore_ids": [0]}])
    consumer = tb(1, [{"name": "sem_acquire", "semaphore_ids": [0]}, NOP,
                      op("copy", src=[loc("s", 0)], dst=[loc("o", 0)])])
    g0 = gpu(0, 1, 1, 1, [producer, consumer], semaphores=[0])
    g1 = gpu(1, 1, 1, 1, [tb(0, [NOP])], semaphores=[0])
    assert run(plan("test", [g0, g1], inplace=False), launches=2).ok
    consumer["ops"][0] = NOP
    assert run(plan("test", [g0, g1], inplace=False)).races
    # a barrier of the two blocks orders them too
    producer["ops"][2] = {"name": "barrier", "barrier_id": 0, "num_threadblocks": 2}
    consumer["ops"][0] = {"name": "barrier", "barrier_id": 0, "num_threadblocks": 2}
    assert run(plan("test", [g0, g1], inplace=False), launches=2).ok
    # an unbalanced semaphore leaves the next call out of step
    producer["ops"][2] = {"name": "sem_release", "semaphore_ids": [0]}
    consumer["ops"][0] = NOP
    assert any("semaphore 0 ends at 1" in e for e in run(plan("test", [g0, g1], inplace=False)).errors)


def test_get_swaps_offsets_like_the_executor():
    # gpu 0 gets chunk 0 of gpu 1's input into its chunk 1 of scratch: the executor reads the remote at the
    # destination's offset (chunk 1) and writes locally at the source's (chunk 0)
    ops0 = [sig(0, name="rlxsignal"), wait(0, name="rlxwait"), NOP,
            op("get", src=[rem(0, 0)], dst=[loc("s", 1)], channel_ids=[0], channel_type="memory")]
    g0 = gpu(0, 2, 2, 2, [tb(0, ops0, memory=[0], remote_memory=[0])], memory=[1], remote=[(1, "i", ["memory"])])
    g1 = gpu(1, 2, 2, 2, [tb(0, [sig(0, name="rlxsignal"), wait(0, name="rlxwait")], memory=[0])], memory=[0])
    m = run_plan(parsed(plan("test", [g0, g1], inplace=False)), size=64)
    assert m.ok and m.bytes_moved == 32


def test_switch_channels_reduce_across_the_group():
    sw = {"channel_type": "switch", "buffer_type": "i", "rank_groups": [{"size": 2, "ranks": [0, 1]}]}
    gpus = []
    for r in range(2):
        peer = 1 - r
        ops = [sig(0, name="rlxsignal"), wait(0, name="rlxwait"), NOP,
               op("glres", src=[{"switch_channel_id": 0, "index": r, "size": 1}],
                  dst=[{"switch_channel_id": 0, "index": r, "size": 1}], channel_type="switch", reduce_op="sum"),
               NOP, sig(0), wait(0), NOP]
        gpus.append(gpu(r, 2, 2, 0, [tb(0, ops, memory=[0], switch=[0])], memory=[peer], switch=[sw]))
    assert run(plan("allreduce", gpus), launches=2).ok


def test_relaxed_signals_do_not_publish_writes():
    d = allgather_put()
    for g in d["gpus"]:
        ops = g["threadblocks"][0]["ops"]
        ops[5] = sig(0, name="rlxsignal")
        ops[6] = wait(0, name="rlxwait")
    r = run(d)
    assert r.ok and r.relaxed  # right values, but only relaxed signals order the put before the host's read
    assert "ordered only by relaxed signals" in r.relaxed[0]


def test_packets_carry_their_own_flags():
    d = allreduce_packets()
    r = run(d, launches=2)
    assert r.ok
    # without a double scratch buffer the second call writes packets where a peer may still read the first's
    d["use_double_scratch_buffer"] = False
    assert run(d, launches=1).ok
    d = allreduce_packets()
    d["gpus"][1]["threadblocks"][0]["ops"][0] = NOP  # gpu 1 never sends: gpu 0 spins on its packets
    r = run(d)
    assert r.deadlocked and "waits for packets (flag 1)" in r.stuck[0].reason


def test_thread_block_groups_split_ranges():
    ops = [op("copy", src=[loc("i", 0, 2)], dst=[loc("o", 0, 2)], tbg_info={"tb_id": t, "tbg_size": 2})
           for t in range(2)]
    g0 = gpu(0, 2, 2, 0, [tb(0, [ops[0]]), tb(1, [ops[1]])])
    g1 = gpu(1, 2, 2, 0, [tb(0, [NOP])])
    r = run(plan("test", [g0, g1], inplace=False), size=128)
    assert r.ok and r.bytes_moved == 128


def test_wrong_results_name_the_location_and_last_writer():
    d = allgather_put()
    d["gpus"][0]["threadblocks"][0]["ops"][3]["dst_buff"][0]["index"] = 1
    d["gpus"][0]["threadblocks"][0]["ops"][3]["src_buff"][0]["index"] = 1
    r = run(d)
    assert r.errors and "gpu 1 output byte 0 (chunk 0)" in r.errors[0]


def test_options_and_usage_errors():
    p = parsed(allgather_put())
    assert default_size(p) == 64
    for dtype in ("float16", "int32", "uint8"):
        assert run_plan(p, dtype=dtype).ok
    with pytest.raises(UsageError, match="unknown dtype"):
        run_plan(p, dtype="bf16")
    with pytest.raises(UsageError, match="refuses a call of 48 bytes"):
        run_plan(p, size=48)
    with pytest.raises(UsageError, match="launches must be >= 1"):
        run_plan(p, launches=0)
    d = run_plan(p, race_check=False).to_dict()
    assert d["ok"] and not d["race_checked"] and d["message"].startswith("OK:")
    assert "no data race" not in d["message"]


def _exchange(coll):
    """Two GPUs: alltoall (each keeps its own block, puts the peer's) or sendrecv (each puts its input to the peer)."""
    gpus = []
    for r in range(2):
        peer = 1 - r
        if coll == "alltoall":
            data = [op("copy", src=[loc("i", r)], dst=[loc("o", r)]),
                    op("put", src=[loc("i", peer)], dst=[rem(0, r)], channel_type="memory")]
            chunks = 2
        else:
            data = [op("put", src=[loc("i", 0)], dst=[rem(0, 0)], channel_type="memory")]
            chunks = 1
        ops = [sig(0, name="rlxsignal"), wait(0, name="rlxwait"), NOP, *data, NOP, sig(0), wait(0), NOP]
        gpus.append(gpu(r, chunks, chunks, 0, [tb(0, ops, memory=[0], remote_memory=[0])], memory=[peer],
                        remote=[(peer, "o", ["memory"])]))
    return plan(coll, gpus, inplace=False)


@pytest.mark.parametrize("coll", ["alltoall", "sendrecv"])
def test_alltoall_and_sendrecv_postconditions(coll):
    d = _exchange(coll)
    r = run(d, launches=2)
    assert r.ok and r.checked, r.message
    ops = d["gpus"][0]["threadblocks"][0]["ops"]
    put = next(o for o in ops if o["name"] == "put")
    put["src_buff"][0]["index"] = 1 - put["src_buff"][0]["index"] if coll == "alltoall" else 0
    if coll == "alltoall":
        assert run(d).errors
    else:
        put["dst_buff"] = []
        assert not run(d).ok
