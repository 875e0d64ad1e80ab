"""The declarative topology file (YAML or JSON): boxes as templates with counts, and a fabric.

::

    name: two-boxes                  # optional
    boxes:
      - use: dgx-h100                # a built-in box family ...
        count: 2
        options: {nic_bw: 400Gbps}
      - import: box.xml              # ... an NCCL/RCCL topology dump or its `topo import` JSON (relative to this file) ...
      - box:                         # ... or a box written out
          compute: {count: 4, prefix: gpu}      # or a list of names
          switches: [nvswitch, nic0, nic1]
          links:
            - {between: [gpu*, nvswitch], bandwidth: 300GB/s, class: nvlink}   # both ways, all matching pairs
            - {from: gpu0, to: nic0, bandwidth: 25GB/s}                         # one way
          ports:                                  # network attachments, in rail order
            - {nodes: nic*, bandwidth: 200Gbps}
        count: 2
    fabric: rail                     # or {type: leaf-spine, oversub: 2, spines: 4, leaf_ports: 16}

A single box type may also be written at the top level (``box:``, ``use:`` or
``import:`` with ``nodes: N``).  Bandwidths take units (GB/s, Gbps, ...; a bare
number is GB/s).  The plain ``{"nodes": [...], "links": [...]}`` file stays valid
and is recognised by its keys.  Every error names the file, the line and the
place in the document.  The JSON Schema is docs/topology.schema.json.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from forestcoll.errors import ForestCollError, TopologyError
from forestcoll.fileio import read_text
from forestcoll.limits import MAX_RANKS
from forestcoll.topology.cluster import FABRICS, Box, Fabric, Port, build_cluster
from forestcoll.topology.model import COMPUTE, Link, Node, make_topology
from forestcoll.units import parse_bandwidth, parse_latency

__all__ = [
    "BOX_KEYS", "FABRIC_KEYS", "GROUP_KEYS", "LINK_KEYS", "TOP_KEYS", "LocDict", "LocList", "is_declarative",
    "load_declarative", "parse_document", "read_topology_document",
]


class LocDict(dict):
    """A mapping that remembers the line of itself and of each value."""

    line = 0
    lines: dict[Any, int]


class LocList(list):
    """A sequence that remembers the line of itself and of each item."""

    line = 0
    lines: list[int]


@functools.cache
def _loader() -> type:
    """The YAML loader that keeps line numbers and reads decimals exactly, built on first use: yaml is imported
    only for a YAML file or a declarative JSON one (~8 ms that a plain JSON topology does not pay)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def _map(loader: Loader, node: yaml.MappingNode) -> LocDict:
        out = LocDict()
        out.line = node.start_mark.line + 1
        out.lines = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int)):
                raise yaml.constructor.ConstructorError(None, None, "keys must be strings", key_node.start_mark)
            out[key] = loader.construct_object(value_node, deep=True)
            out.lines[key] = value_node.start_mark.line + 1
        return out

    def _seq(loader: Loader, node: yaml.SequenceNode) -> LocList:
        out = LocList()
        out.line = node.start_mark.line + 1
        out.lines = []
        for item in node.value:
            out.append(loader.construct_object(item, deep=True))
            out.lines.append(item.start_mark.line + 1)
        return out

    def _float(loader: Loader, node: yaml.ScalarNode) -> Decimal:
        text = node.value.replace("_", "")
        special = {".nan": "NaN", ".inf": "Infinity", "+.inf": "Infinity", "-.inf": "-Infinity"}
        try:
            return Decimal(special.get(text.lower(), text))  # exact: 20.6 stays 20.6; .nan is refused as not finite
        except InvalidOperation:
            return text  # type: ignore[return-value]  # the number parser refuses it by name

    Loader.add_constructor("tag:yaml.org,2002:map", _map)
    Loader.add_constructor("tag:yaml.org,2002:seq", _seq)
    Loader.add_constructor("tag:yaml.org,2002:float", _float)
    return Loader


