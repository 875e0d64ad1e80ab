"""The export flags a fabric's GPU fills in: ``--runtime`` and ``--max-threadblocks`` when not given."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["fabric_options"]


def fabric_options(options: Any, topo: Any, args: argparse.Namespace) -> Any:
    """``options`` for the fabric ``topo``'s GPU (:func:`forestcoll.msccl.fabric.fabric_options`), the flags
    winning (the command loads ``topo`` once and passes it on)."""
    from forestcoll.msccl.fabric import fabric_options as for_fabric

    return for_fabric(options, topo, getattr(args, "runtime", None), getattr(args, "max_threadblocks", None))
