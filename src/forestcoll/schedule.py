"""Schedules: trees of chunks over compute nodes, routed along physical paths; their JSON file.

Schedule JSON, version 1 (``"format": "forestcoll-schedule"``)::

    {"format": "forestcoll-schedule", "version": 1,
     "collective": "allgather" | "reduce_scatter" | "allreduce" | "broadcast" | "reduce",
     "topology": {"spec": "dgx-a100:nodes=2",  # what it was made for: a spec, or a file's absolute path
                  "name": "dgx-a100:nodes=2",  # the topology's own name
                  "path": null,                # the file's absolute path, when it came from a file
                  "fingerprint": "sha256:..."},  # forestcoll.topology.fingerprint of the fabric
     "k": 13,                                 # chunks per root shard in every phase
     "algbw_gbps": "1040/3",                  # what the schedule reaches (nccl-tests algbw)
     "bound_algbw_gbps": "1040/3",            # the exact optimum for the collective
     "ranks": ["n0.gpu0", ...],               # rank i runs compute node i
     "root": null,                            # broadcast / reduce only
     "phases": [{"name": "allgather", "direction": "out", "k": 13,
                 "algbw_gbps": "1040/3", "bottleneck_cut": ["n0.gpu0", ...]}],
     "trees": [{"root": "n0.gpu0", "chunks": 5, "phase": "allgather", "direction": "out",
                "edges": [{"src": "n0.gpu0", "dst": "n1.gpu0",
                           "path": ["n0.gpu0", "n0.nic0", "ib0", "n1.nic0", "n1.gpu0"]}]}]}

Semantics.  Every root's data (its shard: M/N bytes of an M-byte allgather
output; the whole buffer for broadcast) is cut into ``k`` equal chunks; a tree
with ``chunks = c`` carries c of them.  The chunks of each root sum to k in
every phase.  ``path`` is the physical route from ``src`` to ``dst`` (switches
in between).

* ``direction: "out"`` (allgather, broadcast): an out-tree from ``root``; edges
  are listed parent before child, data flows src -> dst.
* ``direction: "in"`` (reduce_scatter, reduce): an in-tree into ``root``, the
  rank that ends with the reduced shard; each edge sends the partial sum of
  ``src``'s subtree to ``dst``, one step nearer the root; edges are listed
  leaves first (a node's incoming edges come before its outgoing one).
* ``topology`` makes the file self-contained: verify and simulate load the
  topology from ``spec`` (or take ``--topology``) and refuse one whose
  fingerprint differs.  Files written before the record carry a plain string
  (the name); they still load, from that name, without the fingerprint check.
  The record is its own object so that later schedule versions keep it as is.
* ``allreduce`` holds a ``reduce_scatter`` phase then an ``allgather`` phase;
  the second starts on a chunk once the first has finished it.
* ``shard_weights`` (optional, allreduce / reduce_scatter / allgather only): a
  positive integer w_i per rank, in ``ranks`` order.  Rank i's shard is then
  k*w_i of the k*D equal chunks of the buffer (D = sum of the weights), the
  chunks of root i sum to k*w_i in every phase, and rank i owns the contiguous
  chunks from k*(w_0 + ... + w_{i-1}) on (:func:`shard_layout`).  Absent means
  every weight is 1 (the equal shards above); a schedule whose weights are all 1
  is written without the key, so such files are unchanged.

Version 2 (``"version": 2``) keeps this header and replaces ``trees`` by template
trees and the automorphisms that map them; :mod:`forestcoll.schedule_v2` states
the expansion rule and when it is written.  Both versions read into the same
:class:`Schedule`.

A file with ``"collective": "alltoall"`` has the same header but ``"flows"``
(every pair's data split over paths) instead of phases and trees; it is read
into an :class:`~forestcoll.alltoall.schedule.AlltoallSchedule` (the format is
in that module and in docs/alltoall.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from forestcoll.collectives import COLLECTIVES, PHASES
from forestcoll.errors import ForestCollError, ScheduleError
from forestcoll.fileio import Output, atomic_write_text, dump_json, file_kind, kind_of, parse_json, read_text, wrong_kind
from forestcoll.rational import format_rational, parse_rational

if TYPE_CHECKING:
    from forestcoll.alltoall.schedule import AlltoallSchedule

__all__ = [
    "FORMAT", "VERSION", "Edge", "choose_version", "PhaseInfo", "Schedule", "ScheduleTree", "TopologyRecord", "read_schedule",
    "schedule_from_dict", "schedule_to_dict", "schedule_topology", "shard_layout", "tree_heights", "write_schedule",
]

FORMAT = "forestcoll-schedule"
VERSION = 1


@dataclass(frozen=True)
class Edge:
    """A tree edge src -> dst (data-flow direction) and its physical route."""

    src: str
    dst: str
    path: tuple[str, ...]


@dataclass(frozen=True)
class ScheduleTree:
    """One tree of ``chunks`` chunks of ``root``'s shard in one phase."""

    root: str
    chunks: int
    phase: str
    edges: tuple[Edge, ...]

    @property
    def direction(self) -> str:
        return PHASES[self.phase].direction

    def height(self) -> int:
        """Number of edges on the longest root-leaf chain."""
        depth = {self.root: 0}
        if self.direction == "out":
            for e in self.edges:
                depth[e.dst] = depth[e.src] + 1
        else:
            children: dict[str, list[str]] = {}
            for e in self.edges:
                children.setdefault(e.dst, []).append(e.src)
            stack = [self.root]
            while stack:
                v = stack.pop()
                for c in children.get(v, []):
                    depth[c] = depth[v] + 1
                    stack.append(c)
        return max(depth.values())


