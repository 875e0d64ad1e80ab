"""The declarative YAML/JSON topology file: examples, units, line-accurate errors, schema, round trips."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from forestcoll import load_topology, optimal_bound
from forestcoll.errors import TopologyError
from forestcoll.topology import BUILTINS, topology_to_dict

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
SCHEMA = json.loads((ROOT / "docs" / "topology.schema.json").read_text())


def test_hand_written_box_matches_the_builtin():
    mine = load_topology(str(EXAMPLES / "two-a100-boxes.yaml"))
    builtin = load_topology("dgx-a100:nodes=2")
    assert mine.num_compute == 16
    assert optimal_bound(mine).algbw == optimal_bound(builtin).algbw
    assert mine.capacity[("n1.nic5", "rail1")] == 25  # 200Gbps, exact


def test_mixed_cluster_example():
    topo = load_topology(str(EXAMPLES / "mixed-cluster.yaml"))
    assert topo.num_compute == 32
    assert topo.capacity[("n0.gpu0", "n0.nvswitch")] == 450 and topo.capacity[("n2.gpu0", "n2.gpu1")] == 64
    assert topo.capacity[("leaf0", "spine0")] == 200  # 16 ports x 50 GB/s / (oversub 2 x 2 spines)


def test_yaml_and_json_are_the_same_document(tmp_path):
    data = yaml.safe_load((EXAMPLES / "two-a100-boxes.yaml").read_text())
    path = tmp_path / "same.json"
    path.write_text(json.dumps(data))
    assert load_topology(str(path)) == load_topology(str(EXAMPLES / "two-a100-boxes.yaml"))


@pytest.mark.parametrize("name", ["two-a100-boxes.yaml", "mixed-cluster.yaml", "ring-of-four.json"])
def test_examples_follow_the_schema(name):
    path = EXAMPLES / name
    data = yaml.safe_load(path.read_text()) if name.endswith(".yaml") else json.loads(path.read_text())
    jsonschema.validate(data, SCHEMA)


def test_exported_topologies_follow_the_schema():
    for spec in ("dgx-a100:nodes=2", "mi250", "ring:n=3,bw=20.6"):
        jsonschema.validate(json.loads(json.dumps(topology_to_dict(load_topology(spec)))), SCHEMA)


@pytest.mark.parametrize(
    "doc",
    [
        {"box": {"compute": ["a"]}, "nodes": 0},
        {"box": {"compute": ["a"], "links": [{"between": ["a"], "bandwidth": 1}]}},
        {"boxes": [{"use": "dgx-a100"}], "nodes": 2},
        {"use": "nosuch"},
        {"box": {"compute": ["a"]}, "fabric": "torus"},
        {"box": {"compute": ["a"], "extra": 1}},
    ],
)
def test_schema_rejects_bad_documents(doc):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


BASE = """name: t
box:
  compute: [gpu0, gpu1]
  switches: [sw, nic0]
  links:
    - {between: ["gpu*", sw], bandwidth: 300GB/s}
    - {between: [gpu0, nic0], bandwidth: 25GB/s}
  ports:
    - {node: nic0, bandwidth: 200Gbps}
