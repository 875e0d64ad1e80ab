"""Fabric topologies: the model, built-in families, and file formats."""

from forestcoll.topology.builtins import BOX_FAMILIES, BUILTINS, build_builtin
from forestcoll.topology.cluster import Box, Fabric, Port, build_cluster
from forestcoll.topology.declarative import read_topology_document
from forestcoll.topology.jsonio import topology_from_dict, topology_to_dict, write_topology
from forestcoll.topology.model import (
    COMPUTE,
    SWITCH,
    Link,
    Node,
    Topology,
    TopologyBuilder,
    fingerprint,
    from_networkx,
    make_topology,
    to_networkx,
)
from forestcoll.topology.nccl_xml import import_nccl_xml
from forestcoll.topology.spec import Imported, import_topology, load_topology, parse_spec, resolve_spec

__all__ = [
    "BOX_FAMILIES",
    "BUILTINS",
    "Box",
    "Fabric",
    "Imported",
    "Port",
    "build_cluster",
    "import_nccl_xml",
    "import_topology",
    "COMPUTE",
    "SWITCH",
    "Link",
    "Node",
    "Topology",
    "TopologyBuilder",
    "build_builtin",
    "fingerprint",
    "from_networkx",
    "load_topology",
    "make_topology",
    "parse_spec",
    "resolve_spec",
    "read_topology_document",
    "to_networkx",
    "topology_from_dict",
    "topology_to_dict",
    "write_topology",
]
