"""An independent check of a schedule against its topology.

It shares no code with the generator (nor with the bound's max-flow search):
it rebuilds every tree from the file, walks every path on the topology's links
and adds up loads with exact fractions.

Checks: ranks are the topology's compute nodes in order; each phase has the
trees it needs (every rank a root for allgather / reduce_scatter, only the
root for broadcast / reduce), and each root's chunks sum to ``k``; every tree
spans all compute nodes (an out-tree reaches all from its root; an in-tree
has one path from every node into its root); every path starts at ``src``,
ends at ``dst``, crosses switches only in between and uses real links.

Throughput: a tree moves chunks of M/(D*k) bytes (D = number of roots, M the
nccl-tests size S); a link carrying load L chunks in a phase needs
L*M/(D*k)/b seconds, so the phase takes max_links(L/b)*M/(D*k) and
algbw = M / sum over phases.  The claimed algbw must match exactly.  The
bound is taken from the cut the schedule names, B+(S)/|S cap roots|, computed
here from the links; when the reached rate equals it, the schedule is
certified optimal without trusting the generator.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from forestcoll.collectives import COLLECTIVES, PHASES
from forestcoll.progress import Progress, report
from forestcoll.rational import format_rational
from forestcoll.schedule import Schedule, ScheduleTree
from forestcoll.topology.model import Topology

__all__ = ["PhaseReport", "VerifyReport", "verify"]


@dataclass
class PhaseReport:
    """Loads and rates of one phase."""

    name: str
    trees: int
    max_load_ratio: Fraction  # max over links of load / bandwidth (chunks per GB/s)
    algbw: Fraction  # of this phase alone
    cut_algbw: Fraction | None  # the upper bound proved by the named cut, if any
    busiest_link: tuple[str, str] | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "trees": self.trees,
            "algbw_gbps": format_rational(self.algbw),
            "cut_bound_algbw_gbps": _fr(self.cut_algbw),
            "busiest_link": list(self.busiest_link) if self.busiest_link else None,
        }


@dataclass
class VerifyReport:
    """The verdict (a result, :mod:`forestcoll.results`): ``ok`` when no error was found, ``message`` the
    first error or the verdict; ``algbw`` is what the loads give."""

    ok: bool
    errors: list[str]
    algbw: Fraction | None
    claimed_algbw: Fraction
    bound_algbw: Fraction | None
    phases: list[PhaseReport] = field(default_factory=list)
    certified_optimal: bool = False

    @property
    def efficiency(self) -> Fraction | None:
        """Reached algbw / optimal algbw (1 when optimal)."""
        if self.algbw is None or not self.bound_algbw:
            return None
        return self.algbw / self.bound_algbw

    @property
    def message(self) -> str:
        if not self.ok:
            return self.errors[0]
        if self.certified_optimal:
            return "OK, optimal: the loads reach the bound of the schedule's own bottleneck cut"
        return "OK"

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": self.errors,
            "algbw_gbps": _fr(self.algbw),
            "claimed_algbw_gbps": format_rational(self.claimed_algbw),
            "bound_algbw_gbps": _fr(self.bound_algbw),
            "efficiency": _fr(self.efficiency),
            "certified_optimal": self.certified_optimal,
            "phases": [p.to_dict() for p in self.phases],
        }


def _fr(x: Fraction | None) -> str | None:
    return format_rational(x) if x is not None else None


def _check_tree(tree: ScheduleTree, topo: Topology, where: str, errors: list[str]) -> list[tuple[str, str]] | None:
    """Validate one tree's shape and paths; return the physical hops (with repeats) or None."""
    compute = set(topo.compute_nodes)
    cap = topo.capacity
    if tree.root not in compute:
        errors.append(f"{where}: root {tree.root!r} is not a compute node of the topology")
        return None
    hops: list[tuple[str, str]] = []
    parent: dict[str, str] = {}  # out-tree: child -> parent; in-tree: sender -> receiver
    ok = True
    for j, e in enumerate(tree.edges):
        ewhere = f"{where} edge {j} ({e.src} -> {e.dst})"
        if e.src not in compute or e.dst not in compute:
            errors.append(f"{ewhere}: both ends must be compute nodes")
            ok = False
            continue
        key = e.dst if tree.direction == "out" else e.src
        other = e.src if tree.direction == "out" else e.dst
        if key in parent:
            what = "receives twice" if tree.direction == "out" else "sends twice"
            errors.append(f"{ewhere}: {key} {what} in one tree")
            ok = False
        parent[key] = other
        path = e.path
        if len(path) < 2 or path[0] != e.src or path[-1] != e.dst:
            errors.append(f"{ewhere}: path must run from {e.src} to {e.dst}")
            ok = False
            continue
        for a, b in zip(path, path[1:]):
            if (a, b) not in cap:
                errors.append(f"{ewhere}: no link {a} -> {b}")
                ok = False
            hops.append((a, b))
        for mid in path[1:-1]:
            if mid in compute:
                errors.append(f"{ewhere}: path passes through compute node {mid} (only switches forward)")
                ok = False
            elif mid not in topo.index:
                errors.append(f"{ewhere}: unknown node {mid!r} on path")
                ok = False
    if tree.root in parent:
        errors.append(f"{where}: the root {tree.root} has a parent edge")
        ok = False
    missing = compute - set(parent) - {tree.root}
    if missing:
        errors.append(f"{where}: does not span {len(missing)} compute node(s), e.g. {sorted(missing)[0]}")
        ok = False
    # every node must lead to the root along parent pointers (no cycles)
    for v in parent:
        seen = set()
        x = v
        while x != tree.root:
            if x in seen or x not in parent:
                errors.append(f"{where}: {v} is not connected to the root (cycle or gap)")
                return None
            seen.add(x)
            x = parent[x]
    return hops if ok else None


