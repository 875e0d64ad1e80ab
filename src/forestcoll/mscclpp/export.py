"""Lower a tree schedule to an MSCCL++ execution plan (schedule -> actions -> thread blocks -> :class:`Plan`).

Chunks.  Every root's shard is ``k`` chunks; root r's chunk j is plan chunk
``r*k + j`` of the full-size buffer (allgather output, reduce-scatter input,
allreduce) and chunk ``j`` of the shard-size one (allgather input,
reduce-scatter output); broadcast and reduce use chunks ``0..k-1`` of the
whole buffer.  :func:`forestcoll.pieces.cut_pieces` cuts each root's chunks
into pieces that lie in one tree of every phase.

Actions (one data operation per pipeline iteration, on one GPU):

* out-tree edge u -> v: u *puts* the piece into v's output (memory channel
  inside a box, port channel across boxes), once it has arrived at u (or, at an
  allreduce root, once its reduction is done); a leaf v only *waits* for it;
* in-tree node v with children: v reduces its input with each child's partial
  sum into its own partial: children in the same box are *read* from their
  memory (``rre``, no scratch needed), children in other boxes first *push*
  their partial into a scratch slot of v through a port channel; partial sums
  live in the output (allreduce) or in scratch (reduce-scatter, reduce), the
  root's in its output.

Thread blocks.  Actions are grouped by (phase, level in the tree, role, peer,
piece size): every block works at one tree level only, so a block waits only
for blocks of a lower (phase, level) and the program cannot deadlock, and
every block runs one ``pipeline`` whose iterations move slice ``i`` of each
of its pieces (unit = piece chunks x bytes per chunk per iteration: the same
iteration count everywhere, so every per-iteration signal meets one wait).
Groups are split further to keep within the executor's limits.  Each pair of
blocks on two GPUs that depend on each other gets its own channel pair
(signal after the data, wait before using it); blocks on one GPU use a
semaphore.  Blocks that write into a peer first wait for that peer's blocks to
have started the call (relaxed handshake: the peer's previous call and host code
are done), and blocks that are read from wait at the end until their readers
are done.  Port puts signal on the channel they used (``pws``); when more
blocks depend on one port put it is flushed first (``pwsf``).

The LL protocol (packets; for small sizes) uses the same trees without
signals: puts are ``ppkt`` / ``rppkt`` into scratch slots, partial sums travel
as packets (``respkt``), arrivals are unpacked (``upkt``); the packets' flags
order everything.
"""

from __future__ import annotations

import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from forestcoll.errors import ScheduleError, UsageError
from forestcoll.mscclpp.plan import (
    BufRef,
    Channel,
    GpuPlan,
    Op,
    Plan,
    PlanStats,
    RemoteBuffer,
    RemoteBufferRef,
    TbChannel,
    ThreadBlock,
    plan_stats,
)
from forestcoll.mscclpp.semantics import MAX_CHANNEL, MAX_CHANNEL_PER_OPERATION, MAX_DEVICE_SEMAPHORES, MAX_OPERATION, U32
from forestcoll.pieces import Piece, TreeShape, cut_pieces, shape_trees
from forestcoll.schedule import Schedule
from forestcoll.topology import Topology

PLAN_COLLECTIVE = {"allgather": "allgather", "reduce_scatter": "reducescatter", "allreduce": "allreduce",
                   "broadcast": "broadcast", "reduce": "reduce"}
ALIGN = 16
MAX_PAIRS = 10  # src_buff / dst_buff entries per operation
DEFAULT_MAX_MESSAGE = U32 - 1  # the executor's offsets are 32-bit
DEFAULT_LL_MAX_MESSAGE = 1 << 20
LAYOUTS = ("auto", "edge", "source", "level")
SINK_LEVEL = 1 << 20  # sinks only wait: one group per phase, after every level


class ExportError(ScheduleError):
    """The schedule cannot become a plan within the executor's limits (the message says which and what to do)."""


@dataclass(frozen=True)
class ExportOptions:
    """Knobs of :func:`export_mscclpp`."""

    protocol: str = "Simple"  # or "LL" (packets, for small messages)
    inplace: bool = True  # the plan serves in-place calls (False: out-of-place)
    min_message_size: int = 0
    max_message_size: int | None = None  # default: 4 GiB - 1 (Simple), 1 MiB (LL)
    design_size: int | None = None  # message size the pipelines are cut for (default: min(max_message_size, 1 GiB))
    slice_bytes: int = 1 << 20  # at design_size a piece moves in slices of about this size ...
    max_slices: int = 16  # ... at most this many ...
    min_slices: int = 8  # ... and at least this many while slices stay >= 64 KiB (pieces.slices_for)
    unit_bytes: int | None = None  # bytes of every chunk moved per iteration (overrides the above)
    name: str | None = None
    check: bool = True  # lint + interpret before returning (self_check)
    check_launches: int = 2  # back-to-back calls interpreted by the self-check
    # thread blocks: "edge" one per tree edge and piece; "source" one per (level, peer, piece size, GPUs the data
    # comes from); "level" one per (level, peer, piece size); "auto": the finest that keeps within max_threadblocks
    layout: str = "auto"
    lanes: int | None = None  # every piece cut in this many, each moved on its own (default 1; LL: 4, which pipelines)
    max_threadblocks: int = 104  # blocks a GPU runs at once (MI250 GCD: 104 CUs; A100: 108 SMs; H100: 132)

    def resolved_max(self) -> int:
        if self.max_message_size is not None:
            return self.max_message_size
        return DEFAULT_LL_MAX_MESSAGE if self.protocol == "LL" else DEFAULT_MAX_MESSAGE

    def validate(self) -> None:
        if self.protocol not in ("Simple", "LL"):
            raise UsageError(f"unknown protocol {self.protocol!r}; choose Simple or LL")
        hi = self.resolved_max()
        if self.min_message_size < 0 or hi < self.min_message_size:
            raise UsageError(f"bad size range {self.min_message_size}..{hi}")
        if hi >= U32:
            raise UsageError(f"max_message_size {hi}: the executor's offsets are 32-bit; stay below 4 GiB")
        if self.max_slices < 1 or self.slice_bytes < 1:
            raise UsageError("max_slices and slice_bytes must be >= 1")
        if self.unit_bytes is not None and (self.unit_bytes < ALIGN or self.unit_bytes % ALIGN):
            raise UsageError(f"unit_bytes must be a positive multiple of {ALIGN}, got {self.unit_bytes}")
        if self.check_launches < 1:
            raise UsageError("check_launches must be >= 1")
        if self.lanes is not None and self.lanes < 1:
            raise UsageError(f"lanes must be >= 1, got {self.lanes}")
        if self.layout not in LAYOUTS:
            raise UsageError(f"unknown layout {self.layout!r}; choose {', '.join(LAYOUTS)}")


