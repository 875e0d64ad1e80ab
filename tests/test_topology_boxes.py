"""Box membership is recorded when a fabric is built, and read from there (never guessed from names)."""

import json

from conftest import ROOT, shared_file

from forestcoll import load_topology, topology_from_dict, topology_to_dict
from forestcoll.simulate import build_network
from forestcoll.simulate.baselines import boxes
from forestcoll.topology.show import summarize


def test_clusters_record_their_boxes():
    topo = load_topology("dgx-a100:nodes=2")
    assert list(topo.boxes) == ["n0", "n1"]
    assert topo.boxes["n1"][0] == "n1.gpu0" and "n1.nvswitch" in topo.boxes["n1"]
    node = topo.nodes[topo.index["n1.nic3"]]
    assert node.box == "n1" and node.local_name == "nic3"
    assert topo.nodes[topo.index["ib0"]].box is None  # the network between boxes belongs to none
    assert summarize(topo).boxes == 2
    assert load_topology("ring:n=4").boxes == {}
    assert list(load_topology(str(ROOT / "docs/examples/two-a100-boxes.yaml")).boxes) == ["n0", "n1"]


def test_nccl_dump_is_one_box():
    topo = load_topology(str(shared_file("data", "nccl-topo", "H100-topology.xml")) + ":nodes=2")
    assert list(topo.boxes) == ["n0", "n1"]


def test_json_round_trip_keeps_boxes():
    topo = load_topology("mi250:nodes=2")
    data = topology_to_dict(topo)
    assert data["nodes"][0] == {"name": "n0.gcd0", "kind": "compute", "box": "n0"}
    back = topology_from_dict(json.loads(json.dumps(data)))
    assert back == topo and back.boxes == topo.boxes
    assert [len(b) for b in boxes(build_network(back))] == [16, 16]


def test_plain_files_without_boxes_are_flat_whatever_the_names():
    data = topology_to_dict(load_topology("dgx-a100:nodes=2"))
    for node in data["nodes"]:
        node.pop("box", None)
    flat = topology_from_dict(data)
    assert flat.boxes == {} and summarize(flat).boxes == 0
    assert boxes(build_network(flat)) == [list(range(16))]
