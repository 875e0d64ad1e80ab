"""The names of the fabrics that join boxes, in a module that imports nothing: ``--fabric``'s choices, so that
building the parser (``forestcoll --help``) does not load the topology model (:mod:`forestcoll.topology.cluster`
builds them)."""

from __future__ import annotations

__all__ = ["FABRICS"]

FABRICS = ("switch", "rail", "leaf-spine", "fat-tree", "mesh")
