"""All-to-all bound: equal to a plain multi-commodity LP on random fabrics, closed forms, certificates, symmetry."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from conftest import fabrics, symmetric_fabrics
from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll.alltoall import alltoall_bound
from forestcoll.alltoall.certificate import cut_ratio, length_bound
from forestcoll.alltoall.exact import solve_exact
from forestcoll.alltoall.reduction import ArcIndex, reduce_topology
from forestcoll.topology import Link, Node, load_topology, make_topology


def plain_lp(topo) -> float:
    """lambda* by the textbook LP: one commodity per ordered pair, flow variables on every arc (no aggregation,
    no symmetry), solved by scipy's HiGHS."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_array

    n = len(topo.nodes)
    arcs = topo.arcs
    m = len(arcs)
    ranks = [i for i in range(n) if topo.is_compute[i]]
    pairs = [(s, t) for s in ranks for t in ranks if s != t]
    nv = 1 + len(pairs) * m
    rows, cols, vals = [], [], []
    row = 0
    for p, (s, t) in enumerate(pairs):
        for v in range(n):
            for e, (a, b, _) in enumerate(arcs):
                if a == v:
                    rows.append(row), cols.append(1 + p * m + e), vals.append(1.0)
                if b == v:
                    rows.append(row), cols.append(1 + p * m + e), vals.append(-1.0)
            if v in (s, t):
                rows.append(row), cols.append(0), vals.append(-1.0 if v == s else 1.0)
            row += 1
    a_eq = coo_array((vals, (rows, cols)), shape=(row, nv))
    urows, ucols = [], []
    for p in range(len(pairs)):
        for e in range(m):
            urows.append(e), ucols.append(1 + p * m + e)
    a_ub = coo_array((np.ones(len(urows)), (urows, ucols)), shape=(m, nv))
    cost = np.zeros(nv)
    cost[0] = -1
    res = linprog(cost, A_ub=a_ub, b_ub=[float(bw) for _, _, bw in arcs], A_eq=a_eq, b_eq=np.zeros(row), method="highs")
    assert res.status == 0, res.message
    return float(res.x[0])


@settings(max_examples=40, deadline=None)
@given(fabrics(max_compute=4, max_switches=2))
def test_bound_equals_plain_multicommodity_lp(topo):
    b = alltoall_bound(topo)
    assert b.ok, b.message
    want = plain_lp(topo) * topo.num_compute
    assert b.lower is not None and b.upper is not None
    assert float(b.lower) <= want * (1 + 1e-7) and float(b.upper) >= want * (1 - 1e-7)
    assert b.certified, b.message
    assert math.isclose(float(b.algbw), want, rel_tol=1e-7)


@settings(max_examples=25, deadline=None)
@given(symmetric_fabrics())
def test_symmetry_changes_nothing(topo):
    with_sym = alltoall_bound(topo)
    without = alltoall_bound(topo, symmetry=False)
    assert with_sym.certified and without.certified
    assert with_sym.algbw == without.algbw
    assert without.symmetry["source_orbits"] == topo.num_compute


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7])
def test_fully_connected(n):
    # every rank sends size/N to each of N-1 peers over its own link of b: time (size/N)/b, algbw N*b
    b = alltoall_bound(load_topology(f"fully-connected:n={n}"))
    assert b.certified and b.algbw == 100 * n
    assert b.bottleneck.cut_tight


@pytest.mark.parametrize("n", [2, 3, 4, 6, 9])
def test_single_switch(n):
    # a rank's uplink b carries (N-1) pair demands: lambda = b/(N-1), algbw = N b/(N-1)
    b = alltoall_bound(load_topology(f"switch:n={n}"))
    assert b.certified and b.algbw == Fraction(100 * n, n - 1)


def test_star_with_unequal_up_and_down_links():
    nodes = [Node(f"h{i}", "compute") for i in range(5)] + [Node("sw", "switch")]
    links = [Link(f"h{i}", "sw", Fraction(30)) for i in range(5)] + [Link("sw", f"h{i}", Fraction(20)) for i in range(5)]
    b = alltoall_bound(make_topology(nodes, links, "star"))
    assert b.certified and b.algbw == Fraction(5 * 20, 4)


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 11])
def test_uniform_bidirectional_ring(n):
    # shortest paths, antipodal pairs split both ways: sum of distances from a rank is n^2/4 (even) or
    # (n^2-1)/4 (odd); 2n links of b carry n times that: lambda = 8b/n^2 or 8b/(n^2-1); equals the half-ring cut
    b = alltoall_bound(load_topology(f"ring:n={n}"))
    lam = Fraction(800, n * n) if n % 2 == 0 else Fraction(800, n * n - 1)
    assert b.certified and b.algbw == n * lam
    assert b.bottleneck.cut_tight


