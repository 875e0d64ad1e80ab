"""verify on a version-2 schedule read without expanding: orbit by orbit, the same verdict as tree by tree."""

from __future__ import annotations

import copy
import importlib

import pytest
from conftest import cli

from forestcoll import generate, load_topology
from forestcoll.schedule import schedule_from_dict, schedule_to_dict, write_schedule
from forestcoll.topology.model import shuffled
from forestcoll.verify import verify

verify_module = importlib.import_module("forestcoll.verify")  # the module (forestcoll.verify is also the function)


def _both(data, topo):
    """(report of the expanded trees, report orbit by orbit) for one version-2 object."""
    expanded = verify(schedule_from_dict(copy.deepcopy(data)), topo)
    lazy = schedule_from_dict(copy.deepcopy(data), expand=False)
    assert lazy.templates is not None and not lazy.trees
    return expanded, verify(lazy, topo)


@pytest.mark.parametrize("spec, collective", [
    ("dgx-a100:nodes=4", "allgather"), ("dgx-a100:nodes=2", "allreduce"), ("mi250:nodes=2", "reduce_scatter"),
    ("torus:dims=4x4", "allgather"), ("switch:n=12", "broadcast"), ("hgx-h100:nodes=2", "allreduce"),
])
def test_orbit_check_gives_the_tree_by_tree_report(spec, collective, monkeypatch):
    topo = load_topology(spec)
    data = schedule_to_dict(generate(topo, collective), 2)
    expanded, _ = _both(data, topo)

    def no_expansion(schedule):
        raise AssertionError("the orbit check expanded the schedule")

    monkeypatch.setattr(verify_module, "_expanded", no_expansion)
    lazy = verify(schedule_from_dict(copy.deepcopy(data), expand=False), topo)
    assert lazy.ok and lazy.to_dict() == expanded.to_dict()  # loads, rates, busiest links, certificate


def test_shuffled_fabric_orbit_check():
    topo = shuffled(load_topology("dgx-a100:nodes=4"), 5)
    expanded, lazy = _both(schedule_to_dict(generate(topo, "allgather"), 2), topo)
    assert lazy.ok and lazy.to_dict() == expanded.to_dict()


def _data():
    topo = load_topology("dgx-a100:nodes=2")
    data = schedule_to_dict(generate(topo, "allgather"), 2)
    assert data["templates"][0]["images"] == "all" and len(data["generators"]) >= 1
    return topo, data


def _swap(nodes: list[str], x: str, y: str) -> list[int]:
    """The permutation of the node indices that exchanges nodes x and y."""
    perm = list(range(len(nodes)))
    a, b = nodes.index(x), nodes.index(y)
    perm[a], perm[b] = b, a
    return perm


def test_a_generator_that_is_no_automorphism_is_caught():
    topo, data = _data()
    nodes = data["nodes"]
    # swap two GPUs of one box only (their NICs stay): a permutation of the nodes, not an automorphism
    data["generators"] = [_swap(nodes, "n0.gpu0", "n0.gpu1")]
    group = verify_module._Orbits(tuple(nodes), data["generators"], topo)
    assert group.problem is not None and "not an automorphism" in group.problem
    expanded, lazy = _both(data, topo)  # falls back to the tree-by-tree check: same (failing) verdict
    assert not lazy.ok and lazy.to_dict() == expanded.to_dict()


def test_a_generator_mapping_a_rank_to_a_switch_is_caught():
    topo, data = _data()
    nodes = data["nodes"]
    group = verify_module._Orbits(tuple(nodes), [_swap(nodes, "n0.gpu0", "n0.nvswitch")], topo)
    assert group.problem is not None and "not a compute node" in group.problem


def test_wrong_chunks_and_extra_templates_are_caught():
    topo, data = _data()
    data["templates"][0]["chunks"] += 1
    expanded, lazy = _both(data, topo)
    assert not lazy.ok and lazy.errors == expanded.errors
    topo, data = _data()
    data["templates"].append(copy.deepcopy(data["templates"][0]))  # every root twice: chunks and loads double
    expanded, lazy = _both(data, topo)
    assert not lazy.ok and lazy.to_dict() == expanded.to_dict()
    topo, data = _data()
    data["templates"][0]["images"] = [0, 1]  # two images only
    expanded, lazy = _both(data, topo)
    assert not lazy.ok and lazy.errors == expanded.errors


def test_a_template_that_does_not_span_is_caught():
    topo, data = _data()
    data["templates"][0]["edges"].pop()
    expanded, lazy = _both(data, topo)
    assert not expanded.ok and not lazy.ok
    assert any("does not span" in e for e in lazy.errors)


def test_cli_verify_reads_v2_per_orbit(tmp_path):
    topo = load_topology("dgx-a100:nodes=4")
    sched = generate(topo, "allgather")
    for version in (1, 2):
        write_schedule(sched, str(tmp_path / f"v{version}.json"), version)
    outs = []
    for version in (1, 2):
        code, text, err = cli("verify", tmp_path / f"v{version}.json")
        assert code == 0, err
        outs.append([line for line in text.splitlines() if not line.startswith("schedule")])
    assert outs[0] == outs[1] and any("OK, optimal" in line for line in outs[1])