def _cut_bound(topo: Topology, cut: tuple[str, ...], roots: set[str], reverse: bool) -> Fraction | None:
    """B+(S) / |S cap roots| for the named set (on the reversed links for in-tree phases)."""
    members = set(cut)
    if not members or not members <= set(topo.index):
        return None
    inside = len(members & roots)
    if inside == 0 or set(topo.compute_nodes) <= members:
        return None
    out = Fraction(0)
    for (a, b), bw in topo.capacity.items():
        if reverse:
            a, b = b, a
        if a in members and b not in members:
            out += bw
    return out / inside


def verify(schedule: Schedule, topo: Topology, progress: Progress | None = None) -> VerifyReport:
    """Check ``schedule`` on ``topo``; see the module docstring for what is checked.  ``progress``
    (:mod:`forestcoll.progress`) hears ``"checking <phase> trees"`` with the count of trees checked."""
    errors: list[str] = []
    if tuple(schedule.ranks) != topo.compute_nodes:
        if set(schedule.ranks) != set(topo.compute_nodes):
            missing = sorted(set(topo.compute_nodes) - set(schedule.ranks))
            extra = sorted(set(schedule.ranks) - set(topo.compute_nodes))
            errors.append(
                "ranks do not match the topology's compute nodes"
                + (f" (missing {missing[0]})" if missing else "")
                + (f" (unknown {extra[0]})" if extra else "")
            )
        else:
            errors.append("ranks list the topology's compute nodes in a different order")
    coll = COLLECTIVES.get(schedule.collective)
    expected = coll.phase_names if coll is not None else None
    names = tuple(p.name for p in schedule.phases)
    if expected is None or names != expected:
        errors.append(f"collective {schedule.collective} needs phases {expected}, found {names}")
        return VerifyReport(False, errors, None, schedule.algbw, None)
    if coll.rooted:
        if schedule.root not in topo.compute_nodes:
            errors.append(f"root {schedule.root!r} is not a compute node")
            return VerifyReport(False, errors, None, schedule.algbw, None)
        roots = {schedule.root}
    else:
        roots = set(topo.compute_nodes)
    k = schedule.k
    reports = []
    total_time = Fraction(0)  # per byte of M, times D*k: sum over phases of max(load/b)
    bound_time = Fraction(0)
    bound_known = True
    for phase in schedule.phases:
        trees = [(i, t) for i, t in enumerate(schedule.trees) if t.phase == phase.name]
        if phase.k != k:
            errors.append(f"phase {phase.name}: k={phase.k} differs from the schedule's k={k}")
        chunks: dict[str, int] = defaultdict(int)
        load: dict[tuple[str, str], int] = defaultdict(int)
        stage = f"checking {phase.name} trees"
        for done, (index, tree) in enumerate(trees):
            report(progress, stage, done, len(trees))
            where = f"{phase.name} tree {index} (root {tree.root})"
            if tree.direction != PHASES[phase.name].direction:
                errors.append(f"{where}: wrong direction")
                continue
            if tree.root not in roots:
                errors.append(f"{where}: {tree.root} is not a root of a {schedule.collective}")
                continue
            hops = _check_tree(tree, topo, where, errors)
            chunks[tree.root] += tree.chunks
            if hops is not None:
                for hop in hops:
                    load[hop] += tree.chunks
        for r in sorted(roots):
            if chunks.get(r, 0) != k:
                errors.append(f"phase {phase.name}: root {r} has {chunks.get(r, 0)} chunks, expected k={k}")
        cap = topo.capacity
        ratio = Fraction(0)
        busiest = None
        for hop, amount in load.items():
            if hop in cap and Fraction(amount) / cap[hop] > ratio:
                ratio = Fraction(amount) / cap[hop]
                busiest = hop
        d = len(roots)
        algbw = d * k / ratio if ratio else None
        reverse = PHASES[phase.name].reversed
        rate_bound = _cut_bound(topo, phase.bottleneck_cut, roots, reverse)
        cut_algbw = d * rate_bound if rate_bound is not None else None
        if algbw is None:
            errors.append(f"phase {phase.name}: no data moves")
        else:
            total_time += ratio / (d * k)
        if cut_algbw is None:
            bound_known = False
        else:
            bound_time += 1 / cut_algbw
        reports.append(PhaseReport(phase.name, len(trees), ratio, algbw or Fraction(0), cut_algbw, busiest))
    algbw = 1 / total_time if total_time else None
    if algbw is not None and algbw != schedule.algbw:
        errors.append(f"the schedule claims algbw {schedule.algbw} GB/s but its link loads give {algbw}")
    cut_bound = 1 / bound_time if bound_known and bound_time else None
    if cut_bound is not None and algbw is not None and algbw > cut_bound:
        errors.append(f"algbw {algbw} exceeds the bound {cut_bound} of its own bottleneck cut: the cut or the loads are wrong")
    if cut_bound is not None and cut_bound != schedule.bound_algbw:
        errors.append(f"the schedule claims bound {schedule.bound_algbw} GB/s but its bottleneck cut proves {cut_bound}")
    bound = cut_bound if cut_bound is not None else (schedule.bound_algbw or None)
    certified = bool(cut_bound is not None and algbw == cut_bound and not errors)
    return VerifyReport(not errors, errors, algbw, schedule.algbw, bound, reports, certified)
