"""MSCCL++ plans: the parser (every real plan, one-line errors naming file and path), the deterministic writer."""

from __future__ import annotations

import json

import pytest
from conftest import SHARED
from mscclpp_plans import allgather_put, allreduce_packets, parsed

from forestcoll.mscclpp.plan import (
    PlanError,
    executor_ops,
    parse_plan,
    plan_from_json,
    plan_stats,
    read_plan,
    write_plan,
)

REAL_DIR = SHARED / "data" / "mscclpp-plans"
REAL = sorted(REAL_DIR.glob("*.json")) if REAL_DIR.is_dir() else []


@pytest.mark.skipif(not REAL, reason="../shared/data/mscclpp-plans not available")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_plans_parse_and_round_trip(path):
    text = path.read_text()
    plan = parse_plan(text, path.name)
    assert json.loads(write_plan(plan)) == json.loads(text)  # every key kept, nothing added
    assert write_plan(parse_plan(write_plan(plan))) == write_plan(plan)
    assert plan.ngpus == len(json.loads(text)["gpus"])


def test_real_plan_count():
    if not REAL:
        pytest.skip("../shared/data/mscclpp-plans not available")
    assert len(REAL) == 21


def test_writer_is_deterministic_and_compact_option():
    p = parsed(allgather_put())
    assert write_plan(p) == write_plan(parsed(allgather_put()))
    one = write_plan(p, indent=None)
    assert "\n" not in one.strip() and json.loads(one) == json.loads(write_plan(p))


def test_stats_count_pipeline_inner_operations():
    d = allgather_put()
    d["gpus"][0]["threadblocks"][0]["ops"] = [
        {"name": "pipeline", "iter_context": {"unit_size": 64, "num_chunks": 1}, "ops": [{"name": "nop"}] * 5}]
    p = parsed(d)
    assert executor_ops(p.gpus[0].threadblocks[0]) == 6  # the executor stores the pipeline and its 5 inner operations
    s = plan_stats(p)
    assert s.ops_per_threadblock == 8 and s.op_counts["pipeline"] == 1
    assert s.gpus == 2 and s.threadblocks_per_gpu == 1 and s.memory_channels == 1
    assert plan_stats(parsed(allreduce_packets())).op_counts == {"ppkt": 2, "respkt": 2, "upkt": 2}


def _err(d, match):
    with pytest.raises(PlanError, match=match) as info:
        plan_from_json(d, "bad.json")
    msg = str(info.value)
    assert msg.startswith("bad.json: ") and "\n" not in msg
    return msg


def test_missing_top_level_key():
    d = allgather_put()
    del d["inplace"]
    _err(d, r"top level: missing 'inplace' \(the executor reads it\)")


def test_wrong_types_name_the_path():
    d = allgather_put()
    d["gpus"][1]["threadblocks"][0]["ops"][3]["src_buff"] = {"type": "o"}
    _err(d, r"gpus\[1\]\.threadblocks\[0\]\.ops\[3\]\.src_buff: expected a list, got an object")
    d = allgather_put()
    d["gpus"][0]["input_chunks"] = "1"
    _err(d, r"gpus\[0\]\.input_chunks: expected an integer, got the string '1'")
    d = allgather_put()
    d["gpus"][0]["threadblocks"][0]["ops"][3]["dst_buff"][0]["buffer_id"] = 300
    _err(d, r"dst_buff\[0\]\.buffer_id: 300 is out of range 0\.\.255")
    d = allgather_put()
    d["inplace"] = 1
    _err(d, r"inplace: expected true or false, got the number 1")


def test_bad_enumerations():
    d = allgather_put()
    d["gpus"][0]["channels"][0]["channel_type"] = "nvlink"
    _err(d, r"gpus\[0\]\.channels\[0\]\.channel_type: unknown channel type 'nvlink'; the executor knows memory, port")
    d = allgather_put()
    d["gpus"][0]["remote_buffers"][0]["type"] = "x"
    _err(d, r"remote_buffers\[0\]\.type: unknown buffer type 'x'")


def test_pipelines_need_their_context_and_do_not_nest():
    d = allgather_put()
    d["gpus"][0]["threadblocks"][0]["ops"] = [{"name": "pipeline", "ops": []}]
    _err(d, "a pipeline needs 'iter_context' and 'ops'")
    inner = {"name": "pipeline", "iter_context": {"unit_size": 16, "num_chunks": 1}, "ops": []}
    d["gpus"][0]["threadblocks"][0]["ops"] = [dict(inner, ops=[inner])]
    _err(d, "pipelines do not nest")


def test_invalid_json_and_missing_file(tmp_path):
    with pytest.raises(PlanError, match=r"^x.json: invalid JSON at line 1 column"):
        parse_plan("{", "x.json")
    with pytest.raises(Exception, match="no such plan file"):
        read_plan(tmp_path / "none.json")
    with pytest.raises(PlanError, match="expected an object, got a list"):
        parse_plan("[]", "x.json")


def test_unknown_keys_survive(tmp_path):
    d = allgather_put()
    d["comment"] = {"by": "hand"}
    d["gpus"][0]["threadblocks"][0]["ops"][3]["note"] = 1
    p = plan_from_json(d)
    assert json.loads(write_plan(p)) == d
    path = tmp_path / "p.json"
    path.write_text(write_plan(p))
    assert read_plan(path) == p
