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


def test_tree_heights_match_height_on_generated_and_odd_trees():
    from forestcoll import generate, load_topology
    from forestcoll.schedule import Edge, ScheduleTree, tree_heights

    for spec, collective in (("dgx-a100:nodes=2", "allreduce"), ("torus:dims=3x3", "reduce_scatter"),
                             ("mi250:nodes=1", "allgather")):
        trees = generate(load_topology(spec), collective).trees
        assert tree_heights(trees) == [t.height() for t in trees]
    chain = ScheduleTree("a", 1, "allgather", (Edge("a", "b", ("a", "b")), Edge("b", "c", ("b", "c"))))
    into = ScheduleTree("c", 1, "reduce_scatter", (Edge("a", "b", ("a", "b")), Edge("b", "c", ("b", "c"))))
    lone = ScheduleTree("a", 1, "allgather", ())
    assert tree_heights([chain, into, lone]) == [2, 2, 0]
