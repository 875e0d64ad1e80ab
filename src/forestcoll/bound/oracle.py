"""The max-flow oracle of the cut condition: is a rate (or an integer capacity) feasible for given roots?

Roots carry integer weights ``w`` (every rank 1 for allgather; the root 1 for
broadcast) and ``D = sum(w)``.  A super-source ``s`` gets an arc ``s -> c`` of
capacity ``x*w(c)`` to every root; then every cut has capacity ``>= x*D`` iff
``B+(S) >= x*w(S)`` for every node set S, so a rate ``x`` per unit weight is
feasible iff

    max-flow(s, v) >= x*D   for every compute node v            (ForestColl, Theorem 1)

and a violated target's min cut names a set S with ``B+(S) < x*w(S)``.  By
symmetry only one target per orbit of the automorphisms that preserve the
weights is tested (declared symmetries, then bliss on larger fabrics).  The
max-flows run on integers (bandwidths scaled by the lcm of their denominators).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from forestcoll.bound.automorphisms import DETECT_MIN_RANKS, automorphism_orbits, full_automorphisms
from forestcoll.errors import UsageError
from forestcoll.graph.maxflow import FlowNetwork, check_capacities
from forestcoll.graph.symmetry import orbit_cycles, orbits
from forestcoll.rational import lcm_of_denominators
from forestcoll.topology.model import Topology

__all__ = ["Cut", "Oracle"]


@dataclass(frozen=True)
class Cut:
    """A node set S (indices) with its outgoing bandwidth B+(S) and root weight w(S)."""

    nodes: tuple[int, ...]
    bandwidth: Fraction
    weight: int

    @property
    def ratio(self) -> Fraction:
        return self.bandwidth / self.weight

@dataclass
class Oracle:
    """Max-flow tests of the cut condition for one topology and root weights.

    Node ``n`` (one past the topology's nodes) is the super-source.  ``targets``
    are the compute nodes that must be tested: one per orbit of the declared or
    detected automorphisms that preserve the weights.
    """

    topo: Topology
    weights: tuple[int, ...]
    targets: tuple[int, ...]
    net: FlowNetwork
    roots: tuple[int, ...]
    maxflows: int = 0
    scale: int = 1
    cuts_seen: list[tuple[bool, ...]] = field(default_factory=list)

    @classmethod
    def build(cls, topo: Topology, weights: Sequence[int], symmetry: bool = True) -> Oracle:
        n = len(topo.nodes)
        weights = tuple(int(w) for w in weights)
        if len(weights) != n or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise UsageError("root weights must be non-negative, one per node, with a positive total")
        for i, w in enumerate(weights):
            if w and not topo.is_compute[i]:
                raise UsageError(f"switch {topo.nodes[i].name!r} cannot be a root")
        roots = tuple(i for i in range(n) if weights[i] > 0)
        arcs = topo.arcs
        tails = [u for u, _, _ in arcs] + [n] * len(roots)
        heads = [v for _, v, _ in arcs] + list(roots)
        net = FlowNetwork(n + 1, tails, heads)
        targets = _orbit_targets(topo, weights, symmetry)
        scale = lcm_of_denominators(bw for _, _, bw in arcs)
        return cls(topo, weights, targets, net, roots, scale=scale)

    @property
    def total_weight(self) -> int:
        return sum(self.weights)

    def violated_cuts(
        self, arc_caps: Sequence[int], root_caps: Sequence[int], need: int, all_targets: bool = True
    ) -> list[tuple[int, tuple[bool, ...]]]:
        """Source sides (without the super-source) of min cuts below ``need``, one per failing target."""
        caps = list(arc_caps) + list(root_caps)
        check_capacities(caps)
        source = len(self.topo.nodes)
        found = []
        for v in self.targets:
            self.maxflows += 1
            if self.net.value(caps, source, v) >= need:
                continue
            value, mask = self.net.min_cut(caps, source, v)
            self.maxflows += 1
            found.append((value, tuple(mask[:-1])))
            if not all_targets:
                break
        return found

    def cut_of(self, mask: Sequence[bool]) -> Cut:
        """The Cut object (exact bandwidth and weight) of a node mask."""
        bw = sum((b for u, v, b in self.topo.arcs if mask[u] and not mask[v]), Fraction(0))
        weight = sum(w for w, m in zip(self.weights, mask) if m)
        return Cut(tuple(i for i, m in enumerate(mask) if m), bw, weight)


def _orbit_targets(topo: Topology, weights: Sequence[int], symmetry: bool) -> tuple[int, ...]:
    """The first compute node of each orbit of the automorphisms that preserve the weights: the declared ones,
    joined (past DETECT_MIN_RANKS ranks, when they leave several orbits) with bliss's generators.  When every
    rank weighs the same every automorphism preserves the weights and the orbits are the whole group's, whatever
    its generators (:func:`~forestcoll.bound.automorphisms.automorphism_orbits`: one search per fabric, shared
    with ``generate``); otherwise the bliss generators that preserve the weights are kept, as found in the
    fabric's own numbering."""
    n = len(topo.nodes)
    compute = [i for i in range(n) if topo.is_compute[i]]
    if not symmetry:
        return tuple(compute)
    w = np.asarray(weights, dtype=np.int64)

    def invariant(perms):
        return [p for p in perms if np.array_equal(w[np.asarray(p, dtype=np.int64)], w)]

    gens = invariant(topo.symmetries)
    orbit = orbits(n, gens)
    if len({orbit[c] for c in compute}) > 1 and len(compute) > DETECT_MIN_RANKS:
        if len({weights[c] for c in compute}) == 1:  # switches weigh 0 (checked in build): all weights kept
            whole = automorphism_orbits(topo)
            orbit = orbits(n, gens + [orbit_cycles(whole)])
        else:
            orbit = orbits(n, gens + invariant(full_automorphisms(topo)))
    seen: set[int] = set()
    targets = []
    for c in compute:
        if orbit[c] not in seen:
            seen.add(orbit[c])
            targets.append(c)
    return tuple(targets)
