"""An independent check of a schedule against its topology.

It shares no code with the generator (nor with the bound's max-flow search):
it rebuilds every tree from the file, walks every path on the topology's links
and adds up loads with exact fractions.

Checks: ranks are the topology's compute nodes in order; each phase has the
trees it needs (every rank a root for allgather / reduce_scatter, only the
root for broadcast / reduce), and each root's chunks sum to ``k`` (``k*w_i``
for a schedule with shard weights w, :attr:`Schedule.shard_weights`); every tree
spans all compute nodes (an out-tree reaches all from its root; an in-tree
has one path from every node into its root); every path starts at ``src``,
ends at ``dst``, crosses switches only in between and uses real links.

Throughput: a tree moves chunks of M/(D*k) bytes (D = number of roots, or the
sum of the shard weights, M the nccl-tests size S); a link carrying load L
chunks in a phase needs L*M/(D*k)/b seconds, so the phase takes
max_links(L/b)*M/(D*k) and algbw = M / sum over phases.  The claimed algbw must
match exactly.  The bound is taken from the cut the schedule names,
D*B+(S)/w(S cap roots) (w(X): the roots' weights in X, |X| for equal shards),
computed here from the links; when the reached rate equals it, the schedule is
certified optimal for its shards without trusting the generator (with weights:
optimal among schedules with those shards, the rate
:func:`forestcoll.bound.shards.weighted_allreduce` computes).
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


def _cut_bound(topo: Topology, cut: tuple[str, ...], roots: dict[str, int], reverse: bool) -> Fraction | None:
    """B+(S) / w(S cap roots) for the named set (on the reversed links for in-tree phases); ``roots`` maps each
    root to its weight (1 for equal shards)."""
    members = set(cut)
    if not members or not members <= set(topo.index):
        return None
    inside = sum(w for r, w in roots.items() if r in members)
    if inside == 0 or set(topo.compute_nodes) <= members:
        return None
    out = Fraction(0)
    for (a, b), bw in topo.capacity.items():
        if reverse:
            a, b = b, a
        if a in members and b not in members:
            out += bw
    return out / inside


class _Orbits:
    """A version-2 schedule's group, proved to act on ``topo`` by automorphisms, and its orbits on the links.

    Each generator is checked link by link (it maps every link to a link of the same bandwidth and compute nodes
    to compute nodes; nodes the file does not list stay fixed), so every element of the group they generate is
    an automorphism too, and a tree's image under one is a tree of the same kind: spanning, on real links,
    through switches only.  The link orbits come from the generators (union-find); by orbit-stabilizer, the |E|
    images of one hop h cover each link of h's orbit exactly |E| / |orbit| times."""

    def __init__(self, names: tuple[str, ...], generators, topo: Topology) -> None:
        from forestcoll.schedule_v2 import elements

        self.names = names
        self.index = {x: i for i, x in enumerate(names)}
        self.problem: str | None = None
        self.table = None
        unknown = [x for x in names if x not in topo.index]
        if unknown:
            self.problem = f"node {unknown[0]!r} of the file's 'nodes' is not in the topology"
            return
        links = list(topo.capacity)
        self.link_id = {hop: i for i, hop in enumerate(links)}
        parent = list(range(len(links)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        compute = set(topo.compute_nodes)
        for gi, g in enumerate(generators):
            rename = {x: names[g[i]] for i, x in enumerate(names)}
            for c in compute:
                if rename.get(c, c) not in compute:
                    self.problem = f"generators[{gi}] maps compute node {c} to {rename.get(c, c)}, not a compute node"
                    return
            for i, (a, b) in enumerate(links):
                image = (rename.get(a, a), rename.get(b, b))
                j = self.link_id.get(image)
                if j is None or topo.capacity[image] != topo.capacity[(a, b)]:
                    self.problem = (f"generators[{gi}] is not an automorphism of the topology: it maps link {a} -> {b} "
                                    f"to {image[0]} -> {image[1]}, " + ("not a link" if j is None else
                                                                        "a link of another bandwidth"))
                    return
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
        self.table = elements(list(generators), len(names)) if generators else None
        self.order = len(self.table) if self.table is not None else 1
        self.orbit = [find(i) for i in range(len(links))]
        size: dict[int, int] = defaultdict(int)
        for o in self.orbit:
            size[o] += 1
        self.orbit_size = dict(size)
        self.members: dict[int, list[tuple[str, str]]] = defaultdict(list)
        for hop, o in zip(links, self.orbit):
            self.members[o].append(hop)
        for count in size.values():
            if self.order % count:
                self.problem = f"a link orbit of {count} links under a group of {self.order} elements (not a group)"
                return

    def image_names(self, j: int, node: str) -> str:
        return self.names[int(self.table[j, self.index[node]])] if j and node in self.index else node


def _expanded(schedule: Schedule) -> Schedule:
    """A version-2 schedule read without expanding, expanded (the tree-by-tree check)."""
    from dataclasses import replace

    from forestcoll.schedule_v2 import expand

    assert schedule.symmetry is not None and schedule.templates is not None
    names, gens = schedule.symmetry
    return replace(schedule, trees=tuple(expand(list(schedule.templates), names, gens)), templates=None)


def _orbit_phase(schedule: Schedule, group: _Orbits, topo: Topology, phase: str, roots: set[str], errors: list[str],
                 progress: Progress | None):
    """(trees, chunks per root, load per link) of one phase of a version-2 schedule, template by template: each
    template is checked as a tree; its images are trees by the automorphisms, their roots and chunks are counted
    from the element table and their link loads per link orbit."""
    chunks: dict[str, int] = defaultdict(int)
    load: dict[tuple[str, str], int] = defaultdict(int)
    orbit_load: dict[int, int] = defaultdict(int)
    count = 0
    templates = [(i, t, images) for i, (t, images) in enumerate(schedule.templates or ()) if t.phase == phase]
    stage = f"checking {phase} trees"
    for done, (index, tree, images) in enumerate(templates):
        report(progress, stage, done, len(templates))
        where = f"{phase} template {index} (root {tree.root})"
        if tree.direction != PHASES[phase].direction:
            errors.append(f"{where}: wrong direction")
            continue
        chosen = range(group.order) if images == "all" else images
        if images == "all" and group.table is not None:
            image_roots = [group.names[r] for r in group.table[:, group.index[tree.root]].tolist()]
        else:
            image_roots = [group.image_names(j, tree.root) for j in chosen]
        count += len(image_roots)
        bad = next((r for r in image_roots if r not in roots), None)
        if bad is not None:
            errors.append(f"{where}: an image of it is rooted at {bad}, not a root of a {schedule.collective}")
            continue
        hops = _check_tree(tree, topo, where, errors)
        for r in image_roots:
            chunks[r] += tree.chunks
        if hops is None:
            continue
        if images == "all":
            for hop in hops:
                o = group.orbit[group.link_id[hop]]
                orbit_load[o] += tree.chunks * (group.order // group.orbit_size[o])
        else:
            for j in images:
                for a, b in hops:
                    load[(group.image_names(j, a), group.image_names(j, b))] += tree.chunks
    for o, amount in orbit_load.items():
        for hop in group.members[o]:
            load[hop] += amount
    return count, chunks, load


def _first_busiest(schedule: Schedule, group: _Orbits, phase: str, load, ratio: Fraction, cap) -> tuple[str, str] | None:
    """The first link at ``ratio`` in the expanded trees' order (templates in order, each one's images in order,
    hops in order): the link the tree-by-tree check reports as the busiest."""
    for tree, images in schedule.templates or ():
        if tree.phase != phase:
            continue
        hops = [(a, b) for e in tree.edges for a, b in zip(e.path, e.path[1:])]
        for j in (range(group.order) if images == "all" else images):
            for a, b in hops:
                hop = (group.image_names(j, a), group.image_names(j, b))
                if hop in cap and Fraction(load.get(hop, 0)) / cap[hop] == ratio:
                    return hop
    return None


def _root_weights(schedule: Schedule, roots: set[str], errors: list[str]) -> dict[str, int]:
    """Each root's shard weight: the schedule's ``shard_weights`` by rank (all 1 when it has none, or for a rooted
    collective, whose one root holds the whole buffer); a mismatch is an error, and equal weights are used then."""
    ws = schedule.shard_weights
    if ws is None or roots == {schedule.root}:
        return {r: 1 for r in roots}
    if len(ws) != len(schedule.ranks) or not all(isinstance(w, int) and w >= 1 for w in ws):
        errors.append(f"shard_weights must be {len(schedule.ranks)} positive integers, one per rank")
        return {r: 1 for r in roots}
    given = dict(zip(schedule.ranks, ws))
    return {r: given.get(r, 1) for r in roots}


def verify(schedule: Schedule, topo: Topology, progress: Progress | None = None) -> VerifyReport:
    """Check ``schedule`` on ``topo``; see the module docstring for what is checked.  ``progress``
    (:mod:`forestcoll.progress`) hears ``"checking <phase> trees"`` with the count of trees checked.

    A version-2 schedule read without expanding (:attr:`Schedule.templates`) is checked orbit by orbit when its
    generators prove to be automorphisms of ``topo`` (:class:`_Orbits`): the same verdict, loads and rates as
    the expanded trees give, in time linear in the templates and links; otherwise it is expanded and checked
    tree by tree."""
    group = None
    if schedule.templates is not None:
        assert schedule.symmetry is not None
        group = _Orbits(schedule.symmetry[0], schedule.symmetry[1], topo)
        if group.problem is not None:
            schedule, group = _expanded(schedule), None
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
    weight = _root_weights(schedule, roots, errors)
    k = schedule.k
    reports = []
    total_time = Fraction(0)  # per byte of M, times D*k: sum over phases of max(load/b)
    bound_time = Fraction(0)
    bound_known = True
    for phase in schedule.phases:
        if phase.k != k:
            errors.append(f"phase {phase.name}: k={phase.k} differs from the schedule's k={k}")
        if group is not None:
            count, chunks, load = _orbit_phase(schedule, group, topo, phase.name, roots, errors, progress)
            trees = []
        else:
            trees = [(i, t) for i, t in enumerate(schedule.trees) if t.phase == phase.name]
            count = len(trees)
            chunks = defaultdict(int)
            load = defaultdict(int)
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
            if chunks.get(r, 0) != k * weight[r]:
                expected = f"k={k}" if weight[r] == 1 else f"k*w={k}*{weight[r]}={k * weight[r]} (its shard weight {weight[r]})"
                errors.append(f"phase {phase.name}: root {r} has {chunks.get(r, 0)} chunks, expected {expected}")
        cap = topo.capacity
        ratio = Fraction(0)
        busiest = None
        for hop, amount in load.items():
            if hop in cap and Fraction(amount) / cap[hop] > ratio:
                ratio = Fraction(amount) / cap[hop]
                busiest = hop
        if group is not None and busiest is not None:  # the busiest link the expanded trees would name first
            busiest = _first_busiest(schedule, group, phase.name, load, ratio, cap) or busiest
        d = sum(weight.values())
        algbw = d * k / ratio if ratio else None
        reverse = PHASES[phase.name].reversed
        rate_bound = _cut_bound(topo, phase.bottleneck_cut, weight, reverse)
        cut_algbw = d * rate_bound if rate_bound is not None else None
        if algbw is None:
            errors.append(f"phase {phase.name}: no data moves")
        else:
            total_time += ratio / (d * k)
        if cut_algbw is None:
            bound_known = False
        else:
            bound_time += 1 / cut_algbw
        reports.append(PhaseReport(phase.name, count, ratio, algbw or Fraction(0), cut_algbw, busiest))
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
