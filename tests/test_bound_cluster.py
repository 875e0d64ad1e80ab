"""The cluster bound (forestcoll.bound.cluster): equal to the materialised bound, cut included, without building."""

import json
from fractions import Fraction

import pytest
from conftest import cli
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from forestcoll.bound import optimal_bound
from forestcoll.bound.cluster import ClusterModel, NodeNames, cluster_bound, cluster_bound_report, cluster_model
from forestcoll.bound.oracle import _orbit_targets
from forestcoll.bound.report import bound_report
from forestcoll.cli import render
from forestcoll.topology import load_topology
from forestcoll.topology.builtins import BOX_FAMILIES
from forestcoll.topology.cluster import Box, Fabric, Port, build_cluster
from forestcoll.topology.model import TopologyBuilder

FAMILIES = sorted(BOX_FAMILIES)
VARIANTS = [
    "dgx-a100:nodes=3,fabric=switch", "dgx-a100:nodes=5,fabric=switch,nic_bw=20.6", "dgx-a100:nodes=4,rails=3",
    "dgx-a100:nodes=3,nvlink_bw=10", "dgx-h100:nodes=4,rails=3", "dgx-h100:nodes=3,fabric=switch,nic_bw=1040/3",
    "hgx-h100:nodes=3,nics=4,pcie_bw=20", "hgx-h100:nodes=4,nics=4", "mi250:nodes=3,fabric=rail",
    "mi250:nodes=4,fabric=rail,rails=3", "mi250:nodes=5,xgmi_bw=1,nic_bw=100", "mi300x:nodes=4,pcie_bw=10",
    "dgx-1:nodes=3,nics=2,qpi_bw=1", "dgx-1:nodes=5,nics=1", "dgx-1:nodes=3,fabric=switch",
    "ndv2:nodes=4,fabric=rail", "dgx-b200:nodes=3,fabric=switch,nvlink_bw=1",
]


def materialised(spec, collective="allreduce"):
    return bound_report(load_topology(spec), collective).to_dict()


@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_equals_the_materialised_bound(family, nodes):
    spec = f"{family}:nodes={nodes}"
    model = cluster_model(spec)
    if nodes == 1:
        assert model is None  # one box: no fabric to quotient, bound builds it (the NICs are pruned)
        return
    for coll in ("allgather", "reduce_scatter", "allreduce"):
        ours, theirs = cluster_bound(model, coll), optimal_bound(load_topology(spec), coll)
        assert ours.algbw == theirs.algbw and ours.busbw == theirs.busbw  # Fraction ==
        assert isinstance(ours.algbw, Fraction)
    assert cluster_bound_report(model, "allreduce").to_dict() == materialised(spec)


@pytest.mark.parametrize("spec", VARIANTS)
def test_option_variants_equal_the_materialised_bound(spec):
    model = cluster_model(spec)
    for coll in ("allgather", "allreduce"):
        assert cluster_bound_report(model, coll).to_dict() == materialised(spec, coll)


@pytest.mark.parametrize("family", FAMILIES)
def test_rank_orbits_of_box_0_do_not_change_with_the_box_count(family):
    """The targets (first rank of each automorphism orbit) are taken from the 2-box instance."""
    found = set()
    for n in (2, 3, 5):
        topo = load_topology(f"{family}:nodes={n}")
        found.add(_orbit_targets(topo, tuple(int(c) for c in topo.is_compute), True))
    assert len(found) == 1


def test_not_a_supported_cluster():
    for spec in ("ring:n=8", "hetero:dgx-a100=2", "dgx-a100:nodes=4,fabric=leaf-spine",
                 "dgx-a100:nodes=4,fabric=mesh", "mi250:nodes=3,fabric=fat-tree", "dgx-a100"):
        assert cluster_model(spec) is None, spec
    assert cluster_model("dgx-a100", {"nodes": "3"}).boxes == 3


# ----- random boxes, asymmetric links ----------------------------------------------------------------