def parse_document(text: str, source: str) -> Any:
    """Parse YAML or JSON text into LocDict / LocList values; syntax errors give the line."""
    import yaml

    try:
        return yaml.load(text, Loader=_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        if source.lower().endswith(".json"):  # JSON that YAML cannot read (tabs, ...): parse it plainly
            try:
                return json.loads(text, parse_float=Decimal)
            except json.JSONDecodeError as jexc:
                raise TopologyError(f"{source}:{jexc.lineno}: invalid JSON: {jexc.msg}") from None
            except ValueError:
                raise TopologyError(f"{source}: a number has too many digits (see docs/limits.md)") from None
        raise TopologyError(f"{source}{line}: invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise TopologyError(f"{source}: invalid YAML: {exc}") from None
    except ValueError:  # an integer beyond Python's 4300-digit conversion limit
        raise TopologyError(f"{source}: a number has too many digits (see docs/limits.md)") from None
    except RecursionError:
        raise TopologyError(f"{source}: nested too deeply") from None


def _join(where: str, key: object) -> str:
    """A document path: ``box.links[3]``; the top level has no prefix."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else str(key)


class _Ctx:
    """Error reporting for one file: ``where`` is a path like boxes[1].box.links[3]."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, container: Any, key: Any, where: str, message: str) -> TopologyError:
        line = None
        if isinstance(container, LocDict) and key in container.lines:
            line = container.lines[key]
        elif isinstance(container, LocList) and isinstance(key, int) and key < len(container.lines):
            line = container.lines[key]
        elif isinstance(container, (LocDict, LocList)):
            line = container.line
        at = f"{self.source}:{line}" if line else self.source
        return TopologyError(f"{at}: {where}: {message}")

    def mapping(self, parent: Any, key: Any, where: str, allowed: tuple[str, ...]) -> Mapping:
        value = parent[key] if key is not None else parent
        if not isinstance(value, Mapping):
            raise self.fail(parent, key, where or "document", "expected a mapping (key: value)")
        for k in value:
            if k not in allowed:
                raise self.fail(value, k, _join(where, k), f"unknown key; expected one of {', '.join(allowed)}")
        return value

    def string(self, parent: Mapping, key: str, where: str) -> str:
        value = parent[key]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(parent, key, _join(where, key), "expected a non-empty string")
        return value

    def integer(self, parent: Mapping, key: str, where: str, lo: int = 1, name: str | None = None) -> int:
        value = parent[key]
        label = _join(where, name or key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(parent, key, label, f"expected an integer, got {value!r}")
        if value < lo:
            raise self.fail(parent, key, label, f"must be >= {lo}, got {value}")
        if value > MAX_RANKS:
            raise self.fail(parent, key, label, f"{value} is above forestcoll's limit of {MAX_RANKS:,} (see docs/limits.md)")
        return value

    def bandwidth(self, parent: Mapping, key: str, where: str):
        if key not in parent:
            raise self.fail(parent, None, where, f"missing '{key}'")
        try:
            return parse_bandwidth(parent[key], f"{key}")
        except ForestCollError as exc:
            raise self.fail(parent, key, _join(where, key), str(exc).split(": ", 1)[-1]) from None


def is_declarative(data: Any) -> bool:
    """True for the box/fabric format; the plain format has ``links`` or a list of ``nodes``."""
    return not (isinstance(data, Mapping) and ("links" in data or isinstance(data.get("nodes"), list)))


TOP_KEYS = ("name", "boxes", "box", "use", "import", "options", "nodes", "count", "fabric")
GROUP_KEYS = ("box", "use", "import", "options", "count")
BOX_KEYS = ("kind", "compute", "switches", "links", "ports")
LINK_KEYS = ("between", "from", "to", "bandwidth", "class", "latency_us")
FABRIC_KEYS = ("type", "rails", "oversub", "spines", "leaf_ports")


def load_declarative(data: Any, source: str, overrides: Mapping[str, str] | None = None) -> Any:
    """Build the Topology a declarative document describes (``overrides`` from the command line: nodes, fabric...)."""
    from forestcoll.topology.builtins import BOX_FAMILIES, CLUSTER_PARAMS, fabric_from_options

    ctx = _Ctx(source)
    top = ctx.mapping(data, None, "", TOP_KEYS)
    overrides = dict(overrides or {})
    groups: list[tuple[Mapping, str]] = []
    if "boxes" in top:
        for extra in ("box", "use", "import"):
            if extra in top:
                raise ctx.fail(top, extra, extra, "give either 'boxes' or one top-level box, not both")
        boxes_value = top["boxes"]
        if not isinstance(boxes_value, list) or not boxes_value:
            raise ctx.fail(top, "boxes", "boxes", "expected a non-empty list of box groups")
        for i in range(len(boxes_value)):
            groups.append((ctx.mapping(boxes_value, i, f"boxes[{i}]", GROUP_KEYS), f"boxes[{i}]"))
        if "nodes" in top:
            raise ctx.fail(top, "nodes", "nodes", "with 'boxes', give each group a 'count' instead")
    else:
        single = {k: top[k] for k in ("box", "use", "import", "options") if k in top}
        if not any(k in single for k in ("box", "use", "import")):
            raise ctx.fail(top, None, "document", "expected 'boxes', or one of 'box', 'use', 'import'")
        count_key = "nodes" if "nodes" in top else ("count" if "count" in top else None)
        if count_key:
            single["count"] = top[count_key]
        loc = LocDict(single)
        loc.line = getattr(top, "line", 0)
        loc.lines = {k: getattr(top, "lines", {}).get(k if k != "count" or not count_key else count_key, 0) for k in single}
        loc.count_name = count_key or "count"
        groups.append((loc, ""))
    if "nodes" in overrides:
        if len(groups) != 1:
            raise TopologyError(f"{source}: --nodes needs a file with one box type (this one has {len(groups)})")
        groups[0] = (_with(groups[0][0], "count", int(overrides.pop("nodes"))), groups[0][1])

    boxes: list[Box] = []
    base_dir = os.path.dirname(os.path.abspath(source)) if source else "."
    for group, where in groups:
        count = ctx.integer(group, "count", where, name=getattr(group, "count_name", "count")) if "count" in group else 1
        kinds = [k for k in ("box", "use", "import") if k in group]
        if len(kinds) != 1:
            raise ctx.fail(group, None, where or "document", "give exactly one of 'box', 'use', 'import'")
        kind = kinds[0]
        if "options" in group and kind != "use":
            raise ctx.fail(group, "options", _join(where, "options"), "options belong to 'use' (a built-in box)")
        if kind == "use":
            name = ctx.string(group, "use", where)
            if name not in BOX_FAMILIES:
                raise ctx.fail(group, "use", _join(where, "use"), f"unknown box {name!r}; built-in boxes: {', '.join(BOX_FAMILIES)}")
            family = BOX_FAMILIES[name]
            opts = group.get("options", {})
            if not isinstance(opts, Mapping):
                raise ctx.fail(group, "options", _join(where, "options"), "expected a mapping")
            kwargs = {}
            for key, value in opts.items():
                if key not in family.params:
                    raise ctx.fail(opts, key, _join(_join(where, "options"), key), f"unknown option; {name} takes {', '.join(family.params)}")
                try:
                    kwargs[key] = family.params[key].parse(str(value), f"{name}:{key}")
                except ForestCollError as exc:
                    raise ctx.fail(opts, key, _join(_join(where, "options"), key), str(exc).split(": ", 1)[-1]) from None
            box = family.make_box(**kwargs)
        elif kind == "import":
            path = ctx.string(group, "import", where)
            full = path if os.path.isabs(path) else os.path.join(base_dir, path)
            from forestcoll.topology.nccl_xml import import_nccl_xml

            try:
                box = _json_box(full) if full.lower().endswith(".json") else import_nccl_xml(full)
            except ForestCollError as exc:
                raise ctx.fail(group, "import", _join(where, "import"), str(exc)) from None
        else:
            box = _inline_box(ctx, group, "box", _join(where, "box"))
        boxes.extend([box] * count)

    fabric_opts: dict[str, object] = {}
    if "fabric" in top:
        fabric_opts = _fabric_options(ctx, top)
    for key, text in overrides.items():
        if key not in CLUSTER_PARAMS or key == "nodes":
            raise TopologyError(f"{source}: unknown option {key!r}; a topology file takes {', '.join(CLUSTER_PARAMS)}")
        fabric_opts[key] = CLUSTER_PARAMS[key].parse(text, key)
    fabric = fabric_from_options(fabric_opts, Fabric("switch"))
    name = top.get("name", os.path.basename(source))
    if not isinstance(name, str):
        raise ctx.fail(top, "name", "name", "expected a string")
    return build_cluster(boxes, fabric, name)


def _json_box(path: str):
    """A box from a plain one-box JSON with ports (what ``forestcoll topo import`` writes)."""
    from forestcoll.fileio import load_json
    from forestcoll.topology.jsonio import as_box, ports_from_dict, topology_from_dict

    data = load_json(path, "topology file")
    topo = topology_from_dict(data, path)
    return as_box(topo, ports_from_dict(data, topo, path), path)


def _with(group: Mapping, key: str, value: Any) -> LocDict:
    out = LocDict(group)
    out[key] = value
    out.line = getattr(group, "line", 0)
    out.lines = dict(getattr(group, "lines", {}))
    return out


def _fabric_options(ctx: _Ctx, top: Mapping) -> dict[str, object]:
    from forestcoll.topology.builtins import CLUSTER_PARAMS

    raw = top["fabric"]
    if isinstance(raw, str):
        raw = {"type": raw}
        spec: Mapping = raw
        parent, key = top, "fabric"
    else:
        spec = ctx.mapping(top, "fabric", "fabric", FABRIC_KEYS)
        parent, key = spec, None
    out: dict[str, object] = {}
    kind = spec.get("type", "switch")
    if kind not in FABRICS:
        raise ctx.fail(parent, key or "type", "fabric.type", f"unknown fabric {kind!r}; choose one of {', '.join(FABRICS)}")
    out["fabric"] = kind
    for k in ("rails", "spines", "leaf_ports"):
        if k in spec:
            out[k] = ctx.integer(spec, k, "fabric")
    if "oversub" in spec:
        try:
            out["oversub"] = CLUSTER_PARAMS["oversub"].parse(str(spec["oversub"]), "oversub")
        except ForestCollError as exc:
            raise ctx.fail(spec, "oversub", "fabric.oversub", str(exc).split(": ", 1)[-1]) from None
    return out


def _names(ctx: _Ctx, parent: Mapping, key: str, where: str) -> list[str]:
    value = parent[key]
    if isinstance(value, Mapping):
        spec = ctx.mapping(parent, key, _join(where, key), ("count", "prefix"))
        if "count" not in spec or "prefix" not in spec:
            raise ctx.fail(parent, key, _join(where, key), "expected {count: N, prefix: name}")
        n = ctx.integer(spec, "count", _join(where, key), lo=0)
        prefix = ctx.string(spec, "prefix", _join(where, key))
        return [f"{prefix}{i}" for i in range(n)]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ctx.fail(parent, key, _join(where, key), "expected a list of names or {count: N, prefix: name}")
    return list(value)


def _inline_box(ctx: _Ctx, group: Mapping, key: str, where: str) -> Box:
    spec = ctx.mapping(group, key, where, BOX_KEYS)
    if "compute" not in spec:
        raise ctx.fail(group, key, where, "missing 'compute'")
    compute = _names(ctx, spec, "compute", where)
    switches = _names(ctx, spec, "switches", where) if "switches" in spec else []
    names = compute + switches
    seen = set()
    for n in names:
        if n in seen:
            raise ctx.fail(spec, "compute", where, f"node {n!r} is defined twice")
        seen.add(n)
    nodes = [Node(n, COMPUTE) for n in compute] + [Node(n, "switch") for n in switches]
    links: list[Link] = []
    raw_links = spec.get("links", [])
    if not isinstance(raw_links, list):
        raise ctx.fail(spec, "links", _join(where, "links"), "expected a list")
    for i in range(len(raw_links)):
        lw = f"{_join(where, 'links')}[{i}]"
        item = ctx.mapping(raw_links, i, lw, LINK_KEYS)
        bw = ctx.bandwidth(item, "bandwidth", lw)
        cls = item.get("class", "")
        if not isinstance(cls, str):
            raise ctx.fail(item, "class", f"{lw}.class", "expected a string")
        latency = None
        if "latency_us" in item:
            try:
                latency = parse_latency(item["latency_us"], "latency_us")
            except ForestCollError as exc:
                raise ctx.fail(item, "latency_us", f"{lw}.latency_us", str(exc).split(": ", 1)[-1]) from None
        if "between" in item:
            if "from" in item or "to" in item:
                raise ctx.fail(item, "between", lw, "give 'between' or 'from' and 'to', not both")
            ends = item["between"]
            if not isinstance(ends, list) or len(ends) != 2 or not all(isinstance(e, str) for e in ends):
                raise ctx.fail(item, "between", f"{lw}.between", "expected two node names or patterns")
            pairs = _pairs(ctx, item, "between", lw, names, ends[0], ends[1])
            for a, b in pairs:
                links.append(Link(a, b, bw, cls, latency))
                links.append(Link(b, a, bw, cls, latency))
        else:
            for end in ("from", "to"):
                if end not in item or not isinstance(item[end], str):
                    raise ctx.fail(item, end if end in item else None, lw, f"missing '{end}' (or use 'between')")
            for a, b in _pairs(ctx, item, "from", lw, names, item["from"], item["to"]):
                links.append(Link(a, b, bw, cls, latency))
    ports: list[Port] = []
    raw_ports = spec.get("ports", [])
    if not isinstance(raw_ports, list):
        raise ctx.fail(spec, "ports", _join(where, "ports"), "expected a list")
    for i in range(len(raw_ports)):
        pw = f"{_join(where, 'ports')}[{i}]"
        item = ctx.mapping(raw_ports, i, pw, ("node", "nodes", "bandwidth"))
        bw = ctx.bandwidth(item, "bandwidth", pw)
        pattern = item.get("node", item.get("nodes"))
        if not isinstance(pattern, str):
            raise ctx.fail(item, None, pw, "give 'node' (a name) or 'nodes' (a pattern)")
        matched = sorted(fnmatch.filter(names, pattern), key=_natural) if any(c in pattern for c in "*?[") else [pattern]
        if not matched or matched[0] not in seen:
            raise ctx.fail(item, "node" if "node" in item else "nodes", pw, f"no node matches {pattern!r}")
        ports.extend(Port(m, bw) for m in matched)
    kind = ctx.string(spec, "kind", where) if "kind" in spec else "box"
    try:
        topo = make_topology(nodes, links, str(kind)) if len([n for n in nodes if n.kind == COMPUTE]) >= 2 else None
    except TopologyError as exc:
        raise ctx.fail(group, key, where, str(exc)) from None
    if topo is None:
        # a box with one compute node is fine inside a cluster: validate it there
        topo = _unchecked(nodes, links, str(kind))
    return Box(topo, tuple(ports), str(kind))


def _unchecked(nodes, links, name):
    from forestcoll.topology.model import Topology

    return Topology(tuple(nodes), tuple(links), name)


def _natural(name: str):
    import re

    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _pairs(ctx: _Ctx, item: Mapping, key: str, where: str, names: list[str], a: str, b: str) -> list[tuple[str, str]]:
    def match(pattern: str) -> list[str]:
        found = sorted(fnmatch.filter(names, pattern), key=_natural) if any(c in pattern for c in "*?[") else (
            [pattern] if pattern in names else [])
        if not found:
            raise ctx.fail(item, key, where, f"no node matches {pattern!r}")
        return found

    if a == b and not any(c in a for c in "*?["):
        raise ctx.fail(item, key, where, f"links {a!r} to itself; a link joins two different nodes")
    pairs = [(x, y) for x in match(a) for y in match(b) if x != y]  # patterns: every pair of different nodes
    if not pairs:
        raise ctx.fail(item, key, where, f"{a!r} and {b!r} match only the same node; a link joins two different nodes")
    return pairs


def read_topology_document(path: str, overrides: Mapping[str, str] | None = None):
    """Read a .json / .yaml / .yml topology file of either format."""
    return read_topology_file(path, overrides)[0]


def read_topology_file(path: str, overrides: Mapping[str, str] | None = None):
    """(the Topology of a .json / .yaml / .yml file of either format, the network ports of its one box or None).
    A plain file with ``ports`` is one box: ``overrides`` (nodes, fabric, ...) replicate it as they do an NCCL dump."""
    from forestcoll.topology.jsonio import as_box, ports_from_dict, topology_from_dict

    try:
        text = read_text(path, "topology file")
    except ForestCollError as exc:
        raise TopologyError(str(exc)) from None
    if path.lower().endswith(".json"):  # the fast parser first; YAML only for declarative files' line numbers
        try:
            data = json.loads(text, parse_float=Decimal)
        except json.JSONDecodeError as exc:
            raise TopologyError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
        except ValueError:  # an integer beyond Python's 4300-digit conversion limit
            raise TopologyError(f"{path}: a number has too many digits (see docs/limits.md)") from None
        except RecursionError:
            raise TopologyError(f"{path}: nested too deeply") from None
        if is_declarative(data):
            data = parse_document(text, path)
    else:
        data = parse_document(text, path)
    from forestcoll.fileio import kind_of, wrong_kind

    kind = kind_of(data)
    if not kind.name.startswith("topology") and (wrong := wrong_kind(path, "a topology", kind)):
        raise TopologyError(str(wrong))  # a schedule or a plan given as the topology
    if is_declarative(data):
        return load_declarative(data, path, overrides), None
    plain = _plain(data)
    topo = topology_from_dict(plain, path)
    topo = topo if topo.name else topo.renamed(path)
    ports = ports_from_dict(plain, topo, path)
    if not overrides:
        single = len({n.box for n in topo.nodes}) == 1
        return topo, (as_box(topo, ports, path).ports if ports and single else None)
    box = as_box(topo, ports, path)
    return _replicate(box, path, overrides), box.ports


def _replicate(box, path: str, overrides: Mapping[str, str]):
    """``nodes`` copies of a one-box file joined by the fabric the options name (default: one switch), as an NCCL
    dump is replicated."""
    from forestcoll.topology.builtins import CLUSTER_PARAMS, fabric_from_options

    parsed = {}
    for key, text in overrides.items():
        if key not in CLUSTER_PARAMS:
            raise TopologyError(f"{path}: unknown option {key!r}; a one-box topology file takes {', '.join(CLUSTER_PARAMS)}")
        parsed[key] = CLUSTER_PARAMS[key].parse(text, key)
    label = os.path.basename(path) + ":" + ",".join(f"{k}={v}" for k, v in overrides.items())
    return build_cluster([box] * int(parsed.get("nodes", 1)), fabric_from_options(parsed, Fabric("switch")), label)


def _plain(value: Any) -> Any:
    """Strip location wrappers (so the plain-format reader sees ordinary dicts and lists)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
