"""Automorphisms a fabric has, declared or not: what the oracle, the splitter and the packer use.

Built-ins declare generators; files, NCCL dumps, ``--nodes`` clusters and YAML
fabrics usually do not, and the same fabric with nodes shuffled and renamed
must run as fast as the built-in.  So unless the declared generators already
make every compute node equivalent, bliss (via igraph) searches the fabric's
automorphisms -- nodes coloured by kind, each arc by its exact bandwidth -- and
:func:`forestcoll.graph.symmetry.free_subgroup` extracts a subgroup acting
freely on the compute nodes (what splitting and symmetric packing need).  The
detected group replaces the declared one when it has fewer compute orbits.

Cost: one bliss search per fabric (about 0.5 s at 1,024 GPUs, plus 0.3 s for
the canonical labelling), shared by the oracle's orbits
(:func:`automorphism_orbits`: orbits do not depend on the generators) and the
subgroup search, which enumerates the subgroup, at most one element per compute
node.  With declared generators, colour refinement may prove them complete and
spare bliss altogether.  On an asymmetric fabric both find nothing, and the run
proceeds without symmetry (one max-flow per compute node: the slower path, which
``--no-symmetry`` also takes).  Results are cached per fabric (its arcs and node
kinds) in the process, so a collective's phases and the bound share one search.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from forestcoll.graph.orbits import Perm, colour_refinement, orbits
from forestcoll.progress import Progress, report
from forestcoll.topology.model import Topology

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DETECT_MIN_RANKS", "FabricSymmetry", "automorphism_orbits", "fabric_symmetry", "full_automorphisms",
    "usable_symmetries",
]

DETECT_MIN_RANKS = 8  # below this, one max-flow per rank is cheaper than any search

_CACHE: OrderedDict[int, FabricSymmetry] = OrderedDict()
_CACHE_SIZE = 8


@dataclass(frozen=True)
class FabricSymmetry:
    """Generators found for one fabric: ``full`` (bliss: the whole group, for orbits) and ``free`` (a subgroup
    acting freely on the compute nodes), with the seconds spent and the compute orbits each leaves."""

    free: tuple[Perm, ...]
    seconds: float
    full_orbits: int
    free_orbits: int
    full_rows: np.ndarray = field(repr=False, compare=False)

    @property
    def full(self) -> tuple[Perm, ...]:
        """bliss's generators of the whole group, in the fabric's numbering (made from ``full_rows`` on use)."""
        return tuple(tuple(row) for row in self.full_rows.tolist())


def _remember(cache: OrderedDict, key: int, value):
    cache[key] = value
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return value


_KEYS: OrderedDict[int, tuple[weakref.ref, int]] = OrderedDict()


def _key(topo: Topology) -> int:
    """The caches' key: a hash of the fabric (node kinds and arcs), computed once per Topology object (hashing
    6,000 arcs with exact bandwidths costs about 8 ms at 1,024 GPUs, and a generate asks several times)."""
    hit = _KEYS.get(id(topo))
    if hit is not None and hit[0]() is topo:
        return hit[1]
    key = hash((topo.is_compute, topo.arcs))
    _remember(_KEYS, id(topo), (weakref.ref(topo), key))
    return key


def _compute_orbits(topo: Topology, gens) -> int:
    """Number of compute orbits of the group the generators span."""
    return _count(topo, orbits(len(topo.nodes), list(gens)))


@dataclass(frozen=True)
class _Canonical:
    """bliss on the fabric renumbered canonically: ``new[i]`` the canonical number of node ``i``, ``old`` its
    inverse, ``is_compute`` and ``arcs`` the fabric in the canonical numbering, ``canon`` the generators in it
    and ``full`` the same mapped back."""

    new: tuple[int, ...]
    old: tuple[int, ...]
    is_compute: tuple[bool, ...]
    arcs: tuple
    canon: np.ndarray
    full: np.ndarray


_FULL: OrderedDict[int, tuple[Perm, ...]] = OrderedDict()
_CANONICAL: OrderedDict[int, _Canonical] = OrderedDict()
_ORBITS: OrderedDict[int, tuple[int, ...]] = OrderedDict()


def full_automorphisms(topo: Topology) -> tuple[Perm, ...]:
    """bliss's generators of the whole automorphism group of ``topo`` in its own numbering (cached).  Which
    generators bliss returns depends on the numbering; callers that keep only *some* generators (the oracle's
    weight-preserving ones) use these, callers that need only the group use :func:`automorphism_orbits`."""
    key = _key(topo)
    hit = _FULL.get(key)
    if hit is None:
        from forestcoll.graph.symmetry import detect_automorphisms

        hit = _remember(_FULL, key, tuple(detect_automorphisms(len(topo.nodes), topo.is_compute, topo.arcs)))
    return hit


def _canonical_group(topo: Topology) -> _Canonical:
    """bliss in bliss's canonical numbering, so that any order or naming of the same fabric finds the same
    generators (what the free-subgroup search starts from; cached)."""
    key = _key(topo)
    hit = _CANONICAL.get(key)
    if hit is not None:
        return hit
    from forestcoll.graph.symmetry import automorphism_rows, canonical_order

    n = len(topo.nodes)
    new = canonical_order(n, topo.is_compute, topo.arcs)
    old = [0] * n
    for i, j in enumerate(new):
        old[j] = i
    is_compute = [topo.is_compute[old[j]] for j in range(n)]
    arcs = sorted((new[u], new[v], bw) for u, v, bw in topo.arcs)
    canon = automorphism_rows(n, is_compute, arcs)
    full = _to_fabric(old, new, canon)
    return _remember(_CANONICAL, key, _Canonical(tuple(new), tuple(old), tuple(is_compute), tuple(arcs), canon, full))


def _to_fabric(old: Sequence[int], new: Sequence[int], rows: np.ndarray) -> np.ndarray:
    """Permutations (rows) in the canonical numbering mapped back to the fabric's: row p becomes i -> old[p[new[i]]]."""
    import numpy as np

    return np.asarray(old, dtype=np.int64)[rows[:, np.asarray(new, dtype=np.int64)]]