@st.composite
def boxes(draw):
    """A random box: 2-3 ranks and 0-2 switches on a two-way ring plus extra one-way links, bandwidths that
    differ by direction, 1-3 ports on random nodes."""
    ranks = draw(st.integers(2, 3))
    switches = draw(st.integers(0, 2))
    b = TopologyBuilder("rnd")
    names = [b.compute(f"g{i}") for i in range(ranks)] + [b.switch(f"s{i}") for i in range(switches)]
    bw = st.integers(1, 9)
    if len(names) > 1:
        for i in range(len(names) if len(names) > 2 else 1):
            u, v = names[i], names[(i + 1) % len(names)]
            b.link(u, v, draw(bw), "l")
            b.link(v, u, draw(bw), "l")
    for _ in range(draw(st.integers(0, 3))):
        u, v = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        if u != v:
            b.link(u, v, draw(bw), "x")
    ports = tuple(Port(draw(st.sampled_from(names)), Fraction(draw(bw))) for _ in range(draw(st.integers(1, 3))))
    return Box(b.build(), ports, "rnd")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boxes(), st.sampled_from(["switch", "rail"]), st.integers(1, 3), st.integers(2, 5))
def test_random_boxes_equal_the_materialised_bound(box, kind, rails, n):
    fabric = Fabric(kind, rails=rails if kind == "rail" else None)
    model = ClusterModel("rnd", n, build_cluster([box] * 2, fabric, "rnd"))
    topo = build_cluster([box] * n, fabric, "rnd")
    for coll in ("allgather", "reduce_scatter", "allreduce"):
        ours, theirs = cluster_bound(model, coll), optimal_bound(topo, coll)
        assert ours.to_dict() == theirs.to_dict()
        assert [p.unbalanced for p in ours.phases] == [p.unbalanced for p in theirs.phases]


@st.composite
def mirrored_boxes(draw):
    """A box made of two identical halves (1-2 ranks, 0-1 switch each) with mirrored cross links: a symmetry the
    box does not declare, which bliss finds only once the cluster has more than 8 ranks."""
    h, sw = draw(st.integers(1, 2)), draw(st.integers(0, 1))
    b = TopologyBuilder("sym")
    half = {side: [b.compute(f"{side}g{i}") for i in range(h)] + [b.switch(f"{side}s{i}") for i in range(sw)]
            for side in "ab"}
    pos, bw = st.integers(0, h + sw - 1), st.integers(1, 9)
    for i in range(1, h + sw):  # each half connected
        w, back = draw(bw), draw(bw)
        for side in "ab":
            b.link(half[side][i - 1], half[side][i], w, "l")
            b.link(half[side][i], half[side][i - 1], back, "l")
    for _ in range(draw(st.integers(1, 3))):  # cross links, a -> b and b -> a alike
        u, v, w = draw(pos), draw(pos), draw(bw)
        b.link(half["a"][u], half["b"][v], w, "x")
        b.link(half["b"][u], half["a"][v], w, "x")
    ports = [(draw(pos), Fraction(draw(bw))) for _ in range(draw(st.integers(1, 2)))]
    return Box(b.build(), tuple(Port(half[side][p], w) for p, w in ports for side in "ab"), "sym")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mirrored_boxes(), st.sampled_from(["switch", "rail"]), st.integers(1, 3), st.integers(2, 6))
def test_undeclared_box_symmetry_gives_the_same_certificate(box, kind, rails, n):
    """The targets follow the cluster's rank count (bliss past 8 ranks), not the 2-box instance's."""
    test_random_boxes_equal_the_materialised_bound.hypothesis.inner_test(box, kind, rails, n)


# ----- the command line ----------------------------------------------------------------------------------


def test_cli_output_is_the_materialised_output(capsys):
    for spec in ("dgx-a100:nodes=4", "mi250:nodes=3", "dgx-1:nodes=5,nics=2"):
        topo = load_topology(spec)
        render.print_bound(bound_report(topo, "allreduce"), topo)
        expected = capsys.readouterr().out
        code, out, err = cli("bound", spec)
        assert code == 0 and err == "" and out == expected
        code, out, _ = cli("bound", spec, "--json", "--collective", "allgather")
        assert json.loads(out) == materialised(spec, "allgather")


def test_huge_cluster_answers_without_building(monkeypatch):
    import forestcoll.topology.cluster as cluster

    real = cluster.build_cluster

    def small_only(boxes, *args, **kwargs):
        assert len(boxes) <= 2, "a cluster larger than the 2-box sample was built"
        return real(boxes, *args, **kwargs)

    monkeypatch.setattr(cluster, "build_cluster", small_only)
    monkeypatch.setattr("forestcoll.topology.builtins.build_cluster", small_only)
    code, out, err = cli("bound", "dgx-a100:nodes=100000")
    assert code == 0, err
    assert "topology        dgx-a100:nodes=100000  (800000 compute, 900002 switch nodes)" in out
    assert "optimal algbw   10000000/99999 GB/s" in out  # N*B/(N-1) / 2 for allreduce, B = 200 GB/s per box
    assert "allgather algbw 20000000/99999 GB/s" in out
    assert "every node except {n0.gpu0, n0.gpu1, n0.gpu2, n0.gpu3, n0.gpu4, n0.gpu5, ...} holds 799992 ranks" in out
    code, out, err = cli("bound", "mi250", "--nodes", "100000", "--collective", "allgather")
    assert code == 0 and "1600000 compute" in out and "25600000/99999 GB/s" in out


