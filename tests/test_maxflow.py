"""graph.maxflow: exact values, the minimal minimum cut, capacities kept between queries."""

import networkx as nx
from hypothesis import given
from hypothesis import strategies as st

from forestcoll.graph.maxflow import FlowNetwork


@st.composite
def networks(draw):
    n = draw(st.integers(2, 7))
    arcs = [(u, v) for u in range(n) for v in range(n) if u != v and draw(st.booleans())]
    arcs += [(u, (u + 1) % n) for u in range(n) if (u, (u + 1) % n) not in arcs]  # every node on an arc
    caps = [draw(st.integers(0, 9)) for _ in arcs]
    return n, arcs, caps


@given(networks(), st.data())
def test_value_and_last_source_side_match_networkx_and_min_cut(net_caps, data):
    n, arcs, caps = net_caps
    net = FlowNetwork(n, [a for a, _ in arcs], [b for _, b in arcs])
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for (a, b), c in zip(arcs, caps):
        g.add_edge(a, b, capacity=c)
    s = data.draw(st.integers(0, n - 1))
    t = data.draw(st.integers(0, n - 1).filter(lambda v: v != s))
    value = net.value(caps, s, t)
    assert value == nx.maximum_flow_value(g, s, t)
    side = set(net.last_source_side())
    # the minimal source side: what the source reaches in the residual network, as min_cut gives it
    cut_value, mask = net.min_cut(caps, s, t)
    assert cut_value == value and side == {v for v in range(n) if mask[v]}
    assert s in side and t not in side
    assert sum(c for (a, b), c in zip(arcs, caps) if a in side and b not in side) == value
    # None: the previous query's capacities
    assert net.value(None, s, t) == value