def test_multibox_fabrics_certified_with_the_box_cut():
    for spec, want in [("dgx-a100:nodes=2", 50), ("dgx-a100:nodes=16", Fraction(80, 3)), ("mi250:nodes=2", 32),
                       ("dgx-h100:nodes=8,fabric=leaf-spine,oversub=2", 50)]:
        b = alltoall_bound(load_topology(spec))
        assert b.certified and b.algbw == want, (spec, b.message)
        assert b.bottleneck.cut_algbw == want and b.bottleneck.cut_tight
        assert b.symmetry["source_orbits"] <= 4
        d = b.to_dict()
        assert d["algbw_gbps"] == str(want) if isinstance(want, int) else d["algbw_gbps"] == f"{want.numerator}/{want.denominator}"


@settings(max_examples=30, deadline=None)
@given(fabrics(max_compute=4, max_switches=2), st.data())
def test_any_lengths_and_cuts_bound_from_above(topo, data):
    lam = Fraction(plain_lp(topo)).limit_denominator(10**9)
    n = len(topo.nodes)
    arcs = topo.arcs
    lengths = [Fraction(data.draw(st.integers(0, 5))) for _ in arcs]
    if not any(lengths):
        lengths[0] = Fraction(1)
    bound, _ = length_bound(n, [u for u, _, _ in arcs], [v for _, v, _ in arcs], [bw for _, _, bw in arcs],
                            list(topo.is_compute), lengths, [(i, 1) for i in range(n) if topo.is_compute[i]])
    if bound is not None:
        assert bound >= lam * (1 - Fraction(1, 10**6))
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    ratio = cut_ratio(mask, np.array([u for u, _, _ in arcs]), np.array([v for _, v, _ in arcs]),
                      [bw for _, _, bw in arcs], np.array(topo.is_compute))
    if ratio is not None:
        assert ratio >= lam * (1 - Fraction(1, 10**6))


def test_reduction_group_is_verified():
    topo = load_topology("dgx-a100:nodes=4")
    red = reduce_topology(topo)
    index = ArcIndex(red.n, red.tails, red.heads)
    caps = np.array(red.caps, dtype=object)
    for sc in red.sources:
        for member, g in zip(sc.members, sc.transversal):
            assert g[sc.rep] == member
            img = index.image(g)
            assert img is not None and list(caps[img]) == list(caps)
        # arcs in one class of the representative have the same capacity and the same orbit
        for cls in set(sc.arc_class.tolist()):
            arcs = np.flatnonzero(sc.arc_class == cls)
            assert len({red.caps[e] for e in arcs}) == 1 and len(set(red.arc_orbit[arcs].tolist())) == 1


def test_exact_solver():
    rows = [{0: Fraction(2), 1: Fraction(1)}, {0: Fraction(1), 1: Fraction(-1)}, {0: Fraction(3)}]
    assert solve_exact(rows, [Fraction(5), Fraction(1), Fraction(6)], 2) == [2, 1]
    assert solve_exact(rows, [Fraction(5), Fraction(1), Fraction(7)], 2) is None  # inconsistent
    assert solve_exact([{0: Fraction(1), 1: Fraction(1)}], [Fraction(1)], 2) is None  # not determined


def test_uncertified_path_reports_an_interval():
    b = alltoall_bound(load_topology("ring:n=5"), exact=False)
    assert b.ok and b.lower <= b.upper
    assert abs(float(b.lower) - 500 / 3) < 1e-2 and b.relative_gap is not None and b.relative_gap < 1e-3


def test_degraded_link_keeps_most_symmetry_and_the_same_optimum():
    base = load_topology("dgx-a100:nodes=2")
    links = [Link(lk.src, lk.dst, lk.bandwidth / 2 if (lk.src, lk.dst) == ("n1.nic5", "ib1") else lk.bandwidth, lk.cls)
             for lk in base.links]
    topo = make_topology(base.nodes, links, "degraded")
    with_sym = alltoall_bound(topo)
    without = alltoall_bound(topo, symmetry=False)
    assert with_sym.certified and without.certified and with_sym.algbw == without.algbw < 50
    assert 1 < with_sym.symmetry["source_orbits"] < topo.num_compute  # orbits of several sizes, no regular group
    assert len(set(with_sym.symmetry["orbit_sizes"])) > 1


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=4", "ring:n=6", "torus:dims=4x4", "mi250:nodes=2"])
def test_declared_regular_group_without_bliss_gives_the_same_optimum(monkeypatch, spec):
    import forestcoll.alltoall.reduction as reduction

    topo = load_topology(spec)
    full = alltoall_bound(topo)
    monkeypatch.setattr(reduction, "BLISS_RANKS", 1)
    fast = alltoall_bound(topo)
    assert fast.certified and fast.algbw == full.algbw
    if fast.symmetry["group"].startswith("declared"):
        assert fast.symmetry["source_orbits"] == 1
