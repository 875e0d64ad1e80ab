"""End to end: every generated schedule verifies, at exactly the bound (or the fixed-k optimum)."""

from fractions import Fraction

import pytest
from conftest import fabrics, refused_for_imbalance, symmetric_fabrics
from hypothesis import given
from hypothesis import strategies as st

from forestcoll import fixed_k_algbw, generate, load_topology, optimal_bound, verify
from forestcoll.errors import UsageError


def assert_verified_at(sched, topo, expected):
    report = verify(sched, topo)
    assert report.ok, report.errors[:3]
    assert report.algbw == sched.algbw == expected
    return report


@pytest.mark.parametrize(
    "spec, algbw",
    [
        ("dgx-a100:nodes=1", Fraction(2400, 7)),
        ("dgx-a100:nodes=2", Fraction(1040, 3)),
        ("dgx-a100:nodes=4", Fraction(800, 3)),
        ("mi250:nodes=1", Fraction(2400, 7)),
        ("mi250:nodes=2", Fraction(5312, 15)),
    ],
)
def test_reference_topologies_reach_the_reference_bound(spec, algbw):
    topo = load_topology(spec)
    sched = generate(topo, "allgather")
    report = assert_verified_at(sched, topo, algbw)
    assert report.certified_optimal
    assert all(sum(t.chunks for t in sched.trees if t.root == r) == sched.k for r in topo.compute_nodes)


@pytest.mark.parametrize(
    "spec, k, algbw",
    [("dgx-a100:nodes=2", 1, Fraction(2400, 7)), ("mi250:nodes=2", 1, Fraction(320)), ("dgx-a100:nodes=4", 1, Fraction(800, 3)), ("mi250:nodes=2", 5, None)],
)
def test_fixed_k_schedules_reach_the_fixed_k_optimum(spec, k, algbw):
    topo = load_topology(spec)
    sched = generate(topo, "allgather", k=k)
    expected = fixed_k_algbw(topo, "allgather", k)
    if algbw is not None:
        assert expected == algbw
    assert sched.k == k
    assert_verified_at(sched, topo, expected)


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter", "allreduce", "broadcast", "reduce"])
@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "mi250:nodes=2", "torus:dims=3x3", "switch:n=5,bw=20.6"])
def test_every_collective_verifies_at_its_bound(spec, collective):
    topo = load_topology(spec)
    sched = generate(topo, collective)
    bound = optimal_bound(topo, collective)
    report = assert_verified_at(sched, topo, bound.algbw)
    assert report.certified_optimal
    directions = {t.direction for t in sched.trees}
    assert directions == {"in", "out"} if collective == "allreduce" else len(directions) == 1


def test_in_trees_are_written_leaves_first():
    topo = load_topology("dgx-a100:nodes=2")
    sched = generate(topo, "reduce_scatter")
    for tree in sched.trees:
        sent = set()
        for e in tree.edges:
            # a node sends its partial sum only after everything below it has arrived
            assert e.src not in sent
            sent.add(e.src)
            children_of_src = {x.src for x in tree.edges if x.dst == e.src}
            assert children_of_src <= {x.src for x in tree.edges[: tree.edges.index(e)]}


@given(fabrics(), st.sampled_from(["allgather", "reduce_scatter", "allreduce", "broadcast"]))
def test_random_fabrics_verify_at_the_bound(topo, collective):
    try:
        sched = generate(topo, collective)
    except Exception as exc:  # only a switch that can send more than it receives may be refused
        assert refused_for_imbalance(exc), exc
        assert any(p.unbalanced for p in optimal_bound(topo, collective).phases)
        return
    assert_verified_at(sched, topo, optimal_bound(topo, collective).algbw)


@given(fabrics(max_compute=4, max_switches=2, symmetric_links=True), st.integers(1, 3))
def test_random_fabrics_fixed_k(topo, k):
    sched = generate(topo, "allgather", k=k)
    assert_verified_at(sched, topo, fixed_k_algbw(topo, "allgather", k))


@given(fabrics(symmetric_links=True), st.sampled_from(["allgather", "allreduce", "reduce"]))
def test_random_two_way_fabrics_are_never_refused(topo, collective):
    sched = generate(topo, collective)
    assert_verified_at(sched, topo, optimal_bound(topo, collective).algbw)


@given(symmetric_fabrics())
def test_symmetry_changes_speed_not_results(topo):
    a = generate(topo, "allgather", symmetry=True)
    b = generate(topo, "allgather", symmetry=False)
    assert a.algbw == b.algbw == a.bound_algbw
    assert_verified_at(a, topo, a.algbw)
    assert_verified_at(b, topo, b.algbw)


def test_symmetric_packing_gives_rotated_copies():
    topo = load_topology("dgx-a100:nodes=4")
    sched = generate(topo, "allgather")
    assert sched.stats["allgather.pack_symmetric_trees"] == len(sched.trees)
    heights = {t.height() for t in sched.trees}
    assert len(heights) == 1  # every tree is an image of one base tree


def test_generation_is_deterministic():
    from forestcoll.schedule import schedule_to_dict

    topo = load_topology("mi250:nodes=2")
    assert schedule_to_dict(generate(topo, "allreduce")) == schedule_to_dict(generate(topo, "allreduce"))


def test_bad_parameters():
    topo = load_topology("ring:n=4")
    with pytest.raises(UsageError, match="k must be >= 1"):
        generate(topo, "allgather", k=0)
    with pytest.raises(UsageError, match="unknown collective"):
        generate(topo, "gather")
    with pytest.raises(UsageError, match="more than 2 trees"):
        generate(load_topology("mi250:nodes=2"), "allgather", max_k=2)
