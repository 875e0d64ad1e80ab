from fractions import Fraction

import pytest

from forestcoll.errors import TopologyError
from forestcoll.topology import BUILTINS, load_topology, parse_spec


def test_dgx_a100_matches_the_paper_model(paper_topologies):
    facts = paper_topologies["dgx-a100"]
    assert facts["gpus_per_node"] == 8
    one = load_topology("dgx-a100:nodes=1")
    assert one.num_compute == 8 and one.switch_nodes == ("n0.nvswitch",)
    assert all(one.capacity[(f"n0.gpu{i}", "n0.nvswitch")] == 300 for i in range(8))
    two = load_topology("dgx-a100:nodes=2")
    assert two.num_compute == 16
    assert len(two.switch_nodes) == 2 + 16 + 2  # NVSwitches, NICs, IB switches
    for box in range(2):
        for i in range(8):
            gpu, nic = f"n{box}.gpu{i}", f"n{box}.nic{i}"
            assert two.capacity[(gpu, nic)] == two.capacity[(nic, gpu)] == 25
            assert two.capacity[(nic, f"ib{i % 2}")] == two.capacity[(f"ib{i % 2}", nic)] == 25
    assert two.compute_nodes[:9] == tuple(f"n0.gpu{i}" for i in range(8)) + ("n1.gpu0",)


def test_mi250_matches_the_paper_model(paper_topologies):
    facts = paper_topologies["mi250"]
    counts = facts["xgmi_link_count_matrix"]
    topo = load_topology("mi250:nodes=2")
    assert topo.num_compute == 32 and topo.switch_nodes == ("ib",)
    for box in range(2):
        for i in range(16):
            for j in range(16):
                bw = topo.capacity.get((f"n{box}.gcd{i}", f"n{box}.gcd{j}"), 0)
                assert bw == counts[i][j] * facts["xgmi_link_gbps"]
            assert topo.capacity[(f"n{box}.gcd{i}", "ib")] == 16
    assert load_topology("mi250:nodes=1").switch_nodes == ()


@pytest.mark.parametrize(
    "spec, ncompute, nswitch",
    [
        ("ring:n=5", 5, 0),
        ("ring:n=2", 2, 0),
        ("torus:dims=4x4", 16, 0),
        ("torus:dims=2x3x2", 12, 0),
        ("fully-connected:n=4", 4, 0),
        ("switch:n=6,bw=20.6", 6, 1),
        ("dgx-a100:nodes=3,nic_bw=50", 24, 3 + 24 + 2),
    ],
)
def test_generic_builtins(spec, ncompute, nswitch):
    topo = load_topology(spec)
    assert topo.num_compute == ncompute
    assert len(topo.switch_nodes) == nswitch
    assert topo.symmetries  # every built-in declares its rotations / box shifts


def test_bandwidth_options_are_exact():
    topo = load_topology("switch:n=3,bw=1040/3")
    assert topo.capacity[("h0", "switch")] == Fraction(1040, 3)
    ring = load_topology("ring:n=4,bw=20.6")
    assert ring.capacity[("r0", "r1")] == Fraction(103, 5)


def test_torus_links():
    topo = load_topology("torus:dims=3x2")
    # size-3 dimension wraps around; size-2 dimension has a single link
    assert topo.capacity[("t0_0", "t2_0")] == 100
    assert topo.capacity[("t0_0", "t0_1")] == 100
    assert sum(1 for (a, _) in topo.capacity if a == "t0_0") == 3


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nosuch", "unknown topology 'nosuch'"),
        ("ring:n=1", "must be >= 2"),
        ("ring:n=x", "expected an integer"),
        ("ring:m=3", "unknown option 'm'"),
        ("ring:n", "key=value"),
        ("ring:n=3,n=4", "given twice"),
        ("ring:bw=0", "must be > 0"),
        ("ring:bw=nan", "not a bandwidth"),
        ("torus:dims=4y4", "expected sizes"),
        ("dgx-a100:nodes=0", "must be >= 1"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(TopologyError, match=message):
        load_topology(spec)


def test_parse_spec():
    assert parse_spec("dgx-a100:nodes=2,nic_bw=50") == ("dgx-a100", {"nodes": "2", "nic_bw": "50"})
    assert parse_spec("ring") == ("ring", {})


def test_every_builtin_builds_with_defaults():
    for name in BUILTINS:
        topo = load_topology(name)
        assert topo.num_compute >= 2