def test_json_over_the_limit():
    code, out, err = cli("bound", "dgx-a100:nodes=2049", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["compute_nodes"] == 16392 and data["allgather_algbw_gbps"] == format(Fraction(200 * 2049, 2048))
    cut = data["bottleneck_cut"]
    assert len(cut) == 2048 * 17 + 2 and cut[0] == "n1.gpu0" and cut[-1] == "ib1"
    assert data["phases"][1]["bottleneck_cut"] == cut


@pytest.mark.parametrize(("args", "words"), [
    (("bound", "dgx-a100:nodes=100000,fabric=leaf-spine"), "only on switch or rail fabrics, where the boxes are interchangeable (leaf-spine is not"),
    (("bound", "dgx-a100:nodes=100000,fabric=mesh"), "(mesh is not"),
    (("bound", "dgx-a100:nodes=100000", "--collective", "broadcast"), "only for allgather, reduce_scatter and allreduce"),
    (("bound", "dgx-a100:nodes=100000", "--k", "2"), "without --k or --no-symmetry"),
    (("bound", "dgx-a100:nodes=100000", "--no-symmetry"), "without --k or --no-symmetry"),
    (("bound", "dgx-a100:nodes=10000000"), "above forestcoll's limit of 1,048,576"),
    (("bound", "dgx-a100:nodes=100000,nic_bw=0"), "nic_bw"),
    (("bound", "dgx-a100:nodes=100000,foo=1"), "unknown option 'foo'"),
    (("bound", "dgx-a100:nodes=1e5"), "expected an integer"),
])
def test_unsupported_huge_specs_are_refused_with_one_line(args, words):
    code, out, err = cli(*args)
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err, err


def test_node_names_are_lazy_and_ordered():
    model = cluster_model("dgx-a100:nodes=3")
    topo = load_topology("dgx-a100:nodes=3")
    everything = model.node_names()
    assert list(everything) == [n.name for n in topo.nodes] and len(everything) == len(topo.nodes)
    assert everything[17] == "n1.gpu0" and everything[-1] == "ib1" and everything[16:18] == ["n0.nic7", "n1.gpu0"]
    assert len(model.switch_nodes) == len(topo.switch_nodes)
    box0 = NodeNames(model, [i < 17 for i in range(36)])
    assert box0.outside(2) == ["n1.gpu0", "n1.gpu1"] and box0 == tuple(everything[:17])


def _mask(*on):
    return [i in on for i in range(36)]


@settings(max_examples=200, deadline=None)
@example(3, _mask(0), _mask(0, 1)).via("a prefix of b")
@example(3, _mask(0, 17), _mask(0, 1)).via("b's next element is above a's")
@example(4, _mask(5, 20, 35), _mask(5, 20)).via("b a prefix of a, ends in the other boxes")
@example(2, _mask(), _mask(34)).via("empty")
@example(3, _mask(1, 2), _mask(1, 2)).via("equal")
@given(st.integers(2, 5), st.lists(st.booleans(), min_size=36, max_size=36), st.lists(st.booleans(), min_size=36, max_size=36))
def test_index_order_is_tuple_order(n, a, b):
    """The tie-break compares two unions of classes as their sorted node-index tuples, without listing them."""
    from forestcoll.bound.cluster import _ClassCut, _index_order

    model = cluster_model(f"dgx-a100:nodes={n}")
    index = {name: i for i, name in enumerate(model.node_names())}

    def nodes(mask):
        return tuple(index[x] for x in NodeNames(model, mask))

    cut_a, cut_b = _ClassCut(tuple(a), Fraction(1), 1), _ClassCut(tuple(b), Fraction(1), 1)
    want = (nodes(a) > nodes(b)) - (nodes(a) < nodes(b))
    assert _index_order(model, cut_a, cut_b) == want
