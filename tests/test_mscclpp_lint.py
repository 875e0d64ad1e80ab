"""MSCCL++ lint: the executor's parser rules and device limits, one finding per rule, every real plan."""

from __future__ import annotations

import pytest
from mscclpp_plans import NOP, allgather_put, allreduce_packets, allreduce_rre, loc, op, parsed, rem, sig, wait
from test_mscclpp_plan import REAL

from forestcoll.mscclpp.lint import lint_plan, smallest_size

BROKEN = {"execution-files_allreduce_pipeline.json"}  # an older format the executor at 1f5f065 cannot load


@pytest.mark.skipif(not REAL, reason="../shared/data/mscclpp-plans not available")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_plans_lint(path):
    from forestcoll.mscclpp.plan import read_plan

    report = lint_plan(read_plan(path), path.name)
    if path.name in BROKEN:
        # 'buff' instead of 'buffer_type' on the switch channel, and output_chunks 0 (the size check divides by it)
        assert {f.message.split(":")[0] for f in report.errors} == {
            "switch channel with 'buff' (the key before mscclpp #579)", "0"}
        assert len(report.errors) == 8
        return
    assert report.ok, report.message
    # the only warning the real plans get: the DSL's default max_message_size (2^64 - 1) and 32-bit offsets
    assert {f.path for f in report.warnings} <= {"max_message_size", "use_double_scratch_buffer"}


def findings(d, size=None):
    return [(f.severity, f.path, f.message) for f in lint_plan(parsed(d), "t", size=size).findings]


def errors(d, size=None):
    return [(p, m) for s, p, m in findings(d, size) if s == "error"]


def test_hand_written_plans_are_clean():
    for d in (allgather_put(), allgather_put(port=True), allreduce_rre(), allreduce_packets()):
        assert findings(d) == []
    r = lint_plan(parsed(allgather_put()))
    assert r.ok and r.message == "plan: clean" and r.to_dict()["errors"] == 0


def _ops(d, gpu=0, tb=0):
    return d["gpus"][gpu]["threadblocks"][tb]["ops"]


def test_operations_per_thread_block():
    d = allgather_put()
    _ops(d).extend([NOP] * 60)
    (path, msg), = errors(d)
    assert path == "gpus[0].threadblocks[0].ops" and "68 operations" in msg and "allows 64" in msg
    d = allgather_put()
    _ops(d).append({"name": "pipeline", "iter_context": {"unit_size": 32, "num_chunks": 1}, "ops": [NOP] * 60})
    assert any("69 operations (pipeline inner operations count)" in m for _p, m in errors(d))


def test_channel_limits():
    d = allgather_put()
    d["gpus"][0]["channels"][0]["connected_to"] = [1] * 20
    d["gpus"][1]["channels"][0]["connected_to"] = [0] * 20
    d["gpus"][0]["threadblocks"][0]["channels"][0]["channel_ids"] = list(range(20))
    msgs = [m for _p, m in errors(d)]
    assert any("20 memory channels; a thread block holds at most 16" in m for m in msgs)
    d = allgather_put()
    d["gpus"][0]["channels"][0]["connected_to"] = [1] * 9
    d["gpus"][1]["channels"][0]["connected_to"] = [0] * 9
    d["gpus"][0]["threadblocks"][0]["channels"][0]["channel_ids"] = list(range(9))
    _ops(d)[0]["channel_ids"] = list(range(9))
    assert any("9 channels; an operation uses at most 8" in m for _p, m in errors(d))


def test_references():
    d = allgather_put()
    _ops(d)[2 + 1]["dst_buff"][0]["buffer_id"] = 3
    assert ("gpus[0].threadblocks[0].ops[3].dst_buff[0]",
            "buffer_id 3: the thread block lists 1 remote buffer(s) for memory access") in errors(d)
    d = allgather_put()
    _ops(d)[5]["channel_ids"] = [2]
    assert any(p == "gpus[0].threadblocks[0].ops[5].channel_ids[0]" and "holds 1 memory channel" in m
               for p, m in errors(d))
    d = allgather_put()
    _ops(d)[3]["src_buff"][0]["index"] = 2
    assert any("chunks 2..2 of gpu 0's output buffer, which has 2" in m for _p, m in errors(d))
    d = allgather_put()
    d["gpus"][0]["remote_buffers"][0]["access_channel_types"] = ["port"]
    assert any("is not registered for memory access" in m for _p, m in errors(d))


def test_unknown_operation_and_channel_types():
    d = allgather_put()
    _ops(d)[3]["name"] = "send"
    assert ("gpus[0].threadblocks[0].ops[3].name",
            "unknown operation 'send': the executor throws 'Invalid operation type'") in errors(d)
    d = allgather_put()
    _ops(d)[3]["name"] = "pws"
    assert any("pws over a memory channel" in m for _p, m in errors(d))


def test_ids_must_match_positions():
    d = allgather_put()
    d["gpus"][1]["id"] = 0
    assert any(p == "gpus[1].id" for p, _m in errors(d))
    d = allgather_put()
    d["gpus"][0]["threadblocks"][0]["id"] = 1
    assert any(p == "gpus[0].threadblocks[0].id" for p, _m in errors(d))


