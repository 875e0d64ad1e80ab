"""Schedule file version 2: templates + automorphisms; round trips and expands to exactly the version-1 trees."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import pytest
from conftest import cli

from forestcoll import generate, load_topology
from forestcoll.errors import ScheduleError
from forestcoll.schedule import read_schedule, schedule_from_dict, schedule_to_dict, write_schedule
from forestcoll.schedule_v2 import elements
from forestcoll.topology.model import shuffled
from forestcoll.verify import verify


def _trees(sched) -> Counter:
    return Counter((t.phase, t.root, t.chunks, t.edges) for t in sched.trees)


@pytest.mark.parametrize("spec, collective", [("dgx-a100:nodes=4", "allgather"), ("dgx-a100:nodes=2", "allreduce"),
                                              ("mi250:nodes=2", "reduce_scatter"), ("torus:dims=4x4", "allgather"),
                                              ("switch:n=12", "broadcast")])
def test_v2_round_trips_and_expands_to_the_v1_trees(spec, collective, tmp_path):
    topo = load_topology(spec)
    sched = generate(topo, collective)
    v1 = schedule_to_dict(sched, 1)
    v2 = schedule_to_dict(sched, 2)
    assert v2["version"] == 2 and "trees" not in v2 and v1["version"] == 1
    assert {k: v for k, v in v2.items() if k not in ("version", "nodes", "generators", "templates")} == \
        {k: v for k, v in v1.items() if k not in ("version", "trees")}  # same header, topology record included
    back = schedule_from_dict(json.loads(json.dumps(v2)))
    assert _trees(back) == _trees(sched)
    assert schedule_to_dict(back, 2) == v2  # round trip
    assert schedule_to_dict(back, 1)["trees"] and _trees(schedule_from_dict(schedule_to_dict(back, 1))) == _trees(sched)
    assert verify(back, topo).ok
    write_schedule(sched, str(tmp_path / "s.json"), 2)
    assert _trees(read_schedule(str(tmp_path / "s.json"))) == _trees(sched)


def test_v2_is_small_on_a_symmetric_fabric():
    sched = generate(load_topology("dgx-a100:nodes=8"), "allgather")
    v2 = schedule_to_dict(sched, 2)
    assert len(v2["templates"]) == 1 and v2["templates"][0]["images"] == "all"
    assert len(json.dumps(v2)) * 10 < len(json.dumps(schedule_to_dict(sched, 1)))


def test_auto_writes_v2_from_256_ranks_only(tmp_path):
    small = generate(load_topology("dgx-a100:nodes=2"), "allgather")
    assert schedule_to_dict(small, "auto")["version"] == 1
    big = generate(load_topology("switch:n=256"), "allgather")
    assert schedule_to_dict(big, "auto")["version"] == 2
    assert schedule_to_dict(replace(big, symmetry=None), "auto")["version"] == 1
    assert generate(load_topology("dgx-a100:nodes=2"), "allgather", symmetry=False).symmetry is None


def test_shuffled_fabric_v2_verifies():
    topo = shuffled(load_topology("dgx-a100:nodes=4"), 5)
    sched = generate(topo, "allgather")
    back = schedule_from_dict(schedule_to_dict(sched, 2))
    assert _trees(back) == _trees(sched) and verify(back, topo).ok


def test_expansion_rule_by_hand():
    # a ring of 3 ranks; one generator rotates a -> b -> c -> a; the template is a's chain a -> b -> c
    data = {
        "format": "forestcoll-schedule", "version": 2, "collective": "allgather", "k": 1, "algbw_gbps": "3",
        "ranks": ["a", "b", "c"], "nodes": ["a", "b", "c"], "generators": [[1, 2, 0]],
        "templates": [{"root": "a", "chunks": 1, "phase": "allgather",
                       "edges": [{"src": "a", "dst": "b"}, {"src": "b", "dst": "c"}], "images": "all"}],
    }
    sched = schedule_from_dict(data)
    assert [(t.root, [(e.src, e.dst) for e in t.edges]) for t in sched.trees] == [
        ("a", [("a", "b"), ("b", "c")]), ("b", [("b", "c"), ("c", "a")]), ("c", [("c", "a"), ("a", "b")])]
    assert elements([[1, 2, 0]], 3).tolist() == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    data["templates"][0]["images"] = [0, 2]
    assert [t.root for t in schedule_from_dict(data).trees] == ["a", "c"]


@pytest.mark.parametrize("change, message", [
    ({"generators": [[0, 0, 1]]}, "not a permutation"),
    ({"generators": [[1, 2]]}, "not a permutation"),
    ({"nodes": ["a", "a", "c"]}, "distinct node names"),
    ({"templates": {}}, "'templates' must be a list"),
    ({"version": 3}, "version 3"),
])
def test_bad_v2_files_are_refused(change, message):
    data = {
        "format": "forestcoll-schedule", "version": 2, "collective": "allgather", "k": 1, "algbw_gbps": "3",
        "ranks": ["a", "b", "c"], "nodes": ["a", "b", "c"], "generators": [[1, 2, 0]],
        "templates": [{"root": "a", "chunks": 1, "edges": [{"src": "a", "dst": "b"}, {"src": "b", "dst": "c"}],
                       "images": "all"}],
    }
    data.update(change)
    with pytest.raises(ScheduleError, match=message):
        schedule_from_dict(data)


def test_template_node_missing_from_nodes_is_refused():
    data = {
        "format": "forestcoll-schedule", "version": 2, "collective": "allgather", "k": 1, "algbw_gbps": "3",
        "ranks": ["a", "b"], "nodes": ["a", "b"], "generators": [[1, 0]],
        "templates": [{"root": "a", "chunks": 1, "edges": [{"src": "a", "dst": "b", "path": ["a", "x", "b"]}],
                       "images": "all"}],
    }
    with pytest.raises(ScheduleError, match="'x' is not in 'nodes'"):
        schedule_from_dict(data)


def test_cli_schedule_format(tmp_path):
    out = tmp_path / "s.json"
    code, _, err = cli("generate", "dgx-a100:nodes=4", "--schedule-format", "v2", "-o", out)
    assert code == 0, err
    assert json.loads(out.read_text())["version"] == 2
    code, text, err = cli("verify", out)
    assert code == 0 and "OK" in text, err
    for consumer in (("export", out, "--format", "msccl", "-o", tmp_path / "a.xml"),
                     ("simulate", out, "--size", "1MiB")):
        code, _, err = cli(*consumer)
        assert code == 0, err


@pytest.mark.parametrize("version", [1, 2, "auto"])
def test_written_text_is_the_dump_of_to_dict(version, tmp_path):
    # write_schedule shares one JSON object per distinct Edge between the trees (encoded once): same text as the
    # public to_dict's separate objects
    from forestcoll.fileio import dump_json

    sched = generate(load_topology("dgx-a100:nodes=2"), "allreduce")
    text = write_schedule(sched, str(tmp_path / "s.json"), version)
    assert text == dump_json(sched.to_dict(version)) == (tmp_path / "s.json").read_text()
    edges = schedule_to_dict(sched, 1)["trees"][0]["edges"] + schedule_to_dict(sched, 1)["trees"][1]["edges"]
    assert len({id(e) for e in edges}) == len(edges)  # the public object shares nothing