@dataclass
class ExportResult:
    """The plan, the figures a user checks against the executor's limits, and the self-check's verdicts."""

    plan: Plan
    stats: PlanStats
    chunks_per_root: int
    units: dict[int, int]  # pipeline unit (bytes per iteration) of the blocks moving pieces of each chunk count
    seconds: float
    layout: str = ""
    checks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return True  # an export that fails raises ExportError

    @property
    def message(self) -> str:
        s = self.stats
        checked = "; self-checked: lint clean, interpreter OK" if self.checks else "; not self-checked"
        return (f"{self.plan.name}: {self.plan.collective} on {s.gpus} GPUs, {self.plan.protocol}, "
                f"{'in-place' if self.plan.inplace else 'out-of-place'}; {s.threadblocks_per_gpu} thread blocks/GPU, "
                f"<= {s.ops_per_threadblock} ops/thread block, {s.memory_channels} memory + {s.port_channels} port "
                f"channels/GPU{checked}")

    def to_dict(self) -> dict[str, Any]:
        s = self.stats
        return {"ok": self.ok, "message": self.message, "name": self.plan.name, "collective": self.plan.collective,
                "protocol": self.plan.protocol, "inplace": self.plan.inplace, "gpus": s.gpus,
                "threadblocks_per_gpu": s.threadblocks_per_gpu, "ops_per_threadblock": s.ops_per_threadblock,
                "memory_channels": s.memory_channels, "port_channels": s.port_channels,
                "scratch_chunks": s.scratch_chunks, "chunks_per_root": self.chunks_per_root,
                "layout": self.layout, "pipeline_units": {str(c): u for c, u in sorted(self.units.items())}, "min_message_size": self.plan.setting("min_message_size"),
                "max_message_size": self.plan.setting("max_message_size"), "seconds": round(self.seconds, 4),
                "checks": self.checks, "notes": self.notes}


# ----- boxes ----------------------------------------------------------------------------------------


def rank_boxes(sched: Schedule, topology: Topology | None = None) -> tuple[int, ...]:
    """The box (node: GPUs that share CUDA IPC) of every rank of ``sched``, numbered from 0.

    Until topologies carry a per-node box attribute, a box is a rank name's prefix before the first '.'
    (the catalog's ``n0.gpu3``; names without a '.' all share one box), which is how the catalog and the
    importers name boxes.  ``topology`` is accepted so callers need not change when the attribute arrives;
    this is the one function to swap then."""
    del topology  # the prefix rule needs only the names
    ids: dict[str, int] = {}
    out = []
    for name in sched.ranks:
        box = name.split(".", 1)[0] if "." in name else ""
        out.append(ids.setdefault(box, len(ids)))
    return tuple(out)


# ----- actions ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ref:
    """A chunk range: on this GPU (``gpu`` None) or on GPU ``gpu`` (remote)."""

    type: str
    index: int
    size: int
    gpu: int | None = None


@dataclass(eq=False)
class _Act:
    gpu: int
    key: tuple  # thread-block group: (phase, level, role, peer)
    order: tuple  # position inside its group's iteration
    cnt: int
    reduce_srcs: list[_Ref] = field(default_factory=list)  # stage 0: dst = partial
    partial: _Ref | None = None
    push: tuple[_Ref, _Ref, str] | None = None  # (src, remote dst, "memory" | "port"): stage 1
    copy: tuple[_Ref, _Ref] | None = None  # local copy (out-of-place roots)
    producers: list[tuple[_Act, str]] = field(default_factory=list)  # (action, "push" | "pull" | "local")
    tb: int = -1  # position of its thread block on its GPU
    input_ref: _Ref | None = None  # the reducing node's own contribution


