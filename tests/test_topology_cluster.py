"""Multi-box fabrics: structure of each fabric model, declared symmetries, and their effect on bounds."""

import pytest

from forestcoll import generate, load_topology, optimal_bound, verify
from forestcoll.errors import TopologyError
from forestcoll.topology.builtins import dgx_h100_box, hgx_h100_box
from forestcoll.topology.cluster import Box, Fabric, _mesh_offsets, build_cluster


def test_switch_fabric():
    topo = build_cluster([dgx_h100_box()] * 3, Fabric("switch"), "c")
    assert topo.num_compute == 24 and "fabric" in topo.switch_nodes
    assert all(topo.capacity[(f"n{b}.nic{i}", "fabric")] == 50 for b in range(3) for i in range(8))


def test_rail_fabric_puts_port_i_on_rail_i():
    topo = load_topology("dgx-h100:nodes=3")
    for b in range(3):
        for i in range(8):
            assert topo.capacity[(f"n{b}.nic{i}", f"rail{i}")] == 50
    two = load_topology("dgx-h100:nodes=2,rails=2")
    assert two.capacity[("n1.nic5", "rail1")] == 50 and ("n1.nic5", "rail5") not in two.capacity


def test_dgx_a100_keeps_the_papers_two_ib_switches():
    topo = load_topology("dgx-a100:nodes=2")
    assert topo.capacity[("n1.nic3", "ib1")] == 25 and topo.capacity[("n0.nic2", "ib0")] == 25
    assert "rail0" in load_topology("dgx-a100:nodes=2,rails=8").switch_nodes


def test_leaf_spine_oversubscription_is_exact_and_lowers_the_bound():
    full = load_topology("dgx-h100:nodes=4,fabric=leaf-spine,leaf_ports=16,spines=2")
    over = load_topology("dgx-h100:nodes=4,fabric=leaf-spine,leaf_ports=16,spines=2,oversub=4")
    # a leaf serves 16 ports of 50 GB/s: 800 GB/s down, 800/oversub up, split over 2 spines
    assert full.capacity[("leaf0", "spine1")] == 400 and over.capacity[("leaf0", "spine1")] == 100
    assert full.capacity[("n1.nic7", "leaf0")] == 50 and full.capacity[("n2.nic0", "leaf1")] == 50
    assert optimal_bound(over).algbw < optimal_bound(full).algbw
    # the 16 GPUs of one leaf (two boxes) receive everything through its 2 x 100 GB/s of uplinks
    assert optimal_bound(over).phases[0].cut_bandwidth == 200


def test_mesh_offsets_pair_up():
    assert _mesh_offsets(4, 4) == [(1, 0), (3, 0), (2, 0), (1, 1)]
    topo = load_topology("mi300x:nodes=4,fabric=mesh")
    cables = [(a, b) for (a, b) in topo.capacity if a.endswith(tuple(f"nic{i}" for i in range(8))) and b.startswith("n") and ".nic" in b]
    # 8 ports per box, 4 boxes: every box reaches every other box directly
    boxes = {(a.split(".")[0], b.split(".")[0]) for a, b in cables}
    assert {(f"n{i}", f"n{j}") for i in range(4) for j in range(4) if i != j} <= boxes


def test_mesh_needs_equal_boxes():
    with pytest.raises(TopologyError, match="same number of ports"):
        build_cluster([dgx_h100_box(), hgx_h100_box(nics=4)], Fabric("mesh"))


def test_box_without_ports_cannot_join():
    portless = Box(dgx_h100_box().topology, ())
    with pytest.raises(TopologyError, match="no network port"):
        build_cluster([portless, portless])


@pytest.mark.parametrize(
    "spec",
    ["dgx-h100:nodes=2", "dgx-b200:nodes=3,fabric=switch", "hgx-h100:nodes=2,nics=4", "mi300x:nodes=3,fabric=mesh",
     "dgx-1:nodes=2", "ndv2:nodes=2", "hetero:dgx-a100=1,dgx-h100=2", "mi300x:nodes=4,fabric=leaf-spine,leaf_ports=16"],
)
def test_clusters_generate_the_same_with_and_without_symmetry(spec):
    topo = load_topology(spec)
    assert topo.symmetries  # something to exploit
    a = generate(topo, "allgather")
    b = generate(topo, "allgather", symmetry=False)
    assert a.algbw == b.algbw == a.bound_algbw
    assert verify(a, topo).certified_optimal and verify(b, topo).certified_optimal


def test_heterogeneous_cluster():
    topo = load_topology("hetero:dgx-a100=2,dgx-h100=2")
    assert topo.num_compute == 32
    assert topo.capacity[("n0.gpu0", "n0.nvswitch")] == 300 and topo.capacity[("n3.gpu0", "n3.nvswitch")] == 450
    assert load_topology("hetero").num_compute == 32  # 2 DGX-A100 + 2 DGX-H100 by default
    with pytest.raises(TopologyError, match="give box counts"):
        load_topology("hetero:dgx-a100=0")


def test_catalog_entries_build():
    for spec, ranks in [("dgx-b200", 8), ("hgx-h100:nics=4", 8), ("mi300x", 8), ("dgx-1", 8), ("ndv2", 8),
                        ("hypercube:dim=4", 16), ("torus:dims=2x2x2", 8)]:
        assert load_topology(spec).num_compute == ranks
    v100 = load_topology("dgx-1")
    assert sum(bw for (a, b), bw in v100.capacity.items() if a == "n0.gpu0" and b.startswith("n0.gpu")) == 6 * 25
