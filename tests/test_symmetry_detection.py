"""Symmetry found, not declared: bliss + a free subgroup, on built-ins and on shuffled, renamed fabrics."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forestcoll import generate, load_topology
from forestcoll.bound.automorphisms import automorphism_orbits, fabric_symmetry, usable_symmetries
from forestcoll.bound.optimal import optimal_bound
from forestcoll.graph.symmetry import (
    canonical_order,
    colour_refinement,
    detect_automorphisms,
    free_subgroup,
    group_elements,
    orbit_cycles,
    orbits,
)
from forestcoll.topology import Link, Node, make_topology
from forestcoll.topology.model import shuffled
from forestcoll.verify import verify

BUILTINS = ["dgx-a100:nodes=4", "dgx-h100:nodes=4", "hgx-h100:nodes=4", "hgx-h100:nodes=2,nics=4", "mi300x:nodes=4",
            "mi250:nodes=2", "dgx-1:nodes=2", "torus:dims=4x4", "hypercube:dim=4", "ring:n=12", "switch:n=16",
            "hetero:dgx-a100=2,dgx-h100=2"]
# where the heuristic finds a smaller free group than the built-in declares (2 rank orbits instead of 1); the
# declared generators are then kept
WEAKER = {"torus:dims=4x4", "hypercube:dim=4"}


def _compute_orbits(topo, gens) -> int:
    orbit = orbits(len(topo.nodes), list(gens))
    return len({orbit[i] for i in range(len(topo.nodes)) if topo.is_compute[i]})


def _is_automorphism(topo, perm) -> bool:
    arcs = {(u, v): bw for u, v, bw in topo.arcs}
    return (all(topo.is_compute[perm[i]] == topo.is_compute[i] for i in range(len(perm)))
            and all(arcs.get((perm[u], perm[v])) == bw for (u, v), bw in arcs.items()))


@pytest.mark.parametrize("spec", BUILTINS)
def test_detection_finds_the_declared_group_on_builtins(spec):
    topo = load_topology(spec)
    found = fabric_symmetry(topo)
    n = len(topo.nodes)
    assert all(_is_automorphism(topo, p) for p in found.full + found.free)
    # every declared generator maps each node within its detected orbit: the detected group contains their orbits
    full_orbit = orbits(n, list(found.full))
    for p in topo.symmetries:
        assert all(full_orbit[p[i]] == full_orbit[i] for i in range(n))
    # the free subgroup acts freely on the ranks and leaves no more rank orbits than the declared generators
    elems = np.asarray(group_elements(list(found.free), n, 100_000))
    compute = np.flatnonzero(topo.is_compute)
    assert not (elems[1:][:, compute] == compute).any()
    if spec not in WEAKER:
        assert found.free_orbits <= _compute_orbits(topo, topo.symmetries)
    assert _compute_orbits(topo, usable_symmetries(topo)) <= _compute_orbits(topo, topo.symmetries)


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=4", "hgx-h100:nodes=2", "mi300x:nodes=4", "switch:n=12"])
def test_the_search_does_not_depend_on_node_order_or_names(spec):
    topo = load_topology(spec)
    sizes = set()
    for seed in range(3):
        s = shuffled(topo, seed)
        n = len(s.nodes)
        new = canonical_order(n, s.is_compute, s.arcs)
        sizes.add(tuple(sorted((new[u], new[v], bw) for u, v, bw in s.arcs)))
        found = fabric_symmetry(s)
        assert found.free_orbits == 1
    assert len(sizes) == 1  # one canonical numbering for every shuffle


@pytest.mark.parametrize("spec, collective", [("dgx-a100:nodes=4", "allgather"), ("hgx-h100:nodes=2", "allreduce"),
                                              ("mi250:nodes=2", "allgather"), ("torus:dims=4x4", "reduce_scatter")])
def test_shuffled_renamed_fabrics_give_the_same_bound_and_a_verified_schedule(spec, collective):
    topo = load_topology(spec)
    s = shuffled(topo, 7)
    assert not s.symmetries and set(s.compute_nodes).isdisjoint(topo.compute_nodes)
    assert optimal_bound(s, collective).algbw == optimal_bound(topo, collective).algbw
    sched = generate(s, collective)
    report = verify(sched, s)
    assert report.ok and sched.optimal
    assert sched.algbw == generate(topo, collective).algbw


def test_detection_pays_on_a_plain_star():
    s = shuffled(load_topology("switch:n=64"), 1)
    gens = usable_symmetries(s)
    assert _compute_orbits(s, gens) == 1
    sched = generate(s, "allgather")
    assert sched.stats["allgather.split_group_order"] == 64


def test_asymmetric_fabric_degrades_to_no_symmetry():
    nodes = [Node(f"c{i}", "compute") for i in range(10)]
    links = []
    for i in range(10):
        bw = Fraction(10 + i)
        links += [Link(f"c{i}", f"c{(i + 1) % 10}", bw), Link(f"c{(i + 1) % 10}", f"c{i}", bw)]
    topo = make_topology(nodes, links, "asymmetric ring")
    assert usable_symmetries(topo) == ()
    assert fabric_symmetry(topo).free == ()
    sched = generate(topo, "allgather")
    assert verify(sched, topo).ok and sched.optimal


def test_free_subgroup_without_generators_is_trivial():
    assert free_subgroup(4, [True] * 4, []) == []


@st.composite
def boxed_fabrics(draw):
    """m identical random boxes (2-3 ranks, 0-1 switches, random bandwidths), each box's first rank on a hub."""
    per = draw(st.integers(2, 3))
    sw = draw(st.integers(0, 1))
    boxes = draw(st.integers(4, 5))
    bws = st.integers(1, 9).map(Fraction)
    inner = []
    for i in range(per):  # a ring through the box, sometimes via its switch
        a, b = f"g{i}", f"g{(i + 1) % per}"
        bw = draw(bws)
        if sw and draw(st.booleans()):
            inner += [(a, "s", bw), ("s", a, bw), ("s", b, bw), (b, "s", bw)]
        else:
            inner += [(a, b, bw), (b, a, bw)]
    up = draw(bws)
    nodes, links = [Node("hub", "switch")], []
    for m in range(boxes):
        nodes += [Node(f"b{m}.g{i}", "compute") for i in range(per)]
        if sw:
            nodes.append(Node(f"b{m}.s", "switch"))
        links += [Link(f"b{m}.{a}", f"b{m}.{b}", bw) for a, b, bw in inner]
        links += [Link(f"b{m}.g0", "hub", up), Link("hub", f"b{m}.g0", up)]
    used = {lk.src for lk in links}
    nodes = [nd for nd in nodes if nd.name in used]
    return make_topology(nodes, links, "boxes"), draw(st.integers(0, 1000))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boxed_fabrics())
