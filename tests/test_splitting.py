"""Switch removal keeps the rooted condition, and every logical arc maps to real physical paths."""

from collections import defaultdict

import networkx as nx
from conftest import fabrics, refused_for_imbalance, symmetric_fabrics
from hypothesis import given

from forestcoll import load_topology
from forestcoll.bound import prepare_phase, root_weights
from forestcoll.topology import TopologyBuilder
from forestcoll.trees.capacities import phase_capacities
from forestcoll.trees.splitting import _shortcut, split_switches


def split_at_optimum(topo, symmetry=True):
    """Split at the optimal k; None when the fabric is refused for a switch that sends more than it receives."""
    weights = root_weights(topo, "allgather", None)
    prep = prepare_phase(topo, weights, False, symmetry)
    try:
        k, _, arcs = phase_capacities(prep, weights, None)
    except Exception as exc:
        assert refused_for_imbalance(exc), exc
        return None, None, None
    fabric = prep.fabric
    gens = fabric.symmetries if symmetry else ()
    result = split_switches(len(fabric.nodes), arcs, fabric.is_compute, [k * w for w in weights], k * sum(weights), gens)
    return result, arcs, k


def check_split(topo, result, arcs, k):
    if result is None:
        return
    n = len(topo.nodes)
    compute = [i for i in range(n) if topo.is_compute[i]]
    # 1. only compute nodes remain, and the rooted condition holds (checked with networkx)
    g = nx.DiGraph()
    for (u, v), c in result.caps.items():
        assert topo.is_compute[u] and topo.is_compute[v]
        g.add_edge(u, v, capacity=c)
    for c in compute:
        g.add_edge("s", c, capacity=k)
    for v in compute:
        assert nx.maximum_flow_value(g, "s", v) >= k * len(compute)
    # 2. bundles: real paths through switches, amounts sum to the arc's capacity
    physical = {(u, v): c for u, v, c in arcs}
    load = defaultdict(int)
    for (u, t), bundle in result.paths.items():
        assert sum(bundle.values()) == result.caps[(u, t)]
        for path, amount in bundle.items():
            assert path[0] == u and path[-1] == t and len(set(path)) == len(path)
            assert all(not topo.is_compute[x] for x in path[1:-1])
            for hop in zip(path, path[1:]):
                assert hop in physical
                load[hop] += amount
    # 3. no physical link carries more than its capacity
    for hop, amount in load.items():
        assert amount <= physical[hop]


def test_dgx_boxes_split_cleanly():
    topo = load_topology("dgx-a100:nodes=2")
    result, arcs, k = split_at_optimum(topo)
    check_split(topo, result, arcs, k)
    assert result.stats["two_neighbour"] >= 16  # every NIC is a two-neighbour switch


def test_switch_with_more_in_than_out_bandwidth():
    b = TopologyBuilder("asym")
    for name in ("a", "b", "c"):
        b.compute(name)
        b.link(name, "s", 30)
        b.link("s", name, 10)
    b.switch("s")
    topo = b.build()
    result, arcs, k = split_at_optimum(topo)
    check_split(topo, result, arcs, k)


@given(fabrics())
def test_random_fabrics_split_keeps_the_condition(topo):
    result, arcs, k = split_at_optimum(topo)
    check_split(topo, result, arcs, k)


@given(symmetric_fabrics())
def test_symmetric_split_keeps_the_condition(topo):
    for symmetry in (True, False):
        result, arcs, k = split_at_optimum(topo, symmetry)
        check_split(topo, result, arcs, k)


def test_shortcut_removes_cycles():
    assert _shortcut((1, 2, 3, 2, 4)) == (1, 2, 4)
    assert _shortcut((1, 5, 6, 1, 7)) == (1, 7)
    assert _shortcut((1, 2)) == (1, 2)