@dataclass(frozen=True)
class PhaseInfo:
    """Per-phase facts: chunks per root shard, the algbw the phase reaches alone, its bottleneck cut."""

    name: str
    k: int
    algbw: Fraction
    bound_algbw: Fraction
    bottleneck_cut: tuple[str, ...] = ()

    @property
    def direction(self) -> str:
        return PHASES[self.name].direction


@dataclass(frozen=True)
class TopologyRecord:
    """What a schedule was made for: a spec that reloads it from anywhere, the topology's name, the file's
    absolute path (None for a built-in) and the fabric's fingerprint (:func:`forestcoll.topology.fingerprint`)."""

    spec: str
    name: str
    path: str | None
    fingerprint: str

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "name": self.name, "path": self.path, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class Schedule:
    """A whole collective schedule (see the module docstring for the file format)."""

    collective: str
    topology: str
    ranks: tuple[str, ...]
    k: int
    algbw: Fraction
    bound_algbw: Fraction
    phases: tuple[PhaseInfo, ...]
    trees: tuple[ScheduleTree, ...]
    root: str | None = None
    stats: dict[str, Any] = field(default_factory=dict, compare=False)
    record: TopologyRecord | None = None  # None: a file written before the record (name only)
    # (node names, generators as index permutations of them): automorphisms that map trees onto trees, for the
    # version-2 file (forestcoll.schedule_v2); None when unknown
    symmetry: tuple[tuple[str, ...], tuple[tuple[int, ...], ...]] | None = field(default=None, compare=False)
    # a version-2 file read without expanding (read_schedule(..., expand=False)): its (template, images) pairs;
    # ``trees`` is then empty and ``symmetry`` holds the file's nodes and generators (forestcoll.verify checks
    # such a schedule orbit by orbit)
    templates: tuple[tuple[ScheduleTree, Any], ...] | None = field(default=None, compare=False)
    # per rank (``ranks`` order): rank i's shard is k*w_i of the k*sum(w) chunks; None: every weight 1
    shard_weights: tuple[int, ...] | None = None

    @property
    def weights(self) -> tuple[int, ...]:
        """Each rank's shard weight (all 1 when the schedule has equal shards)."""
        return self.shard_weights if self.shard_weights is not None else (1,) * len(self.ranks)

    @property
    def optimal(self) -> bool:
        return self.algbw == self.bound_algbw

    @property
    def ok(self) -> bool:
        """A result (:mod:`forestcoll.results`): a built or parsed schedule is always ok; whether it is right
        for a topology is :func:`forestcoll.verify.verify`'s verdict, whether it is optimal :attr:`optimal`."""
        return True

    @property
    def message(self) -> str:
        share = f"{float(self.algbw / self.bound_algbw * 100):.6g}%" if self.bound_algbw else "-"
        return (f"{self.collective} on {self.topology or 'a custom topology'}: k={self.k}, {len(self.trees)} trees, "
                f"algbw {format_rational(self.algbw)} GB/s ({'optimal' if self.optimal else share + ' of the bound'})")

    def to_dict(self, version: int | str = 1) -> dict[str, Any]:
        """The schedule file's JSON object (:func:`schedule_to_dict`)."""
        return schedule_to_dict(self, version)

    def phase_trees(self, phase: str) -> list[ScheduleTree]:
        return [t for t in self.trees if t.phase == phase]

    def max_height(self) -> int:
        return max(tree_heights(self.trees), default=0)