def test_random_symmetric_fabrics_relabelled(case):
    topo, seed = case
    s = shuffled(topo, seed)
    plain = optimal_bound(topo, "allgather", symmetry=False).algbw
    assert optimal_bound(s, "allgather").algbw == plain
    sched = generate(s, "allgather")
    assert verify(sched, s).ok
    assert sched.algbw == generate(topo, "allgather", symmetry=False).algbw


# ----- one search per fabric: orbits, colour refinement, the skipped free-subgroup search ---------------------


def _orbits_by_union_find(n, gens):
    parent = list(range(n))

    def root(i):
        while parent[i] != i:
            i = parent[i]
        return i

    for p in gens:
        for i, j in enumerate(p):
            a, b = root(i), root(j)
            parent[max(a, b)] = min(a, b)
    return [root(i) for i in range(n)]  # roots are each set's smallest member: the smaller root always wins


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.permutations(range(n)), max_size=4))))
def test_orbits_are_the_components_with_smallest_member_ids(case):
    n, gens = case
    gens = [tuple(p) for p in gens]
    assert orbits(n, gens) == _orbits_by_union_find(n, gens)
    # the permutation whose cycles are those orbits spans the same orbits
    assert orbits(n, [orbit_cycles(orbits(n, gens))]) == orbits(n, gens)


