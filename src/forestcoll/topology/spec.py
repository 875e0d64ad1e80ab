"""Turning a user's topology argument into a Topology.

The argument is either a file (``*.json``) or a built-in spec
``NAME[:key=value,...]`` such as ``dgx-a100:nodes=2``.
"""

from __future__ import annotations

import os

from forestcoll.errors import TopologyError
from forestcoll.topology.builtins import build_builtin
from forestcoll.topology.jsonio import read_topology_json
from forestcoll.topology.model import Topology


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``NAME:key=value,...`` into the name and an ordered option dict."""
    name, _, rest = spec.strip().partition(":")
    options: dict[str, str] = {}
    if rest.strip():
        for part in rest.split(","):
            key, eq, value = part.partition("=")
            if not eq or not key.strip() or not value.strip():
                raise TopologyError(f"{spec!r}: options must look like key=value, got {part!r}")
            if key.strip() in options:
                raise TopologyError(f"{spec!r}: option {key.strip()!r} given twice")
            options[key.strip()] = value.strip()
    if not name:
        raise TopologyError("empty topology name")
    return name, options


def load_topology(spec: str | os.PathLike[str] | Topology) -> Topology:
    """A Topology from a Topology, a JSON file path or a built-in spec."""
    if isinstance(spec, Topology):
        return spec
    text = os.fspath(spec)
    if os.path.isfile(text) or text.lower().endswith(".json"):
        return read_topology_json(text)
    name, options = parse_spec(text)
    return build_builtin(name, options)
