from fractions import Fraction

import networkx as nx
import pytest

from forestcoll.errors import TopologyError
from forestcoll.topology import Link, Node, TopologyBuilder, from_networkx, load_topology, make_topology, to_networkx


def two_gpus_on_a_switch(bw_up=10, bw_down=10):
    b = TopologyBuilder("t")
    b.compute("a")
    b.compute("b")
    b.switch("sw")
    b.link("a", "sw", bw_up)
    b.link("sw", "a", bw_down)
    b.link("b", "sw", bw_up)
    b.link("sw", "b", bw_down)
    return b.build()


def test_parallel_links_add_up():
    topo = make_topology(
        [Node("a"), Node("b")],
        [Link("a", "b", Fraction(1)), Link("a", "b", Fraction(2)), Link("b", "a", Fraction(5, 2))],
    )
    assert topo.capacity[("a", "b")] == 3
    assert topo.arcs == ((0, 1, Fraction(3)), (1, 0, Fraction(5, 2)))
    assert topo.compute_nodes == ("a", "b")


@pytest.mark.parametrize(
    "nodes, links, message",
    [
        ([Node("a")], [], "1 compute node"),
        ([Node("a"), Node("s", "switch")], [Link("a", "s", Fraction(1))], "1 compute node"),
        ([Node("a"), Node("a")], [], "defined twice"),
        ([Node("a"), Node("b", "gpu")], [], "kind must be"),
        ([Node(""), Node("b")], [], "non-empty"),
        ([Node("a"), Node("b")], [Link("a", "c", Fraction(1))], "unknown node 'c'"),
        ([Node("a"), Node("b")], [Link("a", "a", Fraction(1))], "self-loop on 'a'"),
        ([Node("a"), Node("b")], [Link("a", "b", Fraction(0))], "positive"),
        ([Node("a"), Node("b")], [Link("a", "b", Fraction(1))], "'b' cannot reach 'a'"),
        ([Node("a"), Node("b"), Node("c")], [Link("a", "b", Fraction(1)), Link("b", "a", Fraction(1))], "'a' cannot reach 'c'"),
    ],
)
def test_validation_names_the_problem(nodes, links, message):
    with pytest.raises(TopologyError, match=message):
        make_topology(nodes, links)


def test_builder_rejects_bad_bandwidth_values():
    b = TopologyBuilder()
    b.compute("a")
    with pytest.raises(Exception, match="must be > 0"):
        b.link("a", "b", -1)
    with pytest.raises(Exception, match="not a bandwidth"):
        b.link("a", "b", "NaN")


def test_disconnected_through_switch_names_the_pair():
    b = TopologyBuilder()
    for n in "abc":
        b.compute(n)
    b.switch("s")
    b.duplex("a", "s", 5)
    b.duplex("b", "s", 5)
    with pytest.raises(TopologyError, match="'a' cannot reach 'c'"):
        b.build()


def test_symmetries_are_checked():
    b = TopologyBuilder()
    b.compute("a")
    b.compute("b")
    b.link("a", "b", 1)
    b.link("b", "a", 2)
    b.symmetry({"a": "b", "b": "a"})
    with pytest.raises(TopologyError, match="not an automorphism"):
        b.build()
    b2 = TopologyBuilder()
    b2.compute("a")
    b2.switch("s")
    b2.compute("b")
    b2.duplex("a", "s", 1)
    b2.duplex("b", "s", 1)
    b2.symmetry({"a": "s", "s": "a"})
    with pytest.raises(TopologyError, match="maps compute 'a' to switch 's'"):
        b2.build()


def test_reversed_and_symmetric():
    topo = two_gpus_on_a_switch(10, 4)
    assert not topo.is_symmetric()
    rev = topo.reversed()
    assert rev.capacity[("sw", "a")] == 10 and rev.capacity[("a", "sw")] == 4
    assert two_gpus_on_a_switch().is_symmetric()


def test_networkx_round_trip():
    topo = load_topology("dgx-a100:nodes=2")
    g = to_networkx(topo)
    assert g.nodes["ib0"]["kind"] == "switch"
    assert g.edges["n0.gpu0", "n0.nvswitch"]["bandwidth"] == 300
    back = from_networkx(g, name=topo.name)
    assert back.capacity == topo.capacity
    assert back.compute_nodes == topo.compute_nodes


def test_from_undirected_networkx_adds_both_directions():
    g = nx.Graph()
    g.add_edge("x", "y", bandwidth="2.5")
    topo = from_networkx(g)
    assert topo.capacity == {("x", "y"): Fraction(5, 2), ("y", "x"): Fraction(5, 2)}


def test_from_networkx_requires_bandwidth():
    g = nx.DiGraph()
    g.add_edge("x", "y")
    with pytest.raises(TopologyError, match="no 'bandwidth'"):
        from_networkx(g)