class _Lowering:
    """Builds the actions of a schedule (Simple protocol)."""

    def __init__(self, sched: Schedule, boxes: tuple[int, ...], outofplace: bool, lanes: int = 1) -> None:
        self.sched = sched
        self.coll = sched.collective
        self.boxes = boxes
        self.outofplace = outofplace
        self.n = len(sched.ranks)
        self.trees = shape_trees(sched)
        k, pieces = cut_pieces(sched, self.trees, 10**9)
        # lanes: every piece becomes ``lanes`` pieces (chunks ``lanes`` times finer) moved by blocks of their own
        self.k = k * lanes
        self.pieces = [Piece(pc.root, pc.start * lanes + j * pc.cnt, pc.cnt, pc.trees)
                       for pc in pieces for j in range(lanes)]
        self.per_root = self.coll in ("allgather", "reduce_scatter", "allreduce")
        self.scratch = [0] * self.n
        self.acts: list[_Act] = []
        self.final: dict[tuple[int, int], _Act] = {}  # (root, start) -> the in-tree root's reduction

    def via(self, a: int, b: int) -> str:
        return "memory" if self.boxes[a] == self.boxes[b] else "port"

    def slot(self, g: int, cnt: int) -> int:
        s = self.scratch[g]
        self.scratch[g] += cnt
        return s

    def base(self, pc: Piece) -> int:
        return pc.root * self.k + pc.start if self.per_root else pc.start

    def build(self) -> list[_Act]:
        for pc in self.pieces:
            for t in pc.trees:
                if t.direction == "in":
                    self._in_tree(pc, t)
                else:
                    self._out_tree(pc, t)
        return self.acts

    def _add(self, act: _Act) -> _Act:
        self.acts.append(act)
        return act

    def _in_tree(self, pc: Piece, t: TreeShape) -> None:
        coll, cnt, base = self.coll, pc.cnt, self.base(pc)
        part: dict[int, _Ref] = {}
        node: dict[int, _Act] = {}
        kids = t.children
        for v in sorted(t.level, key=lambda x: (t.level[x], x)):
            children = kids.get(v, [])
            if v == t.root:
                part[v] = _Ref("o", pc.start if coll in ("reduce_scatter", "reduce") else base, cnt)
            elif not children:
                part[v] = _Ref("i", base, cnt)
            elif coll == "allreduce":
                part[v] = _Ref("o", base, cnt)
            else:
                part[v] = _Ref("s", self.slot(v, cnt), cnt)
            parent = t.parent.get(v)
            role_peer = parent if parent is not None else -1
            act = _Act(v, (t.phase, t.level[v], "up", role_peer), (t.order, pc.root, pc.start), cnt)
            if children:
                srcs = []
                for c in children:
                    if self.via(c, v) == "memory":
                        srcs.append(_Ref(part[c].type, part[c].index, cnt, gpu=c))
                        act.producers.append((node[c], "pull"))
                    else:
                        slot = self.slot(v, cnt)
                        srcs.append(_Ref("s", slot, cnt))
                        src = part[c]
                        node[c].push = (_Ref(src.type, src.index, cnt), _Ref("s", slot, cnt, gpu=v), "port")
                        act.producers.append((node[c], "push"))
                act.reduce_srcs = srcs
                act.partial = part[v]
            node[v] = self._add(act)
        self.final[(pc.root, pc.start)] = node[t.root]

    def _out_tree(self, pc: Piece, t: TreeShape) -> None:
        coll, cnt, base = self.coll, pc.cnt, self.base(pc)
        arrive: dict[int, _Act] = {}
        root = t.root
        if coll == "allreduce":
            root_src = _Ref("o", base, cnt)
        else:
            root_src = _Ref("i", pc.start, cnt)
            if self.outofplace:
                self._add(_Act(root, (t.phase, 0, "copy", -1), (t.order, pc.root, pc.start), cnt,
                               copy=(_Ref("i", pc.start, cnt), _Ref("o", base, cnt))))
        for v in sorted(t.level, key=lambda x: (t.level[x], x)):
            if v == root:
                continue
            u = t.parent[v]
            src = root_src if u == root else _Ref("o", base, cnt)
            act = _Act(u, (t.phase, t.level[u], "down", v), (t.order, pc.root, pc.start), cnt,
                       push=(src, _Ref("o", base, cnt, gpu=v), self.via(u, v)))
            if u == root:
                if coll == "allreduce":
                    act.producers.append((self.final[(pc.root, pc.start)], "local"))
            else:
                act.producers.append((arrive[u], "push"))
            arrive[v] = self._add(act)
        for v in sorted(t.level):
            if v != root and not t.children.get(v):
                self._add(_Act(v, (t.phase, SINK_LEVEL, "sink", -1), (t.order, pc.root, pc.start), cnt,
                               producers=[(arrive[v], "push")]))


# ----- thread blocks ------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Tb:
    """A thread block: pipelines of (num_chunks, actions, per_chunk) run one after the other (only blocks that
    nobody waits for get more than one); ``per_chunk`` cuts every action into one-chunk operations so that
    pieces of different sizes share one pipeline."""

    gpu: int
    key: tuple
    pipes: list[tuple[int, list[_Act], bool]]
    pos: int = -1

    @property
    def acts(self) -> list[_Act]:
        return [a for _n, acts, _e in self.pipes for a in acts]


