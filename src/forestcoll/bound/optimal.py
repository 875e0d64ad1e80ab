"""The exact optimal throughput of a tree-based collective and the bottleneck cut(s) that prove it.

Each phase packs out-trees on the fabric or, for in-tree phases, on its
reverse; its optimal rate per unit root weight x* and certificate cut come
from :func:`~forestcoll.bound.dinkelbach.optimal_rate`.  Phases run one after
the other, so with D = sum of root weights

    algbw = D / (sum over phases of 1/x*)

(allgather and reduce-scatter N*x*; allreduce N/(1/x_rs + 1/x_ag); broadcast
and reduce x* = min over v of max-flow(root, v)); busbw follows nccl-tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from forestcoll import collectives
from forestcoll.collectives import Collective
from forestcoll.errors import UsageError
from forestcoll.rational import format_rational
from forestcoll.topology.model import Topology

if TYPE_CHECKING:  # the max-flow stack (numpy, ortools) loads when a phase is solved, not with Bound
    from forestcoll.bound.dinkelbach import RateResult
    from forestcoll.bound.oracle import Oracle

__all__ = ["Bound", "PhaseBound", "PreparedPhase", "optimal_bound", "phase_bound", "prepare_phase", "root_weights",
           "unbalanced_switches"]


@dataclass(frozen=True)
class PhaseBound:
    """One tree phase: out-trees on the fabric (allgather-like) or on its reverse (reduce-like)."""

    name: str
    rate: Fraction  # GB/s per unit root weight
    cut_nodes: tuple[str, ...]
    cut_bandwidth: Fraction
    cut_weight: int
    reversed: bool
    unbalanced: tuple[str, ...] = ()  # switches that may keep trees below the bound (see unbalanced_switches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rate_per_root_gbps": format_rational(self.rate),
            "bottleneck_cut": list(self.cut_nodes),
            "cut_bandwidth_gbps": format_rational(self.cut_bandwidth),
            "cut_roots": self.cut_weight,
            "reversed_links": self.reversed,
        }


@dataclass(frozen=True)
class Bound:
    """The optimal algbw of a collective (nccl-tests convention) with its certificate(s).

    A result (:mod:`forestcoll.results`): always ``ok``; ``message`` names the optimum and its bottleneck."""

    collective: str
    ranks: int
    algbw: Fraction
    busbw: Fraction
    phases: tuple[PhaseBound, ...]
    root: str | None = None

    @property
    def ok(self) -> bool:
        return True

    @property
    def message(self) -> str:
        p = self.phases[-1]
        return (f"optimal {self.collective} algbw {format_rational(self.algbw)} GB/s: the cut S of {p.name} holds "
                f"{p.cut_weight} root(s) with {format_rational(p.cut_bandwidth)} GB/s {'in' if p.reversed else 'out'}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "collective": self.collective,
            "ranks": self.ranks,
            "algbw_gbps": format_rational(self.algbw),
            "busbw_gbps": format_rational(self.busbw),
            "phases": [p.to_dict() for p in self.phases],
        }
        if self.root is not None:
            out["root"] = self.root
        return out


def root_weights(topo: Topology, collective: str | Collective, root: str | None) -> tuple[int, ...]:
    """Root weights: every compute node 1, or just ``root`` (the first rank by default) for a rooted collective."""
    if collectives.get(collective).rooted:
        if root is None:
            root = topo.compute_nodes[0]
        if root not in topo.index:
            raise UsageError(f"unknown root {root!r}; compute nodes are e.g. {', '.join(topo.compute_nodes[:4])}")
        if topo.kind(root) != "compute":
            raise UsageError(f"root {root!r} is a switch; pick a compute node")
        return tuple(1 if n.name == root else 0 for n in topo.nodes)
    return tuple(1 if c else 0 for c in topo.is_compute)


def unbalanced_switches(fabric: Topology) -> tuple[str, ...]:
    """Switches whose links can carry more out of them than into them.

    A switch cannot copy, so trees never use more of its out-links than of its
    in-links; max-flow does not see that, so on such fabrics the cut bound is
    an upper bound that trees may not reach (the generator then tells).
    """
    into, out = fabric.node_bandwidth
    return tuple(node.name for i, node in enumerate(fabric.nodes) if not fabric.is_compute[i] and out[i] > into[i])


@dataclass
class PreparedPhase:
    """A phase's fabric (reversed for in-tree phases), its oracle, and x* with its certificate cut."""

    fabric: Topology
    oracle: Oracle
    rate: RateResult
    unbalanced: tuple[str, ...] = ()


def prepare_phase(topo: Topology, weights: Sequence[int], reverse: bool, symmetry: bool = True) -> PreparedPhase:
    """Orient the fabric for the phase and compute x* exactly."""
    fabric = topo.reversed() if reverse else topo
    from forestcoll.bound.dinkelbach import optimal_rate
    from forestcoll.bound.oracle import Oracle

    oracle = Oracle.build(fabric, weights, symmetry)
    return PreparedPhase(fabric, oracle, optimal_rate(oracle), unbalanced_switches(fabric))


def phase_bound(topo: Topology, name: str, weights: Sequence[int], reverse: bool, symmetry: bool = True) -> PhaseBound:
    """The optimal rate of one phase, on the fabric or on its reverse."""
    prep = prepare_phase(topo, weights, reverse, symmetry)
    res = prep.rate
    names = tuple(prep.fabric.nodes[i].name for i in res.cut.nodes)
    return PhaseBound(name, res.rate, names, res.cut.bandwidth, res.cut.weight, reverse, prep.unbalanced)


def optimal_bound(topo: Topology, collective: str = "allgather", root: str | None = None, symmetry: bool = True) -> Bound:
    """The exact optimal algbw of ``collective`` on ``topo`` and the cut(s) that prove it.

    Each phase runs at its own x* (on the fabric for out-trees, on its reverse
    for in-trees) and the phases run one after the other, so with D = sum of
    root weights, algbw = D / sum over phases of 1/x*: allgather / reduce-scatter
    N*x*, allreduce N / (1/x_rs + 1/x_ag), broadcast / reduce x* = min over v of
    max-flow(root, v).  On a fabric equal to its reverse an in-tree phase has
    the rate and cut of the collective's out-tree phase.
    """
    coll = collectives.tree_collective(collective)
    weights = root_weights(topo, coll, root)
    found: dict[str, PhaseBound] = {}
    mirrored = []
    for ph in coll.phases:
        twin = coll.mirror_of(ph) if topo.is_symmetric() else None
        if twin is not None:
            mirrored.append((ph, twin))
        else:
            found[ph.name] = phase_bound(topo, ph.name, weights, ph.reversed, symmetry)
    for ph, twin in mirrored:
        found[ph.name] = replace(found[twin.name], name=ph.name, reversed=ph.reversed)
    phases = tuple(found[ph.name] for ph in coll.phases)
    algbw = sum(weights) / sum(1 / p.rate for p in phases)
    root_name = topo.nodes[weights.index(1)].name if coll.rooted else None
    n = topo.num_compute
    return Bound(coll.name, n, algbw, algbw * coll.bus_factor(n), phases, root_name)
