"""Turning a user's topology argument into a Topology.

The argument is a built-in ``NAME[:key=value,...]`` (``dgx-h100:nodes=4,fabric=rail``)
or a file, optionally followed by the same options (``topo.xml:nodes=4,fabric=rail``):

* ``.json`` / ``.yaml`` / ``.yml``: the plain nodes/links file or the declarative
  box/fabric file (:mod:`forestcoll.topology.declarative`); a plain file of one box
  with ``ports`` (as ``forestcoll topo import`` writes it) replicates as a dump does;
* ``.xml``: an NCCL / RCCL topology dump, one box (:mod:`forestcoll.topology.nccl_xml`);
  ``nodes=N`` replicates it and joins the boxes' NICs with the fabric (default: one switch);
  ``bond_nic_ports=1`` (``--bond-nic-ports``) makes each NIC's ports one port of their summed bandwidth.

Options given on the command line (``--nodes``, ``--fabric``) merge into the spec's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from forestcoll.errors import TopologyError
from forestcoll.topology.model import Topology

__all__ = ["Imported", "import_topology", "load_topology", "parse_options", "parse_spec", "resolve_spec", "split_file_spec"]

FILE_SUFFIXES = (".json", ".yaml", ".yml", ".xml")


def parse_options(spec: str, rest: str) -> dict[str, str]:
    """``key=value,key=value`` into an ordered dict, with one-line errors."""
    options: dict[str, str] = {}
    if rest.strip():
        for part in rest.split(","):
            key, eq, value = part.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise TopologyError(f"{spec!r}: options must look like key=value, got {part!r}")
            if key.strip() in options:
                raise TopologyError(f"{spec!r}: option {key.strip()!r} given twice")
            options[key.strip()] = value.strip()
    return options


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``NAME:key=value,...`` into the name and an ordered option dict."""
    name, _, rest = spec.strip().partition(":")
    if not name:
        raise TopologyError("empty topology name")
    return name, parse_options(spec, rest)


def split_file_spec(spec: str) -> tuple[str, dict[str, str]] | None:
    """(path, options) when ``spec`` names a file, possibly followed by ``:options``; else None."""
    text = spec.strip()
    if os.path.isfile(text) or text.lower().endswith(FILE_SUFFIXES):
        return text, {}
    for i, ch in enumerate(text):
        if ch == ":":
            head = text[:i]
            if os.path.isfile(head) or head.lower().endswith(FILE_SUFFIXES):
                return head, parse_options(spec, text[i + 1 :])
    return None


def _merge(spec: str, options: dict[str, str], extra: Mapping[str, str] | None) -> dict[str, str]:
    merged = dict(options)
    for key, value in (extra or {}).items():
        if key in merged and merged[key] != value:
            raise TopologyError(f"{spec!r}: {key} is given both in the spec ({merged[key]}) and as --{key.replace('_', '-')} ({value})")
        merged[key] = value
    return merged


def resolve_spec(spec: str, extra: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(a spec that loads the same topology from any directory, the file's absolute path or None): a file's path
    made absolute, and ``extra`` options (``--nodes``) merged into the spec's."""
    text = os.fspath(spec)
    found = split_file_spec(text)
    if found is None:
        name, options = parse_spec(text)
        path = None
    else:
        name, options = found
        name = path = os.path.abspath(name)
    options = _merge(text, options, extra)
    return name + (":" + ",".join(f"{k}={v}" for k, v in options.items()) if options else ""), path


def load_topology(spec, extra: Mapping[str, str] | None = None) -> Topology:
    """A Topology from a Topology, an :class:`Imported`, a file (with options) or a built-in spec; ``extra`` adds
    options."""
    return import_topology(spec, extra).topology


@dataclass(frozen=True)
class Imported:
    """A loaded topology and, when it came from an NCCL/RCCL dump, the network ports of one box."""

    topology: Topology
    ports: tuple | None = None  # of forestcoll.topology.cluster.Port
    warnings: tuple[str, ...] = ()  # implausible parts of an imported dump (the CLI prints them on stderr)
    notes: tuple[str, ...] = ()  # what an import option did, or that it did nothing (the CLI prints them on stderr)
    spec: str = ""  # the spec or file (with its options) it was imported from; "" for a Topology given built


def import_topology(spec, extra: Mapping[str, str] | None = None) -> Imported:
    """:func:`load_topology`, keeping what an import learnt beyond the fabric (the dump's NIC ports); an Imported
    given is returned as it is (a file imported once is not read again)."""
    if isinstance(spec, (Topology, Imported)):
        if extra:
            raise TopologyError("options such as --nodes need a topology spec or file, not a built Topology")
        return spec if isinstance(spec, Imported) else Imported(spec)
    text = os.fspath(spec)
    found = split_file_spec(text)
    if found is not None:
        path, options = found
        options = _merge(text, options, extra)
        if path.lower().endswith(".xml"):
            return replace(_load_xml(path, options), spec=text)
        _no_bond(text, options)
        from forestcoll.topology.declarative import read_topology_file

        return Imported(*read_topology_file(path, options or None), spec=text)
    from forestcoll.topology.builtins import build_builtin

    name, options = parse_spec(text)
    options = _merge(text, options, extra)
    _no_bond(text, options)
    return Imported(build_builtin(name, options), spec=text)


BOND = "bond_nic_ports"  # the spec option of --bond-nic-ports


def _no_bond(spec: str, options: Mapping[str, str]) -> None:
    """Refuse ``bond_nic_ports`` for what is not an NCCL/RCCL dump (built-ins and JSON/YAML files name their ports)."""
    if BOND in options:
        raise TopologyError(f"{spec!r}: {BOND} (--bond-nic-ports) applies to NCCL/RCCL topology dumps (.xml) only")


def _bond_option(path: str, options: dict[str, str]) -> bool:
    """The value of ``bond_nic_ports`` (removed from ``options``): 1 bonds each NIC's ports, 0 (the default) not."""
    value = options.pop(BOND, "0")
    if value not in ("0", "1"):
        raise TopologyError(f"{path}: {BOND} must be 0 or 1, got {value!r}")
    return value == "1"


def _load_xml(path: str, options: dict[str, str]) -> Imported:
    from forestcoll.topology.builtins import CLUSTER_PARAMS, fabric_from_options
    from forestcoll.topology.cluster import Fabric, build_cluster
    from forestcoll.topology.nccl_xml import import_nccl_xml

    label = os.path.basename(path) + ("" if not options else ":" + ",".join(f"{k}={v}" for k, v in options.items()))
    options = dict(options)
    bond = _bond_option(path, options)
    parsed = {}
    for key, text in options.items():
        if key not in CLUSTER_PARAMS:
            raise TopologyError(f"{path}: unknown option {key!r}; an NCCL topology file takes {', '.join((*CLUSTER_PARAMS, BOND))}")
        parsed[key] = CLUSTER_PARAMS[key].parse(text, key)
    box = import_nccl_xml(path, bond_ports=bond)
    nodes = int(parsed.get("nodes", 1))
    notes = tuple(box.notes)
    if nodes == 1 and "fabric" in parsed:
        notes += (f"{path}: one box (nodes=1): the fabric {options['fabric']!r} joins boxes and changes nothing here "
                  "(--nodes N for N boxes)",)
    return Imported(build_cluster([box] * nodes, fabric_from_options(parsed, Fabric("switch")), label), box.ports,
                    box.warnings, notes)
