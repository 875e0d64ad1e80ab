from fractions import Fraction

import networkx as nx
import pytest
from conftest import brute_force_rate, fabrics, symmetric_fabrics
from hypothesis import given

from forestcoll import fixed_k_algbw, generate, load_topology, optimal_bound, verify
from forestcoll.bound import Oracle, optimal_rate, root_weights, smallest_optimal_k
from forestcoll.collectives import bus_factor, canonical
from forestcoll.errors import TopologyError, UsageError


def spec_of(entry):
    return f"{entry['topology']}:nodes={entry['nodes']}"


def test_optimal_bounds_equal_the_reference(reference_results):
    for entry in reference_results["optimal"]:
        topo = load_topology(spec_of(entry))
        assert topo.num_compute == entry["gpus"]
        assert optimal_bound(topo).algbw == Fraction(entry["algbw"]), entry


def test_fixed_k_bounds_equal_the_reference(reference_results):
    for entry in reference_results["fixed_k"]:
        topo = load_topology(spec_of(entry))
        assert fixed_k_algbw(topo, "allgather", entry["k"]) == Fraction(entry["algbw"]), entry


@pytest.mark.parametrize(
    "spec, algbw, k",
    [
        ("dgx-a100:nodes=1", Fraction(2400, 7), 1),
        ("dgx-a100:nodes=2", Fraction(1040, 3), 13),
        ("dgx-a100:nodes=4", Fraction(800, 3), 1),
        ("mi250:nodes=1", Fraction(2400, 7), 3),
        ("mi250:nodes=2", Fraction(5312, 15), 83),
    ],
)
def test_smallest_optimal_k_is_smallest(spec, algbw, k):
    """Known values (also in shared/reference); every smaller k falls short of the optimum."""
    topo = load_topology(spec)
    oracle = Oracle.build(topo, root_weights(topo, "allgather", None))
    rate = optimal_rate(oracle).rate
    assert topo.num_compute * rate == algbw
    assert smallest_optimal_k(oracle, rate) == k
    for smaller in range(1, k):
        assert fixed_k_algbw(topo, "allgather", smaller) < algbw


def test_bottleneck_cut_certifies_the_bound():
    topo = load_topology("dgx-a100:nodes=4")
    bound = optimal_bound(topo)
    phase = bound.phases[0]
    members = set(phase.cut_nodes)
    out = sum((bw for (a, b), bw in topo.capacity.items() if a in members and b not in members), Fraction(0))
    inside = sum(1 for c in topo.compute_nodes if c in members)
    assert out == phase.cut_bandwidth and inside == phase.cut_weight
    assert topo.num_compute * out / inside == bound.algbw
    # 3 boxes and their links send 200 GB/s into the fourth box's 8 GPUs
    assert phase.cut_bandwidth == 200 and phase.cut_weight == 24


def test_collective_conventions():
    topo = load_topology("dgx-a100:nodes=2")
    ag = optimal_bound(topo, "allgather")
    ar = optimal_bound(topo, "allreduce")
    rs = optimal_bound(topo, "reducescatter")
    assert ar.algbw == ag.algbw / 2 and rs.algbw == ag.algbw
    assert ag.busbw == ag.algbw * Fraction(15, 16)
    assert ar.busbw == ar.algbw * 2 * Fraction(15, 16)
    assert bus_factor("broadcast", 16) == 1
    bc = optimal_bound(topo, "broadcast", root="n0.gpu3")
    assert bc.algbw == 200 and bc.root == "n0.gpu3"  # 8 NICs x 25 GB/s leave the root's box


def test_broadcast_bound_is_min_max_flow_from_root():
    topo = load_topology("mi250:nodes=2")
    g = nx.DiGraph()
    for (a, b), bw in topo.capacity.items():
        g.add_edge(a, b, capacity=bw)
    root = "n0.gcd5"
    expected = min(nx.maximum_flow_value(g, root, v) for v in topo.compute_nodes if v != root)
    assert optimal_bound(topo, "broadcast", root=root).algbw == expected
    rev = g.reverse(copy=True)
    expected_reduce = min(nx.maximum_flow_value(rev, root, v) for v in topo.compute_nodes if v != root)
    assert optimal_bound(topo, "reduce", root=root).algbw == expected_reduce