def test_orbits_of_long_cycles_and_many_generators():
    n = 5000
    shift = tuple((i + 1) % n for i in range(n))
    assert orbits(n, [shift]) == [0] * n
    swaps = [tuple(j + 1 if j == i else j - 1 if j == i + 1 else j for j in range(n)) for i in range(0, n - 1, 2)]
    assert orbits(n, swaps) == [i - i % 2 for i in range(n)]


@pytest.mark.parametrize("spec", ["mi250:nodes=2", "dgx-1:nodes=2", "hetero:dgx-a100=2,dgx-h100=2", "torus:dims=3x4"])
def test_automorphism_orbits_are_the_whole_groups_orbits(spec):
    """From the declared generators and colour refinement (mi250), from bliss (the others): bliss's orbits always,
    in any numbering."""
    topo = load_topology(spec)
    n = len(topo.nodes)
    bliss = orbits(n, detect_automorphisms(n, topo.is_compute, topo.arcs))
    assert list(automorphism_orbits(topo)) == bliss
    s = shuffled(topo, 3)
    assert list(automorphism_orbits(s)) == orbits(n, detect_automorphisms(n, s.is_compute, s.arcs))
    classes = colour_refinement(n, topo.is_compute, topo.arcs)
    assert all(classes[i] == classes[j] for i, j in enumerate(bliss))  # orbits lie inside classes


def test_colour_refinement_separates_what_it_must_and_no_more():
    # a directed 6-ring with one heavier arc: every node is told apart (no automorphism but the identity)
    nodes = [Node(f"c{i}", "compute") for i in range(6)]
    links = [Link(f"c{i}", f"c{(i + 1) % 6}", Fraction(2 if i == 0 else 1)) for i in range(6)]
    topo = make_topology(nodes, links, "ring")
    assert len(set(colour_refinement(6, topo.is_compute, topo.arcs))) == 6
    # two disjoint triangles vs a hexagon are refinement-equivalent: one class (refinement is not a search)
    tri = [(a, b, Fraction(1)) for a, b in [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]]
    tri += [(b, a, bw) for a, b, bw in tri]
    assert colour_refinement(6, [True] * 6, tri) == [0] * 6


@pytest.mark.parametrize("spec", ["mi250:nodes=2", "mi250:nodes=3", "dgx-1:nodes=2", "hetero:dgx-a100=2,dgx-h100=2"])
def test_skipping_the_free_subgroup_search_changes_nothing(spec):
    """usable_symmetries skips the free-subgroup search when the whole group leaves no fewer rank orbits than the
    declared generators; the search, when run anyway, would have kept the declared generators."""
    topo = load_topology(spec)
    declared = _compute_orbits(topo, topo.symmetries)
    found = fabric_symmetry(topo)
    expected = found.free if found.free_orbits < declared else tuple(topo.symmetries)
    assert usable_symmetries(topo) == expected
    assert found.full_orbits == _compute_orbits(topo, [orbit_cycles(automorphism_orbits(topo))])


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 7).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.permutations(range(n)), min_size=1, max_size=3),
    st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))))
def test_free_order_is_the_order_of_a_free_group_else_none(case):
    """free_subgroup's test (the group's order when it acts freely on the chosen points) against the whole group
    enumerated."""
    from forestcoll.graph.symmetry import _free_order

    n, gens, points = case
    compute = np.asarray(sorted(points), dtype=np.int64)
    elems = group_elements([tuple(g) for g in gens], n, 10_000)
    free = not any((np.asarray(e)[compute] == compute).any() for e in elems[1:])
    got = _free_order([np.asarray(g, dtype=np.int64) for g in gens], n, compute)
    assert got == (len(elems) if free else None)
