"""Automorphisms a fabric has, declared or not: what the oracle, the splitter and the packer use.

Built-ins declare generators; files, NCCL dumps, ``--nodes`` clusters and YAML
fabrics usually do not, and the same fabric with nodes shuffled and renamed
must run as fast as the built-in.  So unless the declared generators already
make every compute node equivalent, bliss (via igraph) searches the fabric's
automorphisms -- nodes coloured by kind, each arc by its exact bandwidth -- and
:func:`forestcoll.graph.symmetry.free_subgroup` extracts a subgroup acting
freely on the compute nodes (what splitting and symmetric packing need).  The
detected group replaces the declared one when it has fewer compute orbits.

Cost: bliss is near-linear on these graphs (about 0.1 s at 1,024 GPUs); the
subgroup search enumerates the subgroup, at most one element per compute node.
On an asymmetric fabric both find nothing, and the run proceeds without
symmetry (one max-flow per compute node: the slower path, which ``--no-symmetry``
also takes).  Results are cached per fabric (its arcs and node kinds) in the
process, so a collective's phases and the bound share one search.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from forestcoll.graph.symmetry import Perm, canonical_order, detect_automorphisms, free_subgroup, orbits
from forestcoll.progress import Progress, report
from forestcoll.topology.model import Topology

__all__ = ["DETECT_MIN_RANKS", "FabricSymmetry", "fabric_symmetry", "full_automorphisms", "usable_symmetries"]

DETECT_MIN_RANKS = 8  # below this, one max-flow per rank is cheaper than any search

_CACHE: OrderedDict[int, FabricSymmetry] = OrderedDict()
_CACHE_SIZE = 8


@dataclass(frozen=True)
class FabricSymmetry:
    """Generators found for one fabric: ``full`` (bliss: the whole group, for orbits) and ``free`` (a subgroup
    acting freely on the compute nodes), with the seconds spent and the compute orbits each leaves."""

    full: tuple[Perm, ...]
    free: tuple[Perm, ...]
    seconds: float
    full_orbits: int
    free_orbits: int


def _key(topo: Topology) -> int:
    return hash((topo.is_compute, topo.arcs))


def _compute_orbits(n: int, is_compute, gens) -> int:
    orbit = orbits(n, list(gens))
    return len({orbit[i] for i in range(n) if is_compute[i]})


_FULL: OrderedDict[int, tuple[Perm, ...]] = OrderedDict()


def full_automorphisms(topo: Topology) -> tuple[Perm, ...]:
    """bliss's generators of the whole automorphism group of ``topo`` (what the oracle's orbits need; cached)."""
    key = _key(topo)
    hit = _FULL.get(key)
    if hit is None:
        hit = _FULL[key] = tuple(detect_automorphisms(len(topo.nodes), topo.is_compute, topo.arcs))
        while len(_FULL) > _CACHE_SIZE:
            _FULL.popitem(last=False)
    return hit


def fabric_symmetry(topo: Topology, progress: Progress | None = None) -> FabricSymmetry:
    """Detected automorphisms of ``topo`` (cached per fabric in this process)."""
    key = _key(topo)
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    report(progress, "finding symmetries", 0, 2)
    t0 = time.perf_counter()
    n = len(topo.nodes)
    # search in bliss's canonical numbering, so that any order or naming of the same fabric finds the same group
    new = canonical_order(n, topo.is_compute, topo.arcs)
    old = [0] * n
    for i, j in enumerate(new):
        old[j] = i
    is_compute = [topo.is_compute[old[j]] for j in range(n)]
    arcs = sorted((new[u], new[v], bw) for u, v, bw in topo.arcs)
    canon_full = detect_automorphisms(n, is_compute, arcs)
    report(progress, "finding symmetries", 1, 2)
    canon_free = free_subgroup(n, is_compute, canon_full, arcs)
    report(progress, "finding symmetries", 2, 2)

    old_a, new_a = np.asarray(old, dtype=np.int64), np.asarray(new, dtype=np.int64)

    def back(p: Perm) -> Perm:
        return tuple(old_a[np.asarray(p, dtype=np.int64)[new_a]].tolist())

    full = tuple(back(p) for p in canon_full)
    free = tuple(back(p) for p in canon_free)
    found = FabricSymmetry(full, free, time.perf_counter() - t0,
                           _compute_orbits(n, topo.is_compute, full), _compute_orbits(n, topo.is_compute, free))
    _CACHE[key] = found
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return found


def usable_symmetries(topo: Topology, progress: Progress | None = None) -> tuple[Perm, ...]:
    """Generators of a group acting freely on the compute nodes: the declared ones when they already make all
    compute nodes equivalent (or the fabric is small), else whichever of declared and detected leaves fewer
    compute orbits (declared on a tie)."""
    n = len(topo.nodes)
    declared = tuple(topo.symmetries)
    if topo.num_compute <= DETECT_MIN_RANKS:
        return declared
    declared_orbits = _compute_orbits(n, topo.is_compute, declared)
    if declared_orbits == 1:
        return declared
    found = fabric_symmetry(topo, progress)
    return found.free if found.free_orbits < declared_orbits else declared
