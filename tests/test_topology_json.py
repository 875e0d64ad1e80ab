import json
from fractions import Fraction

import pytest

from forestcoll.errors import TopologyError
from forestcoll.topology import BUILTINS, load_topology, topology_from_dict, topology_to_dict


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "mi250:nodes=2", "ring:n=5,bw=20.6", "torus:dims=3x3", "switch:n=4,bw=1040/3"] + list(BUILTINS))
def test_round_trip_is_identical(spec, tmp_path):
    topo = load_topology(spec)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(topology_to_dict(topo)))
    back = load_topology(str(path))
    assert back == topo
    assert back.capacity == topo.capacity
    assert back.symmetries == topo.symmetries
    assert back.name == topo.name


def test_minimal_format_and_exact_numbers(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(
        '{"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}, {"name": "s", "kind": "switch"}],'
        ' "links": [{"src": "a", "dst": "s", "bandwidth": 20.6}, {"src": "s", "dst": "a", "bandwidth": "1040/3"},'
        '           {"src": "b", "dst": "s", "bandwidth": "20.6"}, {"src": "s", "dst": "b", "bandwidth": 7}]}'
    )
    topo = load_topology(str(path))
    assert topo.capacity[("a", "s")] == Fraction(103, 5)
    assert topo.capacity[("s", "a")] == Fraction(1040, 3)
    assert topo.capacity[("s", "b")] == 7
    out = topology_to_dict(topo)
    assert out["links"][0]["bandwidth"] == "103/5" and out["links"][3]["bandwidth"] == 7


@pytest.mark.parametrize(
    "text, message",
    [
        ("[]", "document: expected a mapping"),
        ('{"nodes": []}', "missing 'links'"),
        ('{"nodes": {}, "links": []}', "'nodes' must be a list"),
        ('{"nodes": [{"kind": "compute"}], "links": []}', r"nodes\[0\]: 'name'"),
        ('{"nodes": [{"name": "a", "kind": "cpu"}], "links": []}', "'kind' must be"),
        ('{"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}], "links": [{"src": "a", "dst": "b"}]}', "missing 'bandwidth'"),
        ('{"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}], "links": [{"src": "a", "dst": "b", "bandwidth": "NaN"}]}', "not a bandwidth"),
        ('{"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}], "links": [{"src": "a", "dst": "b", "bandwidth": -2}]}', "must be > 0"),
        ('{"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}], "links": [{"src": "a", "dst": 3, "bandwidth": 2}]}', "'dst' must be"),
        ('{"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}], "links": [{"src": "a", "dst": "b", "bandwidth": 2}]}', "cannot reach"),
        ('{"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}], "links": [], "symmetries": [["a"]]}', "symmetries"),
    ],
)
def test_bad_files_name_the_element(text, message, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TopologyError, match=message):
        load_topology(str(path))


def test_truncated_and_missing_files(tmp_path):
    path = tmp_path / "cut.json"
    path.write_text('{"nodes": [')
    with pytest.raises(TopologyError, match=r"cut\.json:1: invalid JSON"):
        load_topology(str(path))
    with pytest.raises(TopologyError, match="no such topology file"):
        load_topology(str(tmp_path / "absent.json"))


def test_from_dict_directly():
    topo = topology_from_dict({"nodes": [{"name": "x", "kind": "compute"}, {"name": "y", "kind": "compute"}], "links": [
        {"src": "x", "dst": "y", "bandwidth": 1}, {"src": "y", "dst": "x", "bandwidth": 1}]})
    assert topo.compute_nodes == ("x", "y")
