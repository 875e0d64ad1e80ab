"""The export flags a fabric's GPU fills in: ``--runtime`` and ``--max-threadblocks`` when not given."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["fabric_options"]


def fabric_options(options: Any, topo: Any, args: argparse.Namespace) -> Any:
    """``options`` for the fabric's GPU (:func:`forestcoll.msccl.fabric.fabric_options`), the flags winning;
    ``topo`` None: the topology the flags name (read without its importer's warnings, which the command prints)."""
    from forestcoll.msccl.fabric import fabric_options as for_fabric

    if topo is None:
        from forestcoll.cli.commands import cluster_options
        from forestcoll.topology import load_topology

        topo = load_topology(args.topology, cluster_options(args))
    return for_fabric(options, topo, getattr(args, "runtime", None), getattr(args, "max_threadblocks", None))