nodes: 2
fabric: rail
"""


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("300GB/s", "300GBs", r"t\.yaml:6: box\.links\[0\]\.bandwidth: unknown unit 'GBs'"),
        ("300GB/s", "-3", r"t\.yaml:6: box\.links\[0\]\.bandwidth: must be > 0"),
        ('"gpu*"', '"cpu*"', r"t\.yaml:6: box\.links\[0\]: no node matches 'cpu\*'"),
        ("  switches:", "  colour: red\n  switches:", r"t\.yaml:4: box\.colour: unknown key"),
        ("nodes: 2", "nodes: 0", r"t\.yaml:10: nodes: must be >= 1"),
        ("nodes: 2", "nodes: two", r"t\.yaml:10: nodes: expected an integer"),
        ("fabric: rail", "fabric: torus", r"t\.yaml:11: fabric\.type: unknown fabric 'torus'"),
        ("fabric: rail", "fabric: {type: rail, rails: 0}", r"t\.yaml:11: fabric\.rails: must be >= 1"),
        ("compute: [gpu0, gpu1]", "compute: [gpu0, gpu0]", r"defined twice"),
        ("{node: nic0,", "{node: nic9,", r"t\.yaml:9: box\.ports\[0\]: no node matches 'nic9'"),
        ("    - {between: [gpu0, nic0], bandwidth: 25GB/s}\n", "", r"cannot reach"),
        ("name: t\n", "name: t\nboxes: [{use: dgx-a100}]\n", r"give either 'boxes' or one top-level box"),
        ("  links:", "  links: 5\n  other:", r"unknown key|expected a list"),
        ("box:\n", "box:\n  kind: [1]\n", r"t\.yaml:3: box\.kind: expected a non-empty string"),
        ("name: t\n", "name: t\ncolour: red\n", r"t\.yaml:2: colour: unknown key"),
        ("fabric: rail\n", "fabric: rail\n  bad indent: [\n", r"t\.yaml:\d+: invalid YAML"),
    ],
)
def test_errors_name_file_line_and_place(tmp_path, old, new, message):
    assert old in BASE
    path = tmp_path / "t.yaml"
    path.write_text(BASE.replace(old, new, 1))
    with pytest.raises(TopologyError, match=message):
        load_topology(str(path))


def test_non_mapping_box(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("box: [1]\nnodes: 2\n")
    with pytest.raises(TopologyError, match=r"t\.yaml:1: box: expected a mapping"):
        load_topology(str(path))
    path.write_text("- just\n- a list\n")
    with pytest.raises(TopologyError, match=r"t\.yaml:1: document: expected a mapping"):
        load_topology(str(path))


def test_use_with_options_and_import(tmp_path):
    xml = ROOT.parent / "shared" / "data" / "nccl-topo" / "topo_8p_940.xml"
    doc = {"boxes": [{"use": "dgx-h100", "options": {"nic_bw": "200Gbps"}, "count": 2}]}
    if xml.exists():
        doc["boxes"].append({"import": str(xml), "count": 1})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc))
    topo = load_topology(str(path))
    assert topo.capacity[("n0.nic0", "fabric")] == 25
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"use": "dgx-h100", "options": {"nic_speed": 1}}))
    with pytest.raises(TopologyError, match=r"options\.nic_speed: unknown option"):
        load_topology(str(bad))
    missing = tmp_path / "missing.yaml"
    missing.write_text("import: nowhere.xml\nnodes: 2\n")
    with pytest.raises(TopologyError, match=r"missing\.yaml:1: import: .*no such topology file"):
        load_topology(str(missing))


def test_nodes_and_fabric_overrides(tmp_path):
    path = tmp_path / "one.yaml"
    path.write_text(BASE.replace("nodes: 2\n", "").replace("fabric: rail\n", ""))
    assert load_topology(str(path)).num_compute == 2
    four = load_topology(str(path), {"nodes": "4", "fabric": "rail"})
    assert four.num_compute == 8 and "rail0" in four.switch_nodes
    assert load_topology(f"{path}:nodes=3").num_compute == 6
    with pytest.raises(TopologyError, match="given both"):
        load_topology(f"{path}:nodes=3", {"nodes": "4"})
    mixed = EXAMPLES / "mixed-cluster.yaml"
    with pytest.raises(TopologyError, match="one box type"):
        load_topology(str(mixed), {"nodes": "4"})


def test_plain_file_without_ports_cannot_be_replicated():
    """A plain file replicates only with its box's ports (as topo import writes them): see test_cli_errors.py."""
    with pytest.raises(TopologyError, match="without 'ports' cannot be replicated.*declarative"):
        load_topology(str(EXAMPLES / "ring-of-four.json"), {"nodes": "2"})


CATALOG = sorted(BUILTINS) + ["dgx-a100:nodes=3", "dgx-h100:nodes=2,fabric=leaf-spine,oversub=2", "mi300x:nodes=3,fabric=mesh",
                              "hetero:dgx-a100=1,mi300x=1", "hgx-h100:nodes=2,nics=4"]


@pytest.mark.parametrize("spec", CATALOG)
def test_catalog_round_trip_is_identical(spec, tmp_path):
    if spec == "hetero":
        spec = "hetero:dgx-a100=1,dgx-h100=1"
    topo = load_topology(spec)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(topology_to_dict(topo)))
    back = load_topology(str(path))
    assert back == topo and back.symmetries == topo.symmetries and back.capacity == topo.capacity