def shard_layout(s: Schedule) -> tuple[int, tuple[int, ...]]:
    """(chunks in the buffer, first chunk of each rank's shard): k*D and k*(w_0 + ... + w_{i-1}), D = sum(w)."""
    starts, at = [], 0
    for w in s.weights:
        starts.append(at)
        at += s.k * w
    return at, tuple(starts)


def tree_heights(trees: Sequence[ScheduleTree]) -> list[int]:
    """:meth:`ScheduleTree.height` of each tree, by pointer jumping over integer arrays, 256 trees at a time.

    Trees share Edge objects: each distinct one is numbered once (its parent end and child end as rank
    numbers); a block's edges become numbers through their ids (a C-level map and a sorted search, no Python
    loop per edge); each tree's nodes get a parent array and depths double their reach per step.  A tree
    that is not a tree (a node with two parents, or not led to the root) gets :meth:`~ScheduleTree.height`'s
    answer."""
    from itertools import chain

    import numpy as np

    index: dict[str, int] = {}
    ends: dict[int, tuple[int, int]] = {}
    keep: list[Edge] = []  # the edges numbered, kept alive so their ids stay theirs
    for t in trees:
        new = set(map(id, t.edges)).difference(ends)
        if new:
            for e in t.edges:
                if id(e) in new:
                    a = index.setdefault(e.src, len(index))
                    b = index.setdefault(e.dst, len(index))
                    ends[id(e)] = (a, b) if t.direction == "out" else (b, a)
                    keep.append(e)
    ids = np.fromiter(ends, dtype=np.int64, count=len(ends))
    order = np.argsort(ids)
    ids = ids[order]
    pair = np.array(list(ends.values()), dtype=np.int64).reshape(-1, 2)[order]
    n = len(index) + 1  # node n - 1 + 1: a spare slot
    out: list[int] = []
    block = 256
    for lo in range(0, len(trees), block):
        part = trees[lo:lo + block]
        sizes = np.fromiter(map(len, (t.edges for t in part)), dtype=np.int64, count=len(part))
        edge_ids = np.fromiter(map(id, chain.from_iterable(t.edges for t in part)), dtype=np.int64,
                               count=int(sizes.sum()))
        at = pair[np.searchsorted(ids, edge_ids)]
        offset = np.repeat(np.arange(len(part), dtype=np.int64) * n, sizes)
        parents, children = at[:, 0] + offset, at[:, 1] + offset
        up = np.arange(len(part) * n, dtype=np.int64)
        up[children] = parents
        reach = np.zeros(len(part) * n, dtype=np.int64)
        reach[children] = 1
        for _ in range(int(sizes.max(initial=0)).bit_length() + 2):
            if not reach[up].any():
                break
            reach = reach + reach[up]
            up = up[up]
        depth = reach.reshape(len(part), n).max(axis=1).tolist()
        roots = np.array([index.get(t.root, n - 1) for t in part], dtype=np.int64)
        led = up[children] == np.repeat(roots + np.arange(len(part)) * n, sizes)
        twice = np.bincount(children, minlength=len(part) * n).reshape(len(part), n).max(axis=1) > 1
        start = 0
        for j, t in enumerate(part):
            m = int(sizes[j])
            fine = bool(led[start:start + m].all()) and not twice[j] and not reach[up[children[start:start + m]]].any()
            out.append(depth[j] if fine else t.height())
            start += m
    return out


# ----- JSON ---------------------------------------------------------------------------------