def test_switch_receiving_more_than_it_sends_is_handled():
    from forestcoll.topology import TopologyBuilder

    b = TopologyBuilder("asym")
    for name in ("a", "b", "c"):
        b.compute(name)
    b.switch("s")
    for name in ("a", "b", "c"):
        b.link(name, "s", 30)  # uplinks fast
        b.link("s", name, 10)  # downlinks slow
    topo = b.build()
    # allgather: every node takes in 2 shards through a 10 GB/s downlink: x* = 5 per node
    assert optimal_bound(topo, "allgather").algbw == 15
    # reduce-scatter uses the links reversed: there the switch could send 90 but receives only 30.
    # Max-flow promises 30 GB/s, which trees cannot reach (no copying): the bound says so ...
    rs = optimal_bound(topo, "reduce_scatter")
    assert rs.algbw == 30 and rs.phases[0].unbalanced == ("s",)
    # ... the optimal generator refuses, naming the switch ...
    with pytest.raises(TopologyError, match="switch 's' can send more than it receives.*--k"):
        generate(topo, "reduce_scatter")
    # ... and with a fixed k it builds the best schedule it can, which is honest about the gap
    sched = generate(topo, "reduce_scatter", k=1)
    report = verify(sched, topo)
    assert report.ok and report.algbw == 15 and not report.certified_optimal


def test_unbalanced_switch_that_does_not_matter_is_accepted():
    from forestcoll.topology import TopologyBuilder

    b = TopologyBuilder("side-switch")
    for name in ("a", "b", "c", "d"):
        b.compute(name)
    b.switch("s")
    for x, y in (("a", "b"), ("b", "c"), ("c", "a")):
        b.duplex(x, y, 100)
    b.duplex("a", "d", 1)  # d is the bottleneck: 3 shards through 1 GB/s
    for name in ("a", "b", "c"):
        b.link(name, "s", 1)
        b.link("s", name, 2)  # the switch sends more than it receives, but never limits anything
    topo = b.build()
    bound = optimal_bound(topo, "allgather")
    assert bound.algbw == 4 * Fraction(1, 3)
    sched = generate(topo, "allgather")
    report = verify(sched, topo)
    assert report.ok and report.certified_optimal


@given(fabrics())
def test_rate_equals_brute_force_cut_enumeration(topo):
    weights = root_weights(topo, "allgather", None)
    expected = brute_force_rate(topo, weights)
    for symmetry in (True, False):
        oracle = Oracle.build(topo, weights, symmetry)
        res = optimal_rate(oracle)
        assert res.rate == expected
        assert res.cut.ratio == expected  # the returned cut attains it


@given(fabrics(max_compute=4, max_switches=2))
def test_broadcast_rate_equals_brute_force(topo):
    root = topo.compute_nodes[-1]
    weights = root_weights(topo, "broadcast", root)
    assert optimal_rate(Oracle.build(topo, weights)).rate == brute_force_rate(topo, weights)


@given(symmetric_fabrics())
def test_symmetry_reduction_gives_the_same_bound(topo):
    with_sym = optimal_bound(topo, "allgather", symmetry=True)
    without = optimal_bound(topo, "allgather", symmetry=False)
    assert with_sym.algbw == without.algbw
    assert brute_force_rate(topo, root_weights(topo, "allgather", None)) * topo.num_compute == with_sym.algbw


def test_detected_automorphisms_match_no_symmetry_on_large_fabrics():
    # mi250 is large enough (>8 ranks) for bliss detection to kick in
    for spec in ("mi250:nodes=2", "dgx-a100:nodes=3"):
        topo = load_topology(spec)
        assert optimal_bound(topo, symmetry=True).algbw == optimal_bound(topo, symmetry=False).algbw


def test_bad_collective_and_root():
    topo = load_topology("ring:n=4")
    with pytest.raises(UsageError, match="unknown collective"):
        canonical("gather")
    with pytest.raises(UsageError, match="unknown root"):
        optimal_bound(topo, "broadcast", root="nope")
    sw = load_topology("switch:n=3")
    with pytest.raises(UsageError, match="is a switch"):
        optimal_bound(sw, "broadcast", root="switch")
