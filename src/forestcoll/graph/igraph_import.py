"""igraph without its drawing back end: ``import_igraph()`` keeps matplotlib out of the process.

``import igraph`` (0.11 to 1.0) imports ``matplotlib.pyplot`` through ``igraph.drawing`` whenever
matplotlib is installed, which costs 0.5-1 s before the first automorphism is computed.  forestcoll
never draws with igraph, so it imports igraph while ``matplotlib`` is marked absent in
``sys.modules`` (igraph then stubs its drawing helpers) and removes the mark at once: matplotlib stays
importable for forestcoll's own plots.  igraph's ``plot`` is unavailable in a process that imported
igraph this way; when matplotlib is already loaded, igraph is imported as usual.
"""

from __future__ import annotations

import sys
from types import ModuleType

__all__ = ["import_igraph"]


def import_igraph() -> ModuleType:
    """The ``igraph`` module, imported (once) without ``matplotlib``."""
    loaded = sys.modules.get("igraph")
    if loaded is not None:
        return loaded
    if "matplotlib" in sys.modules:  # already paid for: nothing to save
        import igraph

        return igraph
    sys.modules["matplotlib"] = None  # type: ignore[assignment]  # `import matplotlib` now raises ImportError
    try:
        import igraph
    finally:
        if sys.modules.get("matplotlib", 0) is None:
            del sys.modules["matplotlib"]
    return igraph
