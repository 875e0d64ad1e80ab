"""Switch removal keeps the rooted condition, and every logical arc maps to real physical paths."""

from collections import defaultdict

import networkx as nx
from conftest import bandwidths, brute_force_rate, fabrics, refused_for_imbalance, symmetric_fabrics
from hypothesis import given
from hypothesis import strategies as st

from forestcoll import load_topology
from forestcoll.bound import prepare_phase, root_weights
from forestcoll.generate import generate
from forestcoll.topology import Link, Node, TopologyBuilder, make_topology
from forestcoll.trees.capacities import phase_capacities
from forestcoll.trees.splitting import _shortcut, split_switches
from forestcoll.verify import verify


def split_at_optimum(topo, symmetry=True, boxes=False):
    """Split at the optimal k (``boxes``: telling the splitting each node's box); None when the fabric is refused for a
    switch that sends more than it receives."""
    weights = root_weights(topo, "allgather", None)
    prep = prepare_phase(topo, weights, False, symmetry)
    try:
        k, _, arcs = phase_capacities(prep, weights, None)
    except Exception as exc:
        assert refused_for_imbalance(exc), exc
        return None, None, None
    fabric = prep.fabric
    gens = fabric.symmetries if symmetry else ()
    result = split_switches(len(fabric.nodes), arcs, fabric.is_compute, [k * w for w in weights], k * sum(weights), gens,
                            box=[node.box for node in fabric.nodes] if boxes else None)
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


def leaving_box(topo, result):
    """The logical arcs between two compute nodes of one box with a path that leaves the box."""
    box = [node.box for node in topo.nodes]
    return [(u, t) for (u, t), bundle in result.paths.items() if box[u] is not None and box[u] == box[t]
            and any(box[x] != box[u] for p in bundle for x in p)]


def test_mi250_in_box_pairs_stay_off_the_network_switch():
    """mi250:nodes=2: every GCD is a port of the network switch; splitting it without the boxes joins GCDs of one box
    through the switch (a runtime would take xGMI for them); with the boxes no arc does, and the condition holds."""
    topo = load_topology("mi250:nodes=2")
    plain, _arcs, _k = split_at_optimum(topo)
    assert leaving_box(topo, plain)
    result, arcs, k = split_at_optimum(topo, boxes=True)
    check_split(topo, result, arcs, k)
    assert leaving_box(topo, result) == []
    sched = generate(topo, "allgather")
    assert sched.algbw == sched.bound_algbw and verify(sched, topo).ok
    box = {n.name: n.box for n in topo.nodes}
    assert not [e for t in sched.trees for e in t.edges
                if box[e.src] == box[e.dst] and any(box[x] != box[e.src] for x in e.path)]


@st.composite
def boxed_fabrics(draw):
    """2-3 boxes of 1-3 compute nodes (a ring inside each, random extra in-box links), every node on one network switch
    outside the boxes (two-way links, so the switch receives what it sends), sometimes through a NIC of its box."""
    nodes, links = [Node("net", "switch")], []
    for b in range(draw(st.integers(2, 3))):
        names = [f"b{b}.g{i}" for i in range(draw(st.integers(1, 3)))]
        nodes += [Node(x, "compute", f"b{b}") for x in names]
        pairs = list(zip(names, names[1:] + names[:1])) if len(names) > 1 else []
        pairs += draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(names)), max_size=2))
        for x, y in pairs:
            if x != y:
                bw = draw(bandwidths)
                links += [Link(x, y, bw), Link(y, x, bw)]
        for x in names:
            bw = draw(bandwidths)
            port = x
            if draw(st.booleans()):
                port = f"{x}.nic"
                nodes.append(Node(port, "switch", f"b{b}"))
                links += [Link(x, port, bw), Link(port, x, bw)]
            links += [Link(port, "net", bw), Link("net", port, bw)]
    return make_topology(nodes, links, "boxed")


@given(boxed_fabrics())
def test_box_aware_splitting_keeps_the_bound(topo):
    """Preferring pairs that stay in their box changes which pairs are split, never the condition or the bound:
    the split keeps every max-flow, and the trees packed from it reach the brute-force optimum and verify."""
    result, arcs, k = split_at_optimum(topo, boxes=True)
    check_split(topo, result, arcs, k)
    weights = root_weights(topo, "allgather", None)
    sched = generate(topo, "allgather")
    assert sched.bound_algbw == brute_force_rate(topo, weights) * sum(weights)
    assert sched.algbw == sched.bound_algbw and verify(sched, topo).ok