def automorphism_orbits(topo: Topology) -> tuple[int, ...]:
    """Orbit of each node under the whole automorphism group (its smallest member), one bliss run per fabric.

    Orbits do not depend on the generators, so this takes whichever run the process already made for the
    fabric.  Failing that, with declared generators: none when colour refinement
    (:func:`~forestcoll.graph.symmetry.colour_refinement`) splits the nodes exactly into the declared orbits (each
    orbit of the whole group lies in one class and contains a declared orbit, so all three partitions agree:
    mi250's GCD positions), else bliss in the fabric's numbering (declared generators usually suffice for
    ``generate``: see :func:`usable_symmetries`).  With nothing declared, bliss in the canonical numbering: the
    free-subgroup search of ``generate`` needs that run next, so the fabric is searched once, not twice."""
    key = _key(topo)
    hit = _ORBITS.get(key)
    if hit is not None:
        return hit
    n = len(topo.nodes)
    canonical = _CANONICAL.get(key)
    if canonical is not None:
        gens = canonical.full
    elif key in _FULL:
        gens = _FULL[key]
    elif topo.symmetries:
        declared = orbits(n, list(topo.symmetries))
        classes = colour_refinement(n, topo.is_compute, topo.arcs)
        if len(set(zip(declared, classes))) == len(set(declared)) == len(set(classes)):
            # every orbit lies in a class and contains a declared orbit: classes = declared orbits = orbits
            return _remember(_ORBITS, key, tuple(declared))
        gens = full_automorphisms(topo)
    else:
        gens = _canonical_group(topo).full
    return _remember(_ORBITS, key, tuple(orbits(n, gens)))


def fabric_symmetry(topo: Topology, progress: Progress | None = None) -> FabricSymmetry:
    """Detected automorphisms of ``topo`` (cached per fabric in this process)."""
    key = _key(topo)
    hit = _CACHE.get(key)
    if hit is not None:
        _CACHE.move_to_end(key)
        return hit
    import numpy as np

    from forestcoll.graph.symmetry import free_subgroup

    report(progress, "finding symmetries", 0, 2)
    t0 = time.perf_counter()
    n = len(topo.nodes)
    found = _canonical_group(topo)
    report(progress, "finding symmetries", 1, 2)
    canon_free = free_subgroup(n, found.is_compute, found.canon, found.arcs)
    report(progress, "finding symmetries", 2, 2)

    rows = np.asarray(canon_free, dtype=np.int64).reshape(len(canon_free), n)
    free = tuple(tuple(p) for p in _to_fabric(found.old, found.new, rows).tolist())
    result = FabricSymmetry(free, time.perf_counter() - t0, _count(topo, automorphism_orbits(topo)),
                            _compute_orbits(topo, free), found.full)
    return _remember(_CACHE, key, result)


def _count(topo: Topology, orbit: Sequence[int]) -> int:
    """Number of compute orbits in an orbit labelling."""
    return len({orbit[i] for i in range(len(topo.nodes)) if topo.is_compute[i]})


def usable_symmetries(topo: Topology, progress: Progress | None = None) -> tuple[Perm, ...]:
    """Generators of a group acting freely on the compute nodes: the declared ones when they already make all
    compute nodes equivalent (or the fabric is small), else whichever of declared and detected leaves fewer
    compute orbits (declared on a tie).

    The detected free group is a subgroup of the whole automorphism group, so it leaves at least as many compute
    orbits as the whole group; when the whole group leaves no fewer than the declared generators, the declared
    ones win without the free-subgroup search (e.g. mi250, whose four GCD positions are not interchangeable)."""
    declared = tuple(topo.symmetries)
    if topo.num_compute <= DETECT_MIN_RANKS:
        return declared
    declared_orbits = _compute_orbits(topo, declared)
    if declared_orbits == 1 or _count(topo, automorphism_orbits(topo)) >= declared_orbits:
        return declared
    found = fabric_symmetry(topo, progress)
    return found.free if found.free_orbits < declared_orbits else declared
