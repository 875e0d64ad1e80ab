"""The verifier catches every kind of broken schedule."""

import dataclasses
from fractions import Fraction

import pytest

from forestcoll import generate, load_topology, verify
from forestcoll.schedule import Edge, ScheduleTree


@pytest.fixture(scope="module")
def good():
    topo = load_topology("dgx-a100:nodes=2")
    return topo, generate(topo, "allgather", k=1)


def replace_tree(sched, i, tree):
    trees = list(sched.trees)
    trees[i] = tree
    return dataclasses.replace(sched, trees=tuple(trees))


def test_good_schedule_passes(good):
    topo, sched = good
    report = verify(sched, topo)
    assert report.ok and report.algbw == Fraction(2400, 7)
    assert not report.certified_optimal and report.efficiency == Fraction(2400, 7) / Fraction(1040, 3)


def test_missing_edge_is_caught(good):
    topo, sched = good
    t = sched.trees[0]
    bad = replace_tree(sched, 0, dataclasses.replace(t, edges=t.edges[:-1]))
    report = verify(bad, topo)
    assert not report.ok and any("does not span" in e for e in report.errors)


def test_fake_link_is_caught(good):
    topo, sched = good
    t = sched.trees[0]
    e = t.edges[0]
    edges = (Edge(e.src, e.dst, (e.src, e.dst)),) + t.edges[1:]  # skips the NVSwitch
    report = verify(replace_tree(sched, 0, dataclasses.replace(t, edges=edges)), topo)
    assert not report.ok and any("no link" in x for x in report.errors)


def test_path_through_a_gpu_is_caught():
    topo = load_topology("ring:n=4")
    sched = generate(topo, "allgather", k=1)
    t = sched.trees[0]
    e = t.edges[0]
    edges = (Edge(e.src, e.dst, (e.src, "r2", e.dst)),) + t.edges[1:]
    report = verify(replace_tree(sched, 0, dataclasses.replace(t, edges=edges)), topo)
    assert not report.ok and any("compute node" in x for x in report.errors)


def test_wrong_chunks_are_caught(good):
    topo, sched = good
    t = sched.trees[0]
    report = verify(replace_tree(sched, 0, dataclasses.replace(t, chunks=2)), topo)
    assert any("expected k=1" in e for e in report.errors)


def test_double_parent_is_caught(good):
    topo, sched = good
    t = sched.trees[0]
    edges = t.edges + (t.edges[-1],)
    report = verify(replace_tree(sched, 0, dataclasses.replace(t, edges=edges)), topo)
    assert any("receives twice" in e for e in report.errors)


def test_overclaimed_algbw_is_caught(good):
    topo, sched = good
    report = verify(dataclasses.replace(sched, algbw=Fraction(400)), topo)
    assert not report.ok and any("link loads give" in e for e in report.errors)


def test_wrong_ranks_are_caught(good):
    topo, sched = good
    ranks = list(sched.ranks)
    ranks[0], ranks[1] = ranks[1], ranks[0]
    report = verify(dataclasses.replace(sched, ranks=tuple(ranks)), topo)
    assert any("different order" in e for e in report.errors)


def test_schedule_for_another_topology_is_caught(good):
    _, sched = good
    report = verify(sched, load_topology("dgx-a100:nodes=1"))
    assert not report.ok


def test_wrong_direction_phase_is_caught(good):
    topo, sched = good
    t = sched.trees[0]
    bad = replace_tree(sched, 0, ScheduleTree(t.root, t.chunks, "reduce_scatter", t.edges))
    assert not verify(bad, topo).ok


def test_false_bound_claim_is_caught(good):
    topo, sched = good
    report = verify(dataclasses.replace(sched, bound_algbw=Fraction(500)), topo)
    assert any("bottleneck cut proves" in e for e in report.errors)
