"""The topology JSON file: ``{"nodes": [...], "links": [...]}``.

Format (every field beyond these is optional)::

    {"nodes": [{"name": "gpu0", "kind": "compute"}, {"name": "sw", "kind": "switch"}],
     "links": [{"src": "gpu0", "dst": "sw", "bandwidth": "20.6"}]}

``bandwidth`` is GB/s in one direction: a JSON number, a decimal string or a
fraction string such as ``"1040/3"`` (or a string with a unit, ``"400Gbps"``).
Optional fields: top-level ``name``, per-node ``box`` (the machine the node
belongs to; written for clusters so that export -> import keeps it), per-link
``class`` (nvlink, ib, ...) and ``latency_us`` (one-way latency in
microseconds, for the simulator; >= 0), and ``symmetries``: a list of
automorphisms, each the list of node names that ``nodes`` map to, in order;
``ports``: the network attachments of a file that holds one box (``forestcoll
topo import`` writes them), each ``{"node": name, "bandwidth": GB/s}`` in rail
order, so that ``--nodes N --fabric F`` can replicate the box (as it does the
NCCL dump itself); ``gpu``: what the compute nodes are, ``{"name": "MI300X",
"vendor": "amd", "units": 304, "arch": "gfx942"}`` (vendor nvidia or amd;
units, the SMs or CUs, and arch optional; :mod:`forestcoll.topology.device`).
Every node must give its ``kind`` (no guess).
Writers emit integer bandwidths as numbers and others as ``"p/q"`` strings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from forestcoll.errors import ForestCollError, TopologyError
from forestcoll.topology.cluster import Box, Port
from forestcoll.topology.device import gpu_from_dict
from forestcoll.topology.model import NODE_KINDS, Link, Node, Topology, make_topology
from forestcoll.units import parse_bandwidth, parse_latency

if TYPE_CHECKING:
    from forestcoll.fileio import Output

__all__ = ["as_box", "box_ports", "bandwidth_to_json", "ports_from_dict", "topology_from_dict", "topology_to_dict", "write_topology"]


def bandwidth_to_json(bw) -> int | str:
    """An exact JSON value for a bandwidth: an int when integral, else ``"p/q"``."""
    return bw.numerator if bw.denominator == 1 else f"{bw.numerator}/{bw.denominator}"


def topology_to_dict(topo: Topology, symmetries: bool = True, ports: Sequence[Port] | None = None) -> dict[str, Any]:
    """The JSON form of ``topo``; node and link order are preserved.  ``ports``: the network ports of a topology
    that is one box (named as in ``topo``), written so that the file can be replicated with ``--nodes``."""
    out: dict[str, Any] = {}
    if topo.name:
        out["name"] = topo.name
    if topo.gpu is not None:
        out["gpu"] = topo.gpu.to_dict()
    out["nodes"] = [{"name": n.name, "kind": n.kind, **({"box": n.box} if n.box is not None else {})} for n in topo.nodes]
    links = []
    for lk in topo.links:
        item: dict[str, Any] = {"src": lk.src, "dst": lk.dst, "bandwidth": bandwidth_to_json(lk.bandwidth)}
        if lk.cls:
            item["class"] = lk.cls
        if lk.latency_us is not None:
            item["latency_us"] = bandwidth_to_json(lk.latency_us)
        links.append(item)
    out["links"] = links
    if ports:
        out["ports"] = [{"node": p.node, "bandwidth": bandwidth_to_json(p.bandwidth)} for p in ports]
    if symmetries and topo.symmetries:
        out["symmetries"] = [[topo.nodes[j].name for j in perm] for perm in topo.symmetries]
    return out


def write_topology(topo: Topology, path: Output, symmetries: bool = True, ports: Sequence[Port] | None = None) -> str:
    """Write the plain JSON of ``topo`` to ``path`` whole (temporary file, then rename); returns the text."""
    from forestcoll.fileio import atomic_write_text, dump_json

    text = dump_json(topology_to_dict(topo, symmetries, ports))
    atomic_write_text(path, text)
    return text


def _item_bandwidth(item: Mapping, label: str) -> Fraction:
    """The exact ``bandwidth`` of a link or port object (``label`` names it in the one-line error)."""
    if "bandwidth" not in item:
        raise TopologyError(f"{label}: missing 'bandwidth'")
    try:
        return parse_bandwidth(item["bandwidth"], f"{label} bandwidth")
    except ForestCollError as exc:
        raise TopologyError(str(exc)) from None


def topology_from_dict(data: Any, source: str = "topology") -> Topology:
    """Validate and build a Topology from parsed JSON; errors name ``source`` and the element."""
    if not isinstance(data, Mapping):
        raise TopologyError(f"{source}: expected a JSON object with 'nodes' and 'links'")
    for key in ("nodes", "links"):
        if key not in data:
            raise TopologyError(f"{source}: missing '{key}'")
        if not isinstance(data[key], list):
            raise TopologyError(f"{source}: '{key}' must be a list")
    nodes = []
    for i, item in enumerate(data["nodes"]):
        where = f"{source}: nodes[{i}]"
        if not isinstance(item, Mapping):
            raise TopologyError(f"{where}: expected an object with 'name' and 'kind'")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            raise TopologyError(f"{where}: 'name' must be a non-empty string")
        if "kind" not in item:
            raise TopologyError(f"{where} ({name}): missing 'kind': 'compute' (a rank: GPU, GCD) or 'switch' (anything "
                                "else: NVSwitch, NIC, PCIe switch, CPU); every node must say which")
        kind = item["kind"]
        if kind not in NODE_KINDS:
            raise TopologyError(f"{where} ({name}): 'kind' must be 'compute' or 'switch', got {kind!r}")
        box = item.get("box")
        if box is not None and (not isinstance(box, str) or not box.strip()):
            raise TopologyError(f"{where} ({name}): 'box' must be a non-empty string")
        nodes.append(Node(name, kind, box))
    links = []
    for i, item in enumerate(data["links"]):
        where = f"{source}: links[{i}]"
        if not isinstance(item, Mapping):
            raise TopologyError(f"{where}: expected an object with 'src', 'dst' and 'bandwidth'")
        src, dst = item.get("src"), item.get("dst")
        for key, val in (("src", src), ("dst", dst)):
            if not isinstance(val, str):
                raise TopologyError(f"{where}: '{key}' must be a node name")
        bw = _item_bandwidth(item, f"{where} ({src} -> {dst})")
        cls = item.get("class", "")
        if not isinstance(cls, str):
            raise TopologyError(f"{where}: 'class' must be a string")
        latency = None
        if "latency_us" in item:
            try:
                latency = parse_latency(item["latency_us"], f"{where} ({src} -> {dst}) latency_us")
            except ForestCollError as exc:
                raise TopologyError(str(exc)) from None
        links.append(Link(src, dst, bw, cls, latency))
    syms = []
    raw_syms = data.get("symmetries", [])
    if not isinstance(raw_syms, list):
        raise TopologyError(f"{source}: 'symmetries' must be a list")
    for k, perm in enumerate(raw_syms):
        if not isinstance(perm, list) or len(perm) != len(nodes) or not all(isinstance(p, str) for p in perm):
            raise TopologyError(f"{source}: symmetries[{k}] must list {len(nodes)} node names")
        syms.append({n.name: p for n, p in zip(nodes, perm)})
    name = data.get("name", "")
    if not isinstance(name, str):
        raise TopologyError(f"{source}: 'name' must be a string")
    gpu = gpu_from_dict(data["gpu"], source) if data.get("gpu") is not None else None
    try:
        return make_topology(nodes, links, name, syms, gpu)
    except TopologyError as exc:
        raise TopologyError(f"{source}: {exc}") from None


def ports_from_dict(data: Mapping, topo: Topology, source: str = "topology") -> tuple[Port, ...]:
    """The ``ports`` of a plain file (empty when it has none), each on a node of ``topo``."""
    raw = data.get("ports", [])
    if not isinstance(raw, list):
        raise TopologyError(f"{source}: 'ports' must be a list of {{node, bandwidth}} objects")
    names = {n.name for n in topo.nodes}
    ports = []
    for i, item in enumerate(raw):
        where = f"{source}: ports[{i}]"
        if not isinstance(item, Mapping) or set(item) - {"node", "bandwidth", "name"}:
            raise TopologyError(f"{where}: expected an object with 'node' and 'bandwidth'")
        node = item.get("node")
        if node not in names:
            raise TopologyError(f"{where}: 'node' must name a node of the file, got {node!r}")
        bw = _item_bandwidth(item, f"{where} ({node})")
        ports.append(Port(node, bw, str(item.get("name", ""))))
    return tuple(ports)


def as_box(topo: Topology, ports: Sequence[Port], source: str = "topology") -> Box:
    """A plain file that holds one box, as a :class:`Box` to replicate: its nodes lose the ``n0.`` prefix a
    single-box import carries, its ``ports`` are the box's network ports.  A file of several boxes, or one
    without ports, is refused with a line that says what to do instead."""
    boxes = sorted({n.box for n in topo.nodes if n.box is not None})
    if len(boxes) > 1:
        raise TopologyError(f"{source}: it already holds {len(boxes)} boxes joined by a fabric; --nodes / --fabric "
                            "replicate one box: give the single box (its NCCL dump, or `forestcoll topo import` of it)")
    if not ports:
        raise TopologyError(f"{source}: a nodes/links file without 'ports' cannot be replicated (forestcoll cannot "
                            "tell which nodes attach to the network); re-import the box with `forestcoll topo import "
                            "DUMP.xml -o FILE.json` (it writes the ports), add 'ports' (docs/topology-format.md), or "
                            "write the declarative box/fabric form")
    prefix = f"{boxes[0]}." if boxes else ""
    if prefix and not all(n.name.startswith(prefix) for n in topo.nodes):
        prefix = ""

    def local(name: str) -> str:
        return name[len(prefix):]

    nodes = [Node(local(n.name), n.kind) for n in topo.nodes]
    links = [Link(local(lk.src), local(lk.dst), lk.bandwidth, lk.cls, lk.latency_us) for lk in topo.links]
    syms = [{local(topo.nodes[i].name): local(topo.nodes[j].name) for i, j in enumerate(perm)} for perm in topo.symmetries]
    try:
        box_topo = make_topology(nodes, links, topo.name, syms, topo.gpu)
    except TopologyError as exc:
        raise TopologyError(f"{source}: {exc}") from None
    return Box(box_topo, tuple(Port(local(p.node), p.bandwidth, p.name) for p in ports), kind=topo.name or source)


def box_ports(topo: Topology, ports: Sequence[Port] | None) -> tuple[Port, ...] | None:
    """One box's ``ports`` (box-local names, as an import gives them) named as in ``topo`` when ``topo`` is that
    one box (``n0.nic0``); None for a topology of several boxes or without ports (nothing to write)."""
    boxes = {n.box for n in topo.nodes}
    if not ports or len(boxes) != 1:
        return None
    (box,) = boxes
    names = {n.name for n in topo.nodes}
    named = tuple(Port(f"{box}.{p.node}" if box is not None else p.node, p.bandwidth, p.name) for p in ports)
    return named if all(p.node in names for p in named) else None