def test_signal_wait_balance_and_unpaired_channels():
    d = allgather_put()
    _ops(d).insert(5, sig(0))  # gpu 0 signals twice, gpu 1 waits once
    assert any("3 signal(s) per call" in m and "waits 2 time(s)" in m and "releases a wait of the next call early" in m
               for _p, m in errors(d))
    d = allgather_put()
    d["gpus"][1]["channels"] = []
    d["gpus"][1]["threadblocks"][0]["channels"] = []
    d["gpus"][1]["threadblocks"][0]["ops"] = [NOP]
    msgs = [m for _p, m in errors(d)]
    assert any("which has no partner there: nothing can signal it (hang)" in m for m in msgs)


def test_packet_operations_need_ll():
    d = allreduce_packets()
    d["protocol"] = "Simple"
    assert any("packet operation ppkt in a Simple plan" in m for _p, m in errors(d))
    d = allreduce_packets()
    d["gpus"][0]["remote_buffers"][0]["type"] = "i"
    assert any("packets into gpu 1's 'i' buffer" in m for _p, m in errors(d))


def test_executor_quirks_are_warnings():
    d = allgather_put()
    _ops(d).append({"name": "flush", "channel_ids": [0], "channel_type": "port"})
    warns = [m for s, _p, m in findings(d) if s == "warning"]
    assert any("counts the channels to flush by dst_buff" in m and "does nothing" in m for m in warns)
    d = allreduce_rre()
    _ops(d)[3]["reduce_op"] = "max"
    assert any("the executor ignores reduce_op and always sums" in m for s, _p, m in findings(d) if s == "warning")
    d = allreduce_rre()
    _ops(d).insert(6, op("get", src=[rem(0, 0)], dst=[loc("s", 1)], channel_ids=[0], channel_type="memory"))
    d["gpus"][0]["scratch_chunks"] = 2
    d["gpus"][0]["remote_buffers"][0]["type"] = "s"
    d["gpus"][1]["scratch_chunks"] = 2
    assert any("swaps the two offsets" in m for s, _p, m in findings(d) if s == "warning")


def test_barriers_and_semaphores():
    d = allgather_put()
    _ops(d).append({"name": "barrier", "barrier_id": 20, "num_threadblocks": 2})
    msgs = [m for _p, m in errors(d)]
    assert any("the executor has 16 barriers" in m for m in msgs)
    assert any("waits for 2 thread blocks but tbs [0] use it" in m for m in msgs)
    d = allgather_put()
    _ops(d).append({"name": "sem_acquire", "semaphore_ids": [0]})
    assert any("semaphore 0 does not exist (gpu 0 declares 0)" in m for _p, m in errors(d))


def test_size_dependent_rules():
    d = allgather_put()
    assert smallest_size(parsed(d)) == 32
    assert any("are not multiples of the alignment 16" in m for _p, m in errors(d, size=48))
    d["max_message_size"] = 64
    assert any("outside the plan's range 0..64" in m for _p, m in errors(d, size=128))
    d = allgather_put()
    _ops(d).append({"name": "pipeline", "iter_context": {"unit_size": 16, "num_chunks": 1}, "ops": [NOP]})
    assert any("iterations at" in m and "16 bits" in m for _p, m in errors(d, size=(1 << 22)))


def test_smallest_size_of_many_chunks():
    d = allgather_put()
    for g in d["gpus"]:  # 2 x 2083 output chunks: past the scan of 4096 alignment units
        g["input_chunks"], g["output_chunks"] = 2083, 4166
    assert smallest_size(parsed(d)) == 16 * 4166
    assert not [m for _p, m in errors(d) if "no message size splits" in m]


def test_chunk_counts():
    d = allgather_put()
    d["gpus"][0]["output_chunks"] = 3
    assert any("input:output = 1:2" in m for _p, m in errors(d))
    d = allgather_put()
    d["gpus"][0]["output_chunks"] = 0
    assert ("gpus[0].output_chunks", "0: the executor's message-size check divides by it (the call crashes)") in errors(d)


def test_memory_channels_across_nodes():
    d = allgather_put()
    rep = lint_plan(parsed(d), ranks_per_node=1)
    assert any("memory channel to gpu 1 in another node" in f.message for f in rep.errors)
    assert lint_plan(parsed(d), ranks_per_node=2).ok


def test_too_many_thread_blocks_is_a_warning():
    d = allgather_put()
    tbs = d["gpus"][0]["threadblocks"]
    tbs += [{"id": i, "ops": [NOP], "channels": []} for i in range(1, 120)]
    rep = lint_plan(parsed(d))
    assert rep.ok and any("more than a 104-SM GPU holds at once" in f.message for f in rep.warnings)


def test_waits_and_unused_ops_do_not_crash_lint():
    d = allgather_put()
    _ops(d).append(wait(0, ctype="switch"))
    assert any("works on memory or port channels" in m for _p, m in errors(d))
