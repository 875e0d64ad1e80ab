"""Fabric topologies: the model, built-in families, and file formats."""

from forestcoll.topology.builtins import BUILTINS, build_builtin
from forestcoll.topology.jsonio import read_topology_json, topology_from_dict, topology_to_dict
from forestcoll.topology.model import (
    COMPUTE,
    SWITCH,
    Link,
    Node,
    Topology,
    TopologyBuilder,
    from_networkx,
    make_topology,
    to_networkx,
)
from forestcoll.topology.spec import load_topology, parse_spec

__all__ = [
    "BUILTINS",
    "COMPUTE",
    "SWITCH",
    "Link",
    "Node",
    "Topology",
    "TopologyBuilder",
    "build_builtin",
    "from_networkx",
    "load_topology",
    "make_topology",
    "parse_spec",
    "read_topology_json",
    "to_networkx",
    "topology_from_dict",
    "topology_to_dict",
]