def _tree_dict(t: ScheduleTree, shared: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A tree's JSON object; with ``shared`` (id of an Edge -> its object), trees holding the same Edge hold the
    same object (what :func:`write_schedule` encodes once per distinct edge)."""
    if shared is None:
        edges = [{"src": e.src, "dst": e.dst, "path": list(e.path)} for e in t.edges]
    else:
        edges = [shared.get(id(e)) or shared.setdefault(id(e), {"src": e.src, "dst": e.dst, "path": list(e.path)})
                 for e in t.edges]
    return {"root": t.root, "chunks": t.chunks, "phase": t.phase, "direction": t.direction, "edges": edges}


def choose_version(s: Schedule, version: int | str = "auto") -> int:
    """1 or 2 for ``version`` 1, 2, "v1", "v2" or "auto" (2 when the schedule has at least
    :data:`~forestcoll.schedule_v2.V2_MIN_RANKS` ranks and carries its automorphisms)."""
    from forestcoll.schedule_v2 import V2_MIN_RANKS

    if version in (1, "1", "v1"):
        return 1
    if version in (2, "2", "v2"):
        return 2
    return 2 if len(s.ranks) >= V2_MIN_RANKS and s.symmetry is not None and s.symmetry[1] else 1


def schedule_to_dict(s: Schedule, version: int | str = 1, _shared: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON object of a schedule (deterministic key order); ``version`` 2 or "auto": see
    :mod:`forestcoll.schedule_v2` (auto falls back to 1 when templates would not save 4x).  (``_shared``: see
    :func:`_tree_dict`; for writing, where the object is encoded and dropped.)"""
    chosen = choose_version(s, version)
    if chosen == 2:
        from forestcoll.schedule_v2 import VERSION_2, compress

        names, gens = s.symmetry if s.symmetry is not None else ((), ())
        pairs = compress(s.trees, names, gens)
        if version == "auto" and len(pairs) * 4 > len(s.trees):
            return schedule_to_dict(s, 1, _shared)
        out = _v1_dict(s, trees=False)
        out["version"] = VERSION_2
        out["nodes"] = list(names)
        out["generators"] = [list(g) for g in gens]
        out["templates"] = [{**_tree_dict(t, _shared), "images": images} for t, images in pairs]
        return out
    return _v1_dict(s, shared=_shared)


def _v1_dict(s: Schedule, trees: bool = True, shared: dict[int, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The version-1 JSON object (without ``trees`` when ``trees`` is False: the header version 2 shares)."""
    out: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "collective": s.collective,
        "topology": s.record.to_dict() if s.record else s.topology,
        "k": s.k,
        "algbw_gbps": format_rational(s.algbw),
        "bound_algbw_gbps": format_rational(s.bound_algbw),
        "optimal": s.optimal,
        "ranks": list(s.ranks),
        "root": s.root,
        "phases": [
            {
                "name": p.name,
                "direction": p.direction,
                "k": p.k,
                "algbw_gbps": format_rational(p.algbw),
                "bound_algbw_gbps": format_rational(p.bound_algbw),
                "bottleneck_cut": list(p.bottleneck_cut),
            }
            for p in s.phases
        ],
    }
    if s.shard_weights is not None:
        out["shard_weights"] = list(s.shard_weights)
    if trees:
        out["trees"] = [_tree_dict(t, shared) for t in s.trees]
    return out


def _req(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise ScheduleError(f"{where}: missing '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        name = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ScheduleError(f"{where}: '{key}' must be {name}")
    return value


def _rational(obj: Mapping[str, Any], key: str, where: str) -> Fraction:
    if key not in obj:
        raise ScheduleError(f"{where}: missing '{key}'")
    try:
        return parse_rational(obj[key], f"{where}: {key}")
    except ForestCollError as exc:
        raise ScheduleError(str(exc)) from None


def _names(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ScheduleError(f"{where}: expected a list of node names")
    return tuple(value)


def schedule_from_dict(data: Any, source: str = "schedule", expand: bool = True) -> Schedule | AlltoallSchedule:
    """Parse and structurally validate a schedule object (semantics are checked by the verifier).  A collective
    without trees (all-to-all) has its own model: :func:`forestcoll.alltoall.schedule.schedule_from_dict`.
    ``expand`` False keeps a version-2 file's templates unexpanded (:attr:`Schedule.templates`)."""
    if not isinstance(data, Mapping):
        raise ScheduleError(f"{source}: expected a JSON object")
    if "gpus" in data and "protocol" in data:
        raise ScheduleError(f"{source}: an MSCCL++ execution plan, not a forestcoll schedule "
                            "(`forestcoll mscclpp run|lint` and `forestcoll simulate PLAN -t TOPOLOGY` read plans)")
    if data.get("format", FORMAT) != FORMAT:
        raise ScheduleError(f"{source}: not a forestcoll schedule (format {data.get('format')!r})")
    version = data.get("version", VERSION)
    if version not in (VERSION, 2) or isinstance(version, bool):
        raise ScheduleError(f"{source}: schedule version {version!r} is not supported (this forestcoll reads 1 and 2)")
    collective = _req(data, "collective", str, source)
    if collective not in COLLECTIVES:
        raise ScheduleError(f"{source}: unknown collective {collective!r}")
    if not COLLECTIVES[collective].tree_based:
        from forestcoll.alltoall.schedule import schedule_from_dict as flows_from_dict

        return flows_from_dict(data, source)
    k = _req(data, "k", int, source)
    if k < 1:
        raise ScheduleError(f"{source}: 'k' must be >= 1")
    ranks = _names(_req(data, "ranks", list, source), f"{source}: ranks")
    root = data.get("root")
    if root is not None and not isinstance(root, str):
        raise ScheduleError(f"{source}: 'root' must be a node name or null")
    phases = []
    raw_phases = data.get("phases")
    if raw_phases is None:  # minimal files: one phase named after the collective
        if len(COLLECTIVES[collective].phases) != 1:
            raise ScheduleError(f"{source}: an {collective} schedule needs 'phases'")
        raw_phases = [{"name": collective, "k": k}]
    if not isinstance(raw_phases, list):
        raise ScheduleError(f"{source}: 'phases' must be a list")
    algbw = _rational(data, "algbw_gbps", source)
    bound = _rational(data, "bound_algbw_gbps", source) if "bound_algbw_gbps" in data else algbw
    for i, p in enumerate(raw_phases):
        where = f"{source}: phases[{i}]"
        if not isinstance(p, Mapping):
            raise ScheduleError(f"{where}: expected an object")
        name = _req(p, "name", str, where)
        if name not in PHASES:
            raise ScheduleError(f"{where}: unknown phase {name!r}")
        pk = p.get("k", k)
        if not isinstance(pk, int) or isinstance(pk, bool) or pk < 1:
            raise ScheduleError(f"{where}: 'k' must be a positive integer")
        palg = _rational(p, "algbw_gbps", where) if "algbw_gbps" in p else algbw
        pbound = _rational(p, "bound_algbw_gbps", where) if "bound_algbw_gbps" in p else palg
        cut = _names(p.get("bottleneck_cut", []), f"{where}: bottleneck_cut")
        phases.append(PhaseInfo(name, pk, palg, pbound, cut))
    default_phase = phases[0].name if phases else collective

    def parse_tree(t: Any, where: str) -> ScheduleTree:
        if not isinstance(t, Mapping):
            raise ScheduleError(f"{where}: expected an object")
        troot = _req(t, "root", str, where)
        chunks = _req(t, "chunks", int, where)
        if chunks < 1:
            raise ScheduleError(f"{where}: 'chunks' must be >= 1")
        phase = t.get("phase", default_phase)
        if not isinstance(phase, str) or phase not in PHASES:
            raise ScheduleError(f"{where}: unknown phase {phase!r}")
        edges = []
        for j, e in enumerate(_req(t, "edges", list, where)):
            ewhere = f"{where}.edges[{j}]"
            if not isinstance(e, Mapping):
                raise ScheduleError(f"{ewhere}: expected an object")
            src = _req(e, "src", str, ewhere)
            dst = _req(e, "dst", str, ewhere)
            path = _names(e.get("path", [src, dst]), f"{ewhere}: path")
            edges.append(Edge(src, dst, path))
        return ScheduleTree(troot, chunks, phase, tuple(edges))

    symmetry = None
    templates = None
    if version == 2:
        from forestcoll.schedule_v2 import templates_from_dict

        found = templates_from_dict(data, source, parse_tree, expand)
        if expand:
            trees = found
        else:
            trees, templates = [], tuple(found)
        symmetry = (tuple(data["nodes"]), tuple(tuple(g) for g in data.get("generators", [])))
    else:
        trees = [parse_tree(t, f"{source}: trees[{i}]") for i, t in enumerate(_req(data, "trees", list, source))]
    topology, record = _topology_record(data.get("topology", ""), source)
    shard_weights = _shard_weights(data, collective, len(ranks), source)
    return Schedule(collective, topology, ranks, k, algbw, bound, tuple(phases), tuple(trees), root, record=record,
                    symmetry=symmetry, templates=templates, shard_weights=shard_weights)


def _shard_weights(data: Mapping[str, Any], collective: str, ranks: int, source: str) -> tuple[int, ...] | None:
    """The file's ``shard_weights`` (positive ints, one per rank; only for collectives every rank roots), or None
    when absent or all 1."""
    if "shard_weights" not in data:
        return None
    value = data["shard_weights"]
    if COLLECTIVES[collective].rooted:
        raise ScheduleError(f"{source}: 'shard_weights' is for allreduce, reduce_scatter and allgather, not {collective}")
    if (not isinstance(value, list) or len(value) != ranks
            or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in value)):
        raise ScheduleError(f"{source}: 'shard_weights' must be a list of {ranks} positive integers, one per rank")
    return None if all(w == 1 for w in value) else tuple(value)


def _topology_record(value: Any, source: str) -> tuple[str, TopologyRecord | None]:
    """(the topology's name, the record) from the file's ``topology``: a record object, or an old file's plain name."""
    if isinstance(value, str):
        return value, None
    where = f"{source}: topology"
    if not isinstance(value, Mapping):
        raise ScheduleError(f"{where}: expected an object with spec, name, path and fingerprint (or a name)")
    spec = _req(value, "spec", str, where)
    name = value.get("name", spec)
    path = value.get("path")
    fp = _req(value, "fingerprint", str, where)
    if not isinstance(name, str) or (path is not None and not isinstance(path, str)):
        raise ScheduleError(f"{where}: 'name' must be a string and 'path' a string or null")
    if not fp.startswith("sha256:"):
        raise ScheduleError(f"{where}: fingerprint {fp[:40]!r} is not a 'sha256:...' fingerprint")
    return name, TopologyRecord(spec, name, path, fp)


def write_schedule(sched: Schedule | AlltoallSchedule, path: Output, version: int | str = "auto") -> str:
    """Write the schedule JSON to ``path`` whole (temporary file, then rename); returns the text.  ``version``:
    1, 2 or "auto" (:func:`choose_version`; all-to-all schedules are always version 1)."""
    # a Schedule's trees share their Edge objects: their JSON objects are shared too, and encoded once each
    text = dump_json(schedule_to_dict(sched, version, {}) if isinstance(sched, Schedule) else sched.to_dict())
    atomic_write_text(path, text)
    return text


def schedule_topology(sched: Schedule | AlltoallSchedule, topology=None, extra: Mapping[str, str] | None = None):
    """The topology to check or run ``sched`` on: ``topology`` (a spec, file, Topology or Imported) or else the one the
    schedule was made for, with cluster options ``extra``.  When the schedule records a fingerprint, a topology
    with another fabric is refused (UsageError), so a schedule is never checked against a look-alike."""
    import os

    from forestcoll.errors import UsageError
    from forestcoll.topology import fingerprint, load_topology

    record = getattr(sched, "record", None)  # all-to-all schedules record no fingerprint yet
    spec = topology or (record.spec if record else sched.topology)
    if not spec:
        raise UsageError("the schedule names no topology; pass --topology")
    if topology is None and record is not None and record.path is not None and not os.path.isfile(record.path):
        raise UsageError(f"the schedule was made from {record.path}, which does not exist (moved, or made on another "
                         "machine); pass --topology with that topology")
    topo = load_topology(spec, extra)
    if record is not None:
        found = fingerprint(topo)
        if found != record.fingerprint:
            given = spec if isinstance(spec, str) else getattr(spec, "spec", "") or "the topology given"  # or an Imported
            raise UsageError(f"{given} is not the fabric this schedule was made for ({record.name}): its fingerprint "
                             f"{found[:19]}... differs from the recorded {record.fingerprint[:19]}...; pass --topology "
                             "with the topology the schedule was generated from")
    return topo


def read_schedule(path: str, expand: bool = True) -> Schedule | AlltoallSchedule:
    """Read a schedule JSON file (an all-to-all file gives an :class:`~forestcoll.alltoall.schedule.AlltoallSchedule`);
    ``expand`` False: a version-2 file's templates stay unexpanded (for :func:`forestcoll.verify.verify`)."""
    text = read_text(path, "schedule file")
    expected = "a schedule JSON (from `forestcoll generate`)"
    try:
        data = parse_json(text, path)
    except ForestCollError as exc:
        wrong = wrong_kind(path, expected, file_kind(path, text))  # an MSCCL XML, a YAML topology, ...
        raise ScheduleError(str(wrong or exc)) from None
    kind = kind_of(data)
    if kind.name not in ("schedule", "alltoall-schedule", "json"):
        raise ScheduleError(str(wrong_kind(path, expected, kind)))
    return schedule_from_dict(data, str(path), expand)