def _ops_estimate(acts: list[_Act], per_chunk: bool) -> int:
    """Data operations of one pipeline iteration."""
    mult = (lambda a: a.cnt) if per_chunk else (lambda a: 1)
    mem = sum(mult(a) for a in acts if a.push and a.push[2] == "memory")
    port = sum(mult(a) for a in acts if a.push and a.push[2] == "port")
    ops = -(-mem // MAX_PAIRS) + -(-port // MAX_CHANNEL_PER_OPERATION)
    for a in acts:
        if a.reduce_srcs:
            local = sum(1 for r in a.reduce_srcs if r.gpu is None)
            remote = len(a.reduce_srcs) - local
            ops += mult(a) * ((-(-local // (MAX_PAIRS - 1)) if local else 0) + (-(-remote // (MAX_PAIRS - 1)) if remote else 0))
        if a.copy:
            ops += mult(a)
    return ops


def _group(acts: list[_Act], n: int, budget: int, partners: int) -> list[list[_Tb]]:
    """Thread blocks per GPU: one per action key (phase, level, role, peer), split so that every block's
    operations and partner blocks fit the executor's limits."""
    groups: dict[tuple[int, tuple], list[_Act]] = defaultdict(list)
    users: dict[int, list[_Act]] = defaultdict(list)
    for a in acts:
        groups[(a.gpu, a.key)].append(a)
        for p, _k in a.producers:
            users[id(p)].append(a)
    per_gpu: list[list[_Tb]] = [[] for _ in range(n)]
    for (g, key) in sorted(groups, key=lambda x: (x[0], _sort_key(x[1]))):
        members = sorted(groups[(g, key)], key=lambda a: a.order)
        role = key[2]
        if role == "copy":  # nothing waits for these: one block, one pipeline per piece size
            by_cnt: dict[int, list[_Act]] = defaultdict(list)
            for a in members:
                by_cnt[a.cnt].append(a)
            per_gpu[g].append(_Tb(g, key, [(c, by_cnt[c], False) for c in sorted(by_cnt)]))
            continue
        cnts = sorted({a.cnt for a in members})
        # every block that touches a piece slices it alike (the unit of its chunk count) and runs as many iterations
        # as its partners: one piece size per block
        classes = [(c, [a for a in members if a.cnt == c], False) for c in cnts]
        for nchunks, group, per_chunk in classes:
            chunk: list[_Act] = []
            for a in group:
                trial = chunk + [a]
                near = {(p.gpu, p.key) for x in trial for p, _k in x.producers}
                near |= {(u.gpu, u.key) for x in trial for u in users[id(x)]}
                if chunk and (_ops_estimate(trial, per_chunk) > budget or len(near) > partners):
                    per_gpu[g].append(_Tb(g, key, [(nchunks, chunk, per_chunk)]))
                    chunk = [a]
                else:
                    chunk = trial
            if chunk:
                per_gpu[g].append(_Tb(g, key, [(nchunks, chunk, per_chunk)]))
    for tbs in per_gpu:
        for i, tb in enumerate(tbs):
            tb.pos = i
            for a in tb.acts:
                a.tb = i
    return per_gpu


def _sort_key(key: tuple) -> tuple:
    phase, level, role, peer = key[:4]
    return (phase, level, {"up": 0, "copy": 1, "down": 2, "sink": 3}[role], peer, *key[4:])


# ----- emission -----------------------------------------------------------------------------------------


class _Emitter:
    """Channels, semaphores, remote buffers and operations of every thread block.

    Dependencies between blocks (``x`` -> ``y``: y uses what x produced in the same iteration):

    * ``mem`` / ``port``: x put data into y's GPU through a memory / port channel; x signals y after a ``nop``
      (a port signal travels behind the port puts on the same channel); y first tells x it has started the
      call (relaxed handshake); after a port put, y tells x at the end that it is done (the put has read its
      source by then);
    * ``pull``: y reads x's memory; x signals when its data is ready, y tells x at the end that it is done;
    * ``local``: same GPU: x releases a semaphore, y acquires it;
    * ``relay``: same GPU: y needs data a port put brought to x's GPU; x, the block that waits for that put,
      releases a semaphore right after its wait.
    """

    def __init__(self, per_gpu: list[list[_Tb]], boxes: tuple[int, ...], units: dict[int, int]) -> None:
        self.per_gpu = per_gpu
        self.boxes = boxes
        self.units = units
        self.n = len(per_gpu)
        self.acts = [a for tbs in per_gpu for tb in tbs for a in tb.acts]
        self.deps: dict[tuple[int, int], list[tuple[tuple[int, int], str]]] = defaultdict(list)  # consumer -> producers
        self.outs: dict[tuple[int, int], list[tuple[tuple[int, int], str]]] = defaultdict(list)  # producer -> consumers
        self.port_target: dict[int, tuple[int, int]] = {}  # id(port push action) -> the block its put signals
        self.pairs: dict[tuple[int, int], list[tuple[tuple[int, int], tuple[int, int]]]] = defaultdict(list)
        self.index_of: dict[tuple[tuple[int, int], tuple[int, int]], tuple[str, int]] = {}
        self.sems: list[list[int]] = [[] for _ in range(self.n)]
        self.sem_of: dict[tuple[tuple[int, int], tuple[int, int]], int] = {}

    @staticmethod
    def tbkey(a: _Act) -> tuple[int, int]:
        return (a.gpu, a.tb)

    def _tb_at(self, key: tuple[int, int]) -> _Tb:
        return self.per_gpu[key[0]][key[1]]

    def _tb_of(self, a: _Act) -> _Tb:
        return self.per_gpu[a.gpu][a.tb]

    def edge(self, x: tuple[int, int], y: tuple[int, int], kind: str) -> None:
        if x == y or (x, kind) in self.deps[y]:
            return
        self.deps[y].append((x, kind))
        self.outs[x].append((y, kind))
        if x[0] == y[0]:
            if (x, y) not in self.sem_of:
                self.sem_of[(x, y)] = len(self.sems[x[0]])
                self.sems[x[0]].append(0)
        else:
            self.pairs[(min(x[0], y[0]), max(x[0], y[0]))].append((x, y))

    def wire(self) -> None:
        users: dict[int, list[_Act]] = defaultdict(list)
        for c in self.acts:
            for p, _kind in c.producers:
                users[id(p)].append(c)
        for c in self.acts:
            for p, kind in c.producers:
                x, y = self.tbkey(p), self.tbkey(c)
                if kind == "push" and p.push is not None and p.push[2] == "port":
                    takers = [u for u in users[id(p)] if any(q is p and k == "push" for q, k in u.producers)]
                    # the block that waits for the put and passes it on to the others: one that forwards (not a
                    # sink, which waits for many pieces at once), with the fewest other producers
                    nprod = {self.tbkey(u): len({self.tbkey(q) for a in self._tb_of(u).acts for q, _k in a.producers})
                             for u in takers}
                    first = min(dict.fromkeys(self.tbkey(u) for u in takers),
                                key=lambda y: (self._tb_at(y).key[2] == "sink", nprod[y], y))
                    self.port_target[id(p)] = first
                    self.edge(x, first, "port")
                    if y != first:
                        self.edge(first, y, "relay")
                elif kind == "push":
                    self.edge(x, y, "mem")
                else:
                    self.edge(x, y, kind)
        # flatten: per GPU and type, the peers in pair order; a pair's two ends get the same ordinal
        self.gpu_channels: list[dict[str, list[int]]] = [{"memory": [], "port": []} for _ in range(self.n)]
        for (a, b) in sorted(self.pairs):
            for x, y in self.pairs[(a, b)]:
                ctype = "memory" if self.boxes[x[0]] == self.boxes[y[0]] else "port"
                for here, there in ((x, y), (y, x)):
                    lst = self.gpu_channels[here[0]][ctype]
                    self.index_of[(here, there)] = (ctype, len(lst))
                    lst.append(there[0])

    def end(self, here: tuple[int, int], there: tuple[int, int]) -> tuple[str, int]:
        """(channel type, GPU-level index) of block ``here``'s end of the channel pair it shares with ``there``
        (the pair is keyed by the direction data flows: producer, consumer)."""
        return self.index_of[(here, there)]

    def emit(self, coll: str, name: str, protocol: str, inplace: bool, k: int, scratch: list[int],
             lo: int, hi: int) -> Plan:
        self.wire()
        n = self.n
        per_root = coll in ("allgather", "reduce_scatter", "allreduce")
        shard = k
        full = n * k if per_root else k
        in_chunks = shard if coll == "allgather" else full
        out_chunks = shard if coll == "reduce_scatter" else full
        gpus = []
        for g in range(n):
            remote: dict[tuple[int, str], set[str]] = {}
            tbs_json = []
            built = [self._tb(tb, remote) for tb in self.per_gpu[g]]
            order = sorted(remote)
            rb_index = {key: i for i, key in enumerate(order)}
            for tb, (ops, chans, refs) in zip(self.per_gpu[g], built):
                refs_json = []
                for ctype in ("memory", "port"):
                    ids = [rb_index[r] for r in refs[ctype]]
                    if ids:
                        refs_json.append(RemoteBufferRef(ctype, tuple(ids)))
                tbs_json.append(ThreadBlock(tb.pos, tuple(ops), tuple(TbChannel(t, tuple(ids)) for t, ids in chans
                                                                        if ids), tuple(refs_json)))
            channels = tuple(Channel(t, tuple(self.gpu_channels[g][t])) for t in ("memory", "port")
                             if self.gpu_channels[g][t])
            rbs = tuple(RemoteBuffer(r, t, tuple(sorted(remote[(r, t)], key=("memory", "port").index)))
                        for r, t in order)
            gpus.append(GpuPlan(g, in_chunks, out_chunks, scratch[g], tuple(tbs_json), channels, rbs,
                                tuple(self.sems[g])))
        return Plan(name, PLAN_COLLECTIVE[coll], protocol, inplace, tuple(gpus), reuse_resources=False,
                    num_threads_per_block=1024, use_double_scratch_buffer=protocol == "LL", buffer_alignment=ALIGN,
                    min_message_size=lo, max_message_size=hi)

    # -- one thread block --------------------------------------------------------------------------------

    def _tb(self, tb: _Tb, remote: dict[tuple[int, str], set[str]]):
        me = (tb.gpu, tb.pos)
        local_ch: dict[str, list[int]] = {"memory": [], "port": []}
        local_idx: dict[tuple[str, int], int] = {}
        refs: dict[str, list[tuple[int, str]]] = {"memory": [], "port": []}

        def ch(here: tuple[int, int], there: tuple[int, int]) -> tuple[str, int]:
            """This block's (``here``) local index of the channel it shares with block ``there``."""
            ctype, gidx = self.end(here, there)
            if (ctype, gidx) not in local_idx:
                local_idx[(ctype, gidx)] = len(local_ch[ctype])
                local_ch[ctype].append(gidx)
            return ctype, local_idx[(ctype, gidx)]

        def rref(r: _Ref, ctype: str) -> BufRef:
            key = (r.gpu, r.type)
            remote.setdefault(key, set()).add(ctype)
            if key not in refs[ctype]:
                refs[ctype].append(key)
            return BufRef(r.index, r.size, buffer_id=refs[ctype].index(key))

        def lref(r: _Ref) -> BufRef:
            return BufRef(r.index, r.size, type=r.type)

        deps = self.deps.get(me, [])
        outs = self.outs.get(me, [])
        ops: list[Op] = []
        # start: blocks that write into this GPU wait until it has started this call
        starters = [ch(me, x) for x, kind in deps if kind in ("mem", "port")]
        for ctype, ids in _by_type(starters):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                ops.append(Op("rlxsignal" if ctype == "memory" else "signal", ctype, tuple(part)))
        waiters = [ch(me, y) for y, kind in outs if kind in ("mem", "port")]
        for ctype, ids in _by_type(waiters):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                ops.append(Op("rlxwait" if ctype == "memory" else "wait", ctype, tuple(part)))
        if ops:
            ops.append(Op("nop"))
        # the pipeline body
        body: list[Op] = []
        cross = [ch(me, x) for x, kind in deps if kind in ("mem", "port", "pull")]
        for ctype, ids in _by_type(cross):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                body.append(Op("wait", ctype, tuple(part)))
        relays = [self.sem_of[(me, y)] for y, kind in outs if kind == "relay"]
        if relays:
            body.append(Op("nop"))
            for part in _chunks(relays, MAX_DEVICE_SEMAPHORES):
                body.append(Op("sem_release", semaphore_ids=tuple(part)))
        sems_in = [self.sem_of[(x, me)] for x, kind in deps if kind in ("local", "relay")]
        for part in _chunks(sems_in, MAX_DEVICE_SEMAPHORES):
            body.append(Op("sem_acquire", semaphore_ids=tuple(part)))
        head = body
        pipelines: list[Op] = []
        for nchunks, acts, per_chunk in tb.pipes:
            body = list(head) if not pipelines else []
            stage0: list[Op] = []
            for a in acts:
                for part in _split(a, per_chunk):
                    if part.copy:
                        stage0.append(Op("copy", src=(lref(part.copy[0]),), dst=(lref(part.copy[1]),)))
                    if part.reduce_srcs:
                        stage0.extend(self._reduce_ops(part, lref, rref))
            stage1: list[Op] = []
            mem = [x for a in acts if a.push and a.push[2] == "memory" for x in _split(a, per_chunk)]
            for btype in ("i", "o", "s"):
                pairs = [(lref(x.push[0]), rref(x.push[1], "memory")) for x in mem if x.push[0].type == btype]
                for part in _chunks(pairs, MAX_PAIRS):
                    stage1.append(Op("put", "memory", src=tuple(s for s, _d in part), dst=tuple(d for _s, d in part)))
            port = [(x, self.port_target[id(a)]) for a in acts if a.push and a.push[2] == "port"
                    for x in _split(a, per_chunk)]
            for part in _chunks(port, MAX_CHANNEL_PER_OPERATION):
                cids = tuple(ch(me, target)[1] for _x, target in part)
                stage1.append(Op("put", "port", cids, src=tuple(lref(x.push[0]) for x, _t in part),
                                 dst=tuple(rref(x.push[1], "port") for x, _t in part)))
            if stage0:
                body.append(Op("nop"))
                body.extend(stage0)
            if stage1:
                body.append(Op("nop"))
                body.extend(stage1)
            if not pipelines:
                sig = [ch(me, y) for y, kind in outs if kind in ("mem", "port", "pull")]
                sems_out = [self.sem_of[(me, y)] for y, kind in outs if kind == "local"]
                if sig or sems_out:
                    body.append(Op("nop"))
                for ctype, ids in _by_type(sig):
                    for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                        body.append(Op("signal", ctype, tuple(part)))
                for part in _chunks(sems_out, MAX_DEVICE_SEMAPHORES):
                    body.append(Op("sem_release", semaphore_ids=tuple(part)))
            pipelines.append(Op("pipeline", iter_context=(self.units[nchunks], nchunks), ops=tuple(body)))
        ops.extend(pipelines)
        # end: blocks whose memory this one read, or whose port puts it received, may end once it is done
        tail: list[Op] = []
        done = [ch(me, x) for x, kind in deps if kind in ("pull", "port")]
        for ctype, ids in _by_type(done):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                tail.append(Op("signal", ctype, tuple(part)))
        wait_done = [ch(me, y) for y, kind in outs if kind in ("pull", "port")]
        for ctype, ids in _by_type(wait_done):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                tail.append(Op("wait", ctype, tuple(part)))
        if tail:
            ops.append(Op("nop"))
            ops.extend(tail)
        chans = [(t, local_ch[t]) for t in ("memory", "port")]
        return ops, chans, refs

    def _reduce_ops(self, a: _Act, lref, rref) -> list[Op]:
        """partial = input + every child's partial: local scratch slots with ``re``, remote partials with ``rre``."""
        dst = lref(a.partial)
        first = lref(a.input_ref)
        local = [r for r in a.reduce_srcs if r.gpu is None]
        remote = [r for r in a.reduce_srcs if r.gpu is not None]
        ops: list[Op] = []
        acc = first
        for part in _chunks(local, MAX_PAIRS - 1):
            if ops:
                ops.append(Op("nop"))
            ops.append(Op("re", src=(acc, *(lref(r) for r in part)), dst=(dst,), reduce_op="sum"))
            acc = dst
        for part in _chunks(remote, MAX_PAIRS - 1):
            if ops:
                ops.append(Op("nop"))
            ops.append(Op("rre", "memory", src=(acc, *(rref(r, "memory") for r in part)), dst=(dst,), reduce_op="sum"))
            acc = dst
        return ops


def _split(a: _Act, per_chunk: bool) -> list[_Act]:
    """``a`` itself, or one action per chunk of its piece (same operations on ranges of one chunk)."""
    if not per_chunk or a.cnt == 1:
        return [a]

    def at(r: _Ref | None, j: int) -> _Ref | None:
        return None if r is None else _Ref(r.type, r.index + j, 1, r.gpu)

    out = []
    for j in range(a.cnt):
        x = _Act(a.gpu, a.key, a.order, 1)
        x.reduce_srcs = [at(r, j) for r in a.reduce_srcs]
        x.partial = at(a.partial, j)
        x.input_ref = at(a.input_ref, j)
        x.push = None if a.push is None else (at(a.push[0], j), at(a.push[1], j), a.push[2])
        x.copy = None if a.copy is None else (at(a.copy[0], j), at(a.copy[1], j))
        out.append(x)
    return out


def _append(lst: list, x: Any) -> None:
    if x not in lst:
        lst.append(x)


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _by_type(ends: list[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    out: dict[str, list[int]] = {}
    for ctype, idx in ends:
        lst = out.setdefault(ctype, [])
        if idx not in lst:
            lst.append(idx)
    return [(t, out[t]) for t in ("memory", "port") if t in out]


# ----- the export ---------------------------------------------------------------------------------------


def chunk_bytes(collective: str, size: int, n: int, k: int) -> float:
    """Bytes of one plan chunk in a call of ``size`` bytes (the executor's size: allgather's output, others' input)."""
    per_root = collective in ("allgather", "reduce_scatter", "allreduce")
    return size / (n * k if per_root else k)


def export_mscclpp(sched: Schedule, topology: Topology | None = None, options: ExportOptions | None = None,
                   **kwargs: Any) -> ExportResult:
    """The MSCCL++ execution plan of ``sched`` (see the module docstring); raises :class:`ExportError` with a
    one-line message when it cannot fit the executor's limits.  With ``check`` (default) the plan is linted
    and interpreted (every mode it declares, ``check_launches`` calls back to back, race detection) first."""
    t0 = time.perf_counter()
    opts = options or ExportOptions(**kwargs)
    opts.validate()
    if sched.collective not in PLAN_COLLECTIVE:
        raise ExportError(f"collective {sched.collective!r} has no MSCCL++ form here")
    n = len(sched.ranks)
    if n < 2:
        raise ExportError("a plan needs at least 2 ranks")
    boxes = rank_boxes(sched, topology)
    lanes = opts.lanes or (4 if opts.protocol == "LL" else 1)
    low = _Lowering(sched, boxes, outofplace=not opts.inplace, lanes=lanes)
    hi = opts.resolved_max()
    design = opts.design_size or min(hi, 1 << 30)
    k = low.k
    units = _units(sched.collective, n, k, sorted({pc.cnt for pc in low.pieces}), design, hi, opts)
    name = opts.name or f"forestcoll_{PLAN_COLLECTIVE[sched.collective]}_n{n}_k{sched.k}" + \
        ("_ll" if opts.protocol == "LL" else "")
    name = re.sub(r"[^A-Za-z0-9_.:-]", "_", name)[:200]
    if opts.protocol == "LL":
        from forestcoll.mscclpp.export_ll import lower_ll

        if sched.collective in ("broadcast", "reduce"):
            raise ExportError(f"LL plans are made for allgather, reducescatter and allreduce; in a {sched.collective} a GPU "
                              "that waits for no one can run two calls ahead and overwrite packets a peer has not read "
                              "yet (the interpreter shows it with 3 back-to-back calls): use protocol Simple")
        plan = lower_ll(low, boxes, name, opts.inplace, opts.min_message_size, hi)
        units = {}
    else:
        tried = []
        for layout in (("edge", "source", "level") if opts.layout == "auto" else (opts.layout,)):
            low = _Lowering(sched, boxes, outofplace=not opts.inplace, lanes=lanes)
            acts = low.build()
            for a in acts:
                if a.reduce_srcs:
                    a.input_ref = _input_ref(low, a)
                if layout == "edge" and a.key[2] != "sink":
                    a.key = (*a.key[:4], a.order)
                elif layout == "source" and a.key[2] != "sink":
                    a.key = (*a.key[:4], tuple(sorted({p.gpu for p, _k in a.producers})))
            plan = _layout_and_emit(low, acts, boxes, units, name, opts, hi)
            tbs = max(len(g.threadblocks) for g in plan.gpus)
            tried.append((tbs, layout, plan))
            if tbs <= opts.max_threadblocks:
                break
        tbs, layout, plan = min(tried, key=lambda x: x[0]) if tried[-1][0] > opts.max_threadblocks else tried[-1]
    stats = plan_stats(plan)
    result = ExportResult(plan, stats, k, units, 0.0, layout=layout if opts.protocol != "LL" else "ll")
    per = n if low.per_root else 1
    step = per * k
    if step & (step - 1):
        result.notes.append(f"the executor takes calls whose size is a multiple of {step * ALIGN} bytes ({step} chunks "
                            f"of whole {ALIGN}-byte units); power-of-two sizes are not: a power-of-two k avoids this")
    if stats.threadblocks_per_gpu > opts.max_threadblocks:
        result.notes.append(f"{stats.threadblocks_per_gpu} thread blocks per GPU, more than the {opts.max_threadblocks} a GPU "
                            "is assumed to run at once (every block must be resident): use a smaller k")
    if opts.check:
        # packets are double-buffered: a GPU two calls ahead reuses a slot, so LL plans are checked over 3 calls
        result.checks = self_check(plan, launches=max(opts.check_launches, 3 if plan.packet else 1))
    result.seconds = time.perf_counter() - t0
    return result


def _input_ref(low: _Lowering, a: _Act) -> _Ref:
    """The reducing node's own contribution: its input at the piece."""
    coll = low.coll
    p = a.partial
    if coll == "allreduce":
        return _Ref("i", p.index, a.cnt)
    # reduce-scatter / reduce: the piece's full-buffer index (order key holds root and start)
    _order, root, start = a.order
    return _Ref("i", root * low.k + start if low.per_root else start, a.cnt)


def _units(coll: str, n: int, k: int, cnts: list[int], design: int, hi: int, opts: ExportOptions) -> dict[int, int]:
    """Pipeline unit of each piece size: slices of about ``slice_bytes`` at the design size (as the simulator cuts
    the trees), never more than 65,535 iterations at the largest size (the kernel's 16-bit count)."""
    from forestcoll.pieces import slices_for

    chunk = chunk_bytes(coll, design, n, k)
    chunk_max = chunk_bytes(coll, hi, n, k)
    units = {}
    for c in cnts:
        if opts.unit_bytes is not None:
            unit = c * opts.unit_bytes
        else:
            piece = c * chunk
            unit = math.ceil(piece / slices_for(piece, opts.slice_bytes, opts.max_slices, opts.min_slices) / ALIGN) * ALIGN
        units[c] = max(ALIGN, unit, math.ceil(c * chunk_max / 65535 / ALIGN) * ALIGN)
    return units


def _layout_and_emit(low: _Lowering, acts: list[_Act], boxes: tuple[int, ...], units: dict[int, int], name: str,
                     opts: ExportOptions, hi: int) -> Plan:
    budget, partners = 40, 6
    for _attempt in range(8):
        per_gpu = _group(acts, low.n, budget, partners)
        em = _Emitter(per_gpu, boxes, units)
        plan = em.emit(low.coll, name, "Simple", opts.inplace, low.k, low.scratch, opts.min_message_size, hi)
        worst = _worst(plan)
        if worst is None:
            return plan
        what, g, t = worst
        if budget <= 1 and partners <= 1:
            break
        budget, partners = max(1, budget // 2), max(1, partners // 2)
    raise ExportError(f"the schedule does not fit the executor: gpu {g} thread block {t} needs {what}: use a smaller k "
                      "(fewer pieces per tree level) or a schedule with fewer trees per GPU pair")


def _worst(plan: Plan) -> tuple[str, int, int] | None:
    from forestcoll.mscclpp.plan import executor_ops
    from forestcoll.mscclpp.semantics import wire

    w = wire(plan)
    for g, gp in enumerate(plan.gpus):
        for t, tb in enumerate(gp.threadblocks):
            nops = executor_ops(tb)
            if nops > MAX_OPERATION:
                return f"{nops} operations (the executor allows {MAX_OPERATION})", g, t
            for ctype, ids in w.tb_channels[(g, t)].items():
                if len(ids) > MAX_CHANNEL:
                    return f"{len(ids)} {ctype} channels (at most {MAX_CHANNEL})", g, t
            for ctype, ids in w.tb_remote[(g, t)].items():
                if len(ids) > MAX_CHANNEL:
                    return f"{len(ids)} remote buffers through {ctype} channels (at most {MAX_CHANNEL})", g, t
    return None


def self_check(plan: Plan, launches: int = 2) -> list[str]:
    """Lint the plan and run it in the interpreter (its declared mode, ``launches`` calls back to back, race
    detection) at a small size with one pipeline iteration and, with a smaller unit, with several (the last one
    partial); returns a line per run and raises AssertionError on any problem (a bug in the exporter)."""
    from dataclasses import replace

    from forestcoll.mscclpp.interpreter import run_plan
    from forestcoll.mscclpp.lint import lint_plan
    from forestcoll.mscclpp.plan import parse_plan, write_plan

    text = write_plan(plan)
    parsed = parse_plan(text, plan.name)
    report = lint_plan(parsed, plan.name)
    if report.errors:
        raise AssertionError(f"exported plan fails lint: {report.errors[0].format(plan.name)}")
    lines = []
    n = len(parsed.gpus)
    g0 = parsed.gpus[0]
    nchunks = g0.output_chunks if parsed.collective == "allgather" else g0.input_chunks
    variants = [("one iteration", parsed, 2 * ALIGN)]
    if any(op.name == "pipeline" for g in parsed.gpus for tb in g.threadblocks for op in tb.ops):
        # chunks of 3 units moved 2 units per iteration: two iterations, the last one partial
        small = replace(parsed, gpus=tuple(replace(g, threadblocks=tuple(
            replace(tb, ops=tuple(replace(op, iter_context=(op.iter_context[1] * 2 * ALIGN, op.iter_context[1]))
                                  if op.name == "pipeline" else op for op in tb.ops)) for tb in g.threadblocks))
            for g in parsed.gpus))
        variants.append(("two iterations", small, 3 * ALIGN))
    del n
    for label, p, chunk in variants:
        size = chunk * nchunks
        run = run_plan(p, source=plan.name, size=size, launches=launches)
        if not run.ok:
            problem = run.stuck[0].format() if run.stuck else (run.errors + run.races)[0]
            raise AssertionError(f"exported plan fails in the interpreter ({label}, {size} bytes): {problem}")
        if run.relaxed:
            raise AssertionError(f"exported plan relies on relaxed ordering ({label}): {run.relaxed[0]}")
        lines.append(f"{label}: {run.message} ({run.ops_executed} operations, {run.seconds:.2f} s)")
    return lines
