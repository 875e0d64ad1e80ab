import json

import pytest

from forestcoll import generate, load_topology
from forestcoll.errors import ScheduleError
from forestcoll.schedule import read_schedule, schedule_from_dict, schedule_to_dict


def test_json_round_trip(tmp_path):
    topo = load_topology("mi250:nodes=2")
    sched = generate(topo, "allreduce", k=2)
    data = schedule_to_dict(sched)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    back = read_schedule(str(path))
    assert schedule_to_dict(back) == data
    assert data["format"] == "forestcoll-schedule" and data["version"] == 1
    assert [p["name"] for p in data["phases"]] == ["reduce_scatter", "allgather"]
    tree = data["trees"][0]
    assert set(tree) == {"root", "chunks", "phase", "direction", "edges"}
    assert set(tree["edges"][0]) == {"src", "dst", "path"}


def test_minimal_allgather_file_is_accepted():
    data = {
        "collective": "allgather", "k": 1, "algbw_gbps": "100", "ranks": ["a", "b"],
        "trees": [{"root": "a", "chunks": 1, "edges": [{"src": "a", "dst": "b", "path": ["a", "b"]}]},
                  {"root": "b", "chunks": 1, "edges": [{"src": "b", "dst": "a"}]}],
    }
    sched = schedule_from_dict(data)
    assert sched.phases[0].name == "allgather" and sched.trees[1].edges[0].path == ("b", "a")


@pytest.mark.parametrize(
    "data, message",
    [
        ([], "expected a JSON object"),
        ({"format": "other"}, "not a forestcoll schedule"),
        ({"version": 9}, "version 9"),
        ({"collective": "gather"}, "unknown collective"),
        ({"collective": "allgather", "k": 0}, "'k' must be >= 1"),
        ({"collective": "allgather", "k": "2"}, "'k' must be int"),
        ({"collective": "allgather", "k": 1, "ranks": ["a"], "algbw_gbps": "x"}, "not a number"),
        ({"collective": "allgather", "k": 1, "ranks": ["a"], "algbw_gbps": 1, "trees": [{"root": "a", "chunks": 0, "edges": []}]}, "'chunks' must be >= 1"),
        ({"collective": "allreduce", "k": 1, "ranks": ["a"], "algbw_gbps": 1, "trees": []}, "needs 'phases'"),
    ],
)
def test_malformed_schedules(data, message):
    with pytest.raises(ScheduleError, match=message):
        schedule_from_dict(data)
