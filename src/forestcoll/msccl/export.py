"""Lower a tree schedule to an MSCCL algorithm (schedule -> operations -> thread blocks -> :class:`Algo`).

Chunks.  Every root's shard is ``k`` chunks (x ``instances``); root r's chunk
j of instance m is global chunk ``r*k*I + m*k + j`` (allgather, reduce-scatter,
allreduce) or ``m*k + j`` (broadcast, reduce).  Each tree carries a
consecutive range of its root's chunks; for allreduce the ranges of the
reduce-scatter and allgather trees are cut at each other's boundaries so every
piece lies in one tree of each phase.  Pieces longer than 71 chunks are split.
``split=s`` cuts every chunk into s MSCCL chunks (docs/msccl.md, "Split chunks").

Operations.  An out-tree edge u -> v is a send on u and a receive on v; u's
send waits for u's own receive of the piece (or, for allreduce, for the end of
its reduction).  An in-tree edge c -> u is a send on c and a receive-reduce-
copy (``rrc``) on u; u's receives of one piece form a chain (each waits for the
previous, the first adds u's own input), and u's send waits for the chain's
end.  Partial sums live in the output buffer (allreduce) or in scratch.

Thread blocks.  One per (peer, direction, channel).  Layout "stage" (the
default): the edge x -> y of tree t belongs to a pipeline stage (:func:`stages`:
the height of x's subtree for an in-tree, reduce phase first, then the depth of
y for an out-tree) and each stage gets its own channel (a band of them, trees
round robin inside, when there is room; neighbouring stages share one when
the limits are short), so a block never holds a piece of a late stage in front
of an early one that is ready.  Pieces are cut to about a sixth of the largest
(``max_cnt``), so each tree pipelines over several steps.  Layout "tree" (the
first one): channel (t + hash(x, y)) mod C, the fewest C within the step limit.
Every block lists its operations by one global key
(instance, progress, phase, level in the tree, tree, piece, edge), where a
piece's progress is how far into its trees it starts (:func:`_progress`: the
fluid schedule streams every tree's chunks in order, so pieces of different
trees on one connection go in the order their data becomes ready), and every
dependency points to a smaller key (one piece has one progress), so no block ever waits on one that waits on it: the program is
deadlock-free even when each connection buffers a single chunk slice.
Receiving and copying blocks get the low ids (dependency targets must fit ``depid`` in
int8).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from forestcoll import collectives
from forestcoll.errors import ScheduleError, UsageError
from forestcoll.msccl import duplex
from forestcoll.msccl.advice import block_advice, sizes_advice
from forestcoll.msccl.ir import PROTOCOLS, Algo, Gpu, Step, ThreadBlock
from forestcoll.msccl.lint import RUNTIMES, RuntimeLimits
from forestcoll.msccl.ordering import (
    AUTO_MIN_BYTES,
    AUTO_SPLITS,
    AUTO_UNITS,
    DESIGN_BYTES,
    _bands,
    _channel_figures,
    _channel_of,
    _even_pieces,
    _figures_of,
    _heavy_offsets,
    _hop_levels,
    _pieces_per_range,
    _progress,
    _step_counts,
    _tails,
    _units,
    edge_ports,
    stages,
)
from forestcoll.msccl.semantics import MAX_COUNT, size_multiplier
from forestcoll.pieces import RUNTIME_SLICE_BYTES, Piece, TreeShape, cut_pieces, schedule_shards, shape_trees, slices_for
from forestcoll.progress import Progress
from forestcoll.rational import format_rational
from forestcoll.schedule import Schedule

if TYPE_CHECKING:
    from forestcoll.alltoall.schedule import AlltoallSchedule
    from forestcoll.fileio import Output

__all__ = ["LAYOUTS", "ExportError", "ExportOptions", "ExportResult", "export_msccl", "fitting_msccl", "self_check",
           "stages", "write_checked", "write_msccl", "write_generated_msccl"]

LAYOUTS = ("stage", "tree")
ORDERS = ("progress", "latency", "tree", "tail")
MAX_BANDS = 2  # the stage layout tries up to this many channels per stage
RESIDENT_TBS = 108  # thread blocks an A100 keeps resident (one per SM); wider bands only below it (opts.resident)
MAX_SPLIT = 64  # a schedule chunk is cut into at most this many MSCCL chunks
STEPS_PER_PIECE = 6  # by default a piece of a tree moves in about this many steps (each forwarded on its own)


class ExportError(ScheduleError):
    """The schedule cannot be written within a runtime's limits (the message says which and what to do)."""


@dataclass(frozen=True)
class ExportOptions:
    """Knobs of :func:`export_msccl` (defaults suit msccl-executor-nccl)."""

    proto: str = "Simple"
    instances: int = 1
    inplace: bool = True
    outofplace: bool = True
    min_bytes: int = 0
    max_bytes: int = 0
    runtime: str = "msccl-executor-nccl"
    channels: int | None = None  # None: one per stage (see the module docstring), fewer if the limits demand it
    max_cnt: int | None = None  # chunks per step; None: about a sixth of the largest piece (finer pipelining) when
    #                             the steps fit the runtime's limits, else coarser, up to 71
    name: str | None = None
    layout: str = "stage"  # "stage": a channel per pipeline stage; "tree": trees round robin (the first layout)
    ports: bool = True  # an edge whose pair has several ports goes on a channel of its port's residue
    order: str = "progress"  # steps of a thread block: "progress" by how far into its tree a piece starts (the
    #                          fluid schedule's order), "latency" the same with levels in links, "tree" tree by tree
    split: int = 1  # MSCCL chunks per chunk of the schedule (nchunksperloop x split; docs/msccl.md "Split chunks")
    per_tree: int | None = 0  # >0: every tree's range in about this many pieces (_even_pieces); 0: max_cnt
    #                           pieces; None (auto): even pieces of split chunks when they give the trees more
    #                           pipeline units at the design size (max_bytes or 1 GiB; docs/msccl.md "Pieces")
    bands: bool = False  # stage layout: spread the channels left over by one per stage over the busiest stages
    resident: int | None = None  # thread blocks the GPU keeps resident (its SMs / CUs); None: an A100's 108
    notes: tuple[str, ...] = ()  # said first in every result's notes (the runtime and GPU the fabric implied)
    vendor: str | None = None  # the fabric's GPU vendor (nvidia | amd; None: not recorded): what an error advises
    duplex: bool = False  # when no layout keeps within the runtime's blocks per GPU, a send and a receive block of
    #                       one GPU and channel share a <tb> (msccl/duplex.py; docs/msccl.md "Duplex thread blocks")

    def check(self) -> RuntimeLimits:
        if self.proto not in PROTOCOLS:
            raise UsageError(f"unknown protocol {self.proto!r}; choose {', '.join(PROTOCOLS)}")
        if self.runtime not in RUNTIMES:
            raise UsageError(f"unknown runtime {self.runtime!r}; choose {', '.join(RUNTIMES)}")
        if self.instances < 1:
            raise UsageError(f"instances must be >= 1, got {self.instances}")
        if not (self.inplace or self.outofplace):
            raise UsageError("the algorithm must allow in-place or out-of-place calls (or both)")
        if self.min_bytes < 0 or self.max_bytes < 0 or (self.max_bytes and self.max_bytes < self.min_bytes):
            raise UsageError(f"bad size range: min-bytes {self.min_bytes}, max-bytes {self.max_bytes} (0 = no limit)")
        if self.channels is not None and self.channels < 1:
            raise UsageError(f"channels must be >= 1, got {self.channels}")
        if not 1 <= self.split <= MAX_SPLIT:
            raise UsageError(f"split must be within 1..{MAX_SPLIT}, got {self.split}")
        if self.per_tree is not None and not 0 <= self.per_tree <= MAX_COUNT:
            raise UsageError(f"per_tree must be within 0..{MAX_COUNT}, got {self.per_tree}")
        if self.max_cnt is not None and not 1 <= self.max_cnt <= 71:
            raise UsageError(f"max_cnt must be within 1..71, got {self.max_cnt}")
        if self.layout not in LAYOUTS:
            raise UsageError(f"unknown layout {self.layout!r}; choose {', '.join(LAYOUTS)}")
        if self.order not in ORDERS:
            raise UsageError(f"unknown step order {self.order!r}; choose {', '.join(ORDERS)}")
        return RUNTIMES[self.runtime]


@dataclass
class ExportResult:
    """The algorithm and the figures a user checks against the runtime's limits.

    A result (:mod:`forestcoll.results`): ``ok`` when the file fits the runtime it was made for (export
    raises otherwise); after :func:`write_msccl`, ``checks`` holds the self-check's lines and ``output`` the file."""

    algo: Algo
    channels: int  # nchannels of the file (per instance x instances)
    tbs_per_gpu: int  # the largest over GPUs
    steps_per_tb: int  # the largest over thread blocks
    total_steps: int
    limits: RuntimeLimits
    notes: list[str] = field(default_factory=list)
    checked: bool = False  # linted and run in the interpreter (self_check)
    checks: list[str] = field(default_factory=list)
    output: str | None = None

    def fits(self, runtime: str) -> bool:
        """Whether the file keeps within ``runtime``'s limits."""
        lim = RUNTIMES[runtime]
        return (self.steps_per_tb <= lim.steps_per_tb and self.tbs_per_gpu <= lim.tbs_per_gpu
                and self.channels <= lim.channels)

    @property
    def ok(self) -> bool:
        return self.fits(self.limits.name)

    @property
    def message(self) -> str:
        a = self.algo
        verdict = "fits" if self.ok else "DOES NOT FIT"
        return (f"{a.name}: {a.coll}, {a.ngpus} gpus, {self.channels} channel(s), {self.tbs_per_gpu} thread blocks per "
                f"GPU, {self.steps_per_tb} steps per thread block; {verdict} {self.limits.name}")

    def to_dict(self) -> dict[str, Any]:
        a = self.algo
        return {"name": a.name, "coll": a.coll, "ngpus": a.ngpus, "nchunksperloop": a.nchunksperloop,
                "channels": self.channels, "tbs_per_gpu": self.tbs_per_gpu, "steps_per_tb": self.steps_per_tb,
                "total_steps": self.total_steps, "fits": {rt: self.fits(rt) for rt in RUNTIMES}, "notes": self.notes,
                "checked": self.checked, "output": self.output}


# ----- operations ----------------------------------------------------------------------------


@dataclass(eq=False)
class _Op:
    key: tuple
    gpu: int
    kind: str  # "send" | "recv" | "local"
    peer: int
    chan: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    dep: _Op | None = None
    hasdep: bool = False
    tb: int = -1
    s: int = -1
    tree: int = 0  # id of the tree shape of a send or receive (duplex.affinities)


def _build_ops(sched: Schedule, pieces: list[Piece], k: int, n: int, instances: int,
               channels: int, outofplace: bool, layout: str = "stage", order: str = "progress",
               ports: dict[tuple[int, int, int], tuple[int, int]] | None = None,
               spread_band: bool = True, levels: dict | None = None,
               widths: list[int] | None = None, heavy: dict | None = None) -> tuple[list[_Op], list[int]]:
    """All operations of every GPU (not yet in thread blocks) and each GPU's scratch chunk count; ``ports``
    (:func:`edge_ports`) moves an edge whose pair has several ports to a channel of its port's residue; ``levels``
    (:func:`_hop_levels`) replaces the tree levels in the step order."""
    coll = collectives.get(sched.collective)
    copy_first = outofplace and not coll.reduces  # an out-of-place root sends from its output, copied first
    two_phase = len(coll.phases) > 1  # allreduce: in-trees reduce into the output, out-trees send it from there
    ops: list[_Op] = []
    scratch = [0] * n
    final_op: dict[tuple[int, int, int], _Op] = {}  # (instance, root, start) -> op that completes the reduction
    frac = _progress(pieces) if order in ("progress", "latency", "tail") else {id(pc): Fraction(0) for pc in pieces}
    rank = {f: i for i, f in enumerate(sorted(set(frac.values())))}  # keys hold the rank: same order, int compares
    frac = {key: rank[f] for key, f in frac.items()}
    tails = _tails(pieces) if order == "tail" or (two_phase and order in ("progress", "latency")) else None
    lvl = (lambda t, x: levels[(id(t), x)]) if levels is not None else (lambda t, x: t.level[x])
    chan_of = _channel_of(pieces, channels, layout, ports, spread_band, widths, heavy)

    w = (1,) * n if coll.rooted else sched.weights  # rank r owns k*w_r chunks per instance, in rank order
    first = [0, *itertools.accumulate(x * k * instances for x in w)]
    for m in range(instances):
        for pc in pieces:
            base = m * k + pc.start if coll.rooted else first[pc.root] + m * k * w[pc.root] + pc.start
            local = m * k + pc.start  # index within the root's own block (input of allgather, output of reduce-scatter)
            for t in pc.trees:
                tkey = (frac[id(pc)], t.phase)
                rest = (lambda t, x: 0) if tails is None else (lambda t, x, pc=pc: -tails[(id(pc), id(t), x)])
                if t.direction == "in":
                    acc: dict[int, tuple[str, int]] = {}
                    last: dict[int, _Op] = {}
                    # visit nodes from the leaves up so children finish before parents
                    for v in sorted(t.level, key=lambda x: (t.level[x], x)):
                        kids = t.children.get(v, [])
                        if v == t.root:
                            where = ("o", local) if coll.output == "own" else ("o", base)
                        elif kids:
                            if two_phase:
                                where = ("o", base)
                            else:
                                where = ("s", scratch[v])
                                scratch[v] += pc.cnt
                        else:
                            where = ("i", base)
                        acc[v] = where
                        prev: _Op | None = None
                        for c in sorted(kids, key=lambda x: (lvl(t, x), x)):
                            key = (m, *tkey, lvl(t, c), rest(t, v), t.order, pc.root, pc.start, c, v)
                            ch = chan_of(t, m, c, v)
                            send = _Op(key, c, "send", v, ch, "s", acc[c][0], acc[c][1], acc[c][0], acc[c][1], pc.cnt,
                                       dep=last.get(c), tree=id(t))
                            src = ("i", base) if prev is None else where
                            recv = _Op(key, v, "recv", c, ch, "rrc", src[0], src[1], where[0], where[1], pc.cnt, dep=prev,
                                       tree=id(t))
                            ops += (send, recv)
                            prev = recv
                        if prev is not None:
                            last[v] = prev
                    if t.root in last:
                        final_op[(m, pc.root, pc.start)] = last[t.root]
                else:
                    have: dict[int, _Op | None] = {}
                    if two_phase:
                        src_root = ("o", base)
                        have[t.root] = final_op.get((m, pc.root, pc.start))
                    elif copy_first:
                        # out-of-place: the root first copies its input into its own output slot, then sends from there
                        src_root = ("o", base)
                        cpy = _Op((m, -1, pc.root, pc.start), pc.root, "local", -1, 0, "cpy", "i",
                                  local if coll.input == "own" else base, "o", base, pc.cnt)
                        ops.append(cpy)
                        have[t.root] = cpy
                    else:
                        src_root = ("i", local if coll.input == "own" else base)
                        have[t.root] = None
                    for v in sorted(t.level, key=lambda x: (t.level[x], x)):
                        if v == t.root:
                            continue
                        u = t.parent[v]
                        key = (m, *tkey, lvl(t, v), rest(t, v), t.order, pc.root, pc.start, u, v)
                        src = src_root if u == t.root else ("o", base)
                        ch = chan_of(t, m, u, v)
                        send = _Op(key, u, "send", v, ch, "s", src[0], src[1], src[0], src[1], pc.cnt, dep=have[u],
                                   tree=id(t))
                        recv = _Op(key, v, "recv", u, ch, "r", "o", base, "o", base, pc.cnt, tree=id(t))
                        ops += (send, recv)
                        have[v] = recv
    return ops, scratch


def _fit(sched: Schedule, trees: list[TreeShape], opts: ExportOptions, split: int, per_tree: int, n: int,
         limits: RuntimeLimits, ports: dict | None, levels: dict | None,
         counts: list[int] | None = None) -> tuple[int, list[Piece], int, list[_Op], list[int]]:
    """(k x split, pieces, channels, operations, scratch) of the finest pieces whose file fits the limits: ``max_cnt``
    chunks per piece (about a sixth of the largest range, coarser until the steps fit), or with ``per_tree`` every
    range in that many pieces (fewer until they fit; ``counts``: the piece counts to try, in order)."""
    if opts.max_cnt is not None and not per_tree:
        counts = [opts.max_cnt]
    elif per_tree:
        counts = counts or sorted({max(1, per_tree >> i) for i in range(8)}, reverse=True)
    else:
        _k, whole = cut_pieces(sched, trees, MAX_COUNT, split)
        first = max(1, -(-max(pc.cnt for pc in whole) // STEPS_PER_PIECE))
        counts = sorted({min(MAX_COUNT, first << i) for i in range(8)})

    def attempt(cnt: int):
        k, pieces = (_even_pieces(sched, trees, cnt, split) if per_tree else cut_pieces(sched, trees, cnt, split))
        return (k, pieces, *_layout(sched, pieces, k, n, opts, limits, ports, levels, heavy=bool(per_tree)))

    # counts run finest to coarsest, and a coarser count fits wherever a finer one does (the same thread blocks on
    # the same channels, no block with more steps): the finest that fits by bisection, as a scan would find it (a
    # file that fits nowhere costs two layouts, not eight; the coarsest's error is the one raised).  Uneven bands
    # size the channels by the pieces' loads, so there each count is tried in turn.
    for i, cnt in enumerate(counts if opts.bands else counts[:1]):
        try:
            return attempt(cnt)
        except ExportError:
            if i == len(counts) - 1:
                raise
    lo, hi = 0, len(counts) - 1
    found = attempt(counts[hi])
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            found, hi = attempt(counts[mid]), mid
        except ExportError:
            lo = mid
    return found


def _fit_duplex(sched: Schedule, trees: list[TreeShape], opts: ExportOptions, *args: Any) -> tuple:
    """:func:`_fit` without duplex blocks at any piece count that fits, else (with ``opts.duplex``, when the blocks
    per GPU may be the limit) with them: a file that fits unmerged is written as without duplex, byte for byte."""
    if not opts.duplex:
        return _fit(sched, trees, opts, *args)
    try:
        return _fit(sched, trees, replace(opts, duplex=False), *args)
    except ExportError:
        return _fit(sched, trees, opts, *args)  # merging only helps a layout over the blocks limit; else this fails too


def _stage_loads(sched: Schedule, pieces: list[Piece], inst: int, n_stages: int, opts: ExportOptions) -> list[int]:
    """The most steps one thread block holds in each pipeline stage with one channel per stage (counted per tree
    edge, :func:`~forestcoll.msccl.ordering._step_counts`, as :func:`_build_ops` would place them)."""
    coll = collectives.get(sched.collective)
    chan_of = _channel_of(pieces, n_stages, "stage", None, True, [1] * n_stages)
    steps = _step_counts(pieces, inst, chan_of, opts.outofplace and not coll.reduces, len(coll.phases) > 1)
    loads = [0] * n_stages
    for (_g, _kind, _peer, chan), cnt in steps.items():
        loads[chan % n_stages] = max(loads[chan % n_stages], cnt)
    return loads


def _layout(sched: Schedule, pieces: list[Piece], k: int, n: int, opts: ExportOptions, limits: RuntimeLimits,
            ports: dict | None = None, levels: dict | None = None, heavy: bool = False) -> tuple[int, list[_Op], list[int]]:
    """Channels and operations within the runtime's limits (ExportError naming the limit otherwise); with ``heavy``
    (even pieces), when no other layout fits, one channel per stage with only the blocks over the step limit spread
    over their stage's band (:func:`~forestcoll.msccl.ordering._heavy_offsets`)."""
    inst = opts.instances
    max_channels = limits.channels // inst
    # channels: "stage" gives every pipeline stage its own channels (a band of them when a thread block would
    # exceed the step limit), or folds neighbouring stages together when the thread blocks would not fit;
    # "tree" takes the fewest channels that keep every thread block within the step limit
    n_stages = max(1, stages(pieces)[0])
    if opts.channels:
        candidates: list[tuple[int, bool | None]] = [(opts.channels, True)]
    elif opts.layout == "tree":
        candidates = [(c, True) for c in range(1, max_channels + 1)]
    else:
        first = min(n_stages, max_channels)
        bands = [c for c in range(first, max_channels + 1, first)][:MAX_BANDS]
        widths = sorted({p for _i, p in (ports or {}).values()})
        port_bands = [first * p for p in widths if first * p <= max_channels][:1]
        # a full band spreads every stage's trees over its channels; a port band only the edges of multi-port pairs
        candidates = ([(c, True) for c in bands[::-1] if c > first] + [(c, False) for c in port_bands]
                      + [(c, True) for c in range(first, 0, -1)])
    widest = max_channels // n_stages * n_stages
    if heavy and opts.layout == "stage" and not opts.channels and not opts.bands and widest >= 2 * n_stages:
        candidates.append((widest, None))  # last: every file that fits without it stays as it was
    uneven: dict[int, list[int]] = {}
    if opts.layout == "stage" and opts.bands and n_stages < max_channels and len(candidates) > 0:
        loads = _stage_loads(sched, pieces, inst, n_stages, opts)
        extra = [c for c in range(max_channels, n_stages, -1) if not any(b >= c for b, _s in candidates)]
        for c in extra:
            uneven[c] = _bands(loads, c)
        candidates = [(c, True) for c in extra] + candidates
    chosen = None
    failure = ""
    coll = collectives.get(sched.collective)
    copy_first, two_phase = opts.outofplace and not coll.reduces, len(coll.phases) > 1
    # with duplex, a second pass merges blocks where the first found no layout within the blocks per GPU
    for merge, (c, spread_band) in [(m, cand) for m in (False, True)[:1 + opts.duplex] for cand in candidates]:
        if c * inst > limits.channels:
            raise ExportError(f"{c} channels x {inst} instances exceed the {limits.channels} channels {limits.name} allows")
        # the figures of the operations, counted per tree edge: the operations are built for the chosen layout only
        offsets = _heavy_offsets(pieces, c, ports, limits.steps_per_tb) if spread_band is None else None
        chan_of = _channel_of(pieces, c, opts.layout, ports, bool(spread_band), uneven.get(c), offsets)
        counted = _step_counts(pieces, inst, chan_of, copy_first, two_phase)
        steps_per_tb, tbs_per_gpu, per_channel, recv_tbs = _figures_of(counted, n)
        if merge and tbs_per_gpu > limits.tbs_per_gpu:  # send and receive blocks share blocks (msccl/duplex.py)
            steps_per_tb, tbs_per_gpu, per_channel, recv_tbs = duplex.figures(
                counted, n, limits.steps_per_tb, duplex.affinities(pieces, inst, chan_of), limits.tbs_per_gpu)
        if opts.layout == "stage" and not opts.channels and c > n_stages and tbs_per_gpu > (opts.resident or RESIDENT_TBS):
            continue  # a wider band only while every thread block can stay resident
        if tbs_per_gpu > limits.tbs_per_gpu:
            advice = block_advice(limits.name, opts.vendor, channels_given=bool(opts.channels), channels=c,
                                  instances=inst, k=sched.k)
            failure = (f"the schedule needs {tbs_per_gpu} thread blocks on one GPU with {c} channel(s); {limits.name} "
                       f"allows {limits.tbs_per_gpu}" + (f": use {' or '.join(advice)}" if advice else ""))
            if (opts.layout == "tree" or opts.channels) and merge == opts.duplex:
                raise ExportError(failure)
            continue
        if recv_tbs > limits.max_depid + 1:
            failure = (f"{recv_tbs} receiving and copying thread blocks on one GPU, but dependencies can only name the "
                       f"first {limits.max_depid + 1} (depid is int8): use fewer channels or instances")
            continue
        if per_channel > limits.tbs_per_channel_direction:
            failure = (f"with {c} channel(s) one GPU talks to {per_channel} peers in one direction on one channel; "
                       f"the runtimes allow {limits.tbs_per_channel_direction}: use more --channels")
            continue
        if steps_per_tb > limits.steps_per_tb:
            hint = "use a smaller --k (--k 1 needs the fewest steps)" if sched.k > 1 else "use more --channels"
            failure = (f"with {c} channel(s) a thread block needs {steps_per_tb} steps; {limits.name} allows "
                       f"{limits.steps_per_tb}: {hint}")
            continue
        ops, scratch = _build_ops(sched, pieces, k, n, inst, c, opts.outofplace, opts.layout, opts.order, ports,
                                  bool(spread_band), levels, uneven.get(c), offsets)
        chosen = (c, ops, scratch)
        break
    if chosen is None:
        raise ExportError(failure)
    return chosen


def export_msccl(sched: Schedule | AlltoallSchedule, options: ExportOptions | None = None, **kwargs: Any) -> ExportResult:
    """The MSCCL algorithm of ``sched`` (see the module docstring for the lowering; an all-to-all schedule is
    lowered by :func:`forestcoll.alltoall.msccl.export_alltoall_msccl`)."""
    opts = options or ExportOptions(**kwargs)
    spec = collectives.get(sched.collective)
    if spec.msccl is not None and not spec.tree_based:
        from forestcoll.alltoall.msccl import export_alltoall_msccl

        if opts.split != 1:
            raise UsageError(f"split applies to tree schedules; {sched.collective} moves whole chunks along paths")
        return export_alltoall_msccl(sched, opts)
    limits = opts.check()
    if spec.msccl is None or not spec.tree_based:
        raise ExportError(f"collective {sched.collective!r} has no MSCCL form")
    ranks = list(sched.ranks)
    n, d = len(ranks), schedule_shards(sched)  # d: shards of the buffer (n, or the sum of the shard weights)
    if sched.shard_weights is not None and "own" in (spec.input, spec.output):
        raise ExportError(f"MSCCL gives every rank an equal shard in {sched.collective}; weighted shards are for allreduce")
    trees = shape_trees(sched)
    ports = edge_ports(sched, trees) if opts.ports else None
    levels = _hop_levels(sched, trees) if opts.order == "latency" else None
    inst = opts.instances
    max_channels = limits.channels // inst
    if max_channels < 1:
        raise ExportError(f"{inst} instances need at least {inst} channels; {limits.name} allows {limits.channels}")
    fit = _fit_duplex(sched, trees, opts, opts.split, opts.per_tree or 0, n, limits, ports, levels)
    split = opts.split
    design = opts.max_bytes or DESIGN_BYTES
    if (opts.per_tree is None and opts.max_cnt is None and opts.split == 1 and opts.proto == "Simple"
            and design >= AUTO_MIN_BYTES):
        # auto: when some tree's stream would cross a stage in few, large units at the design size, cut every
        # tree's range into even pieces of split chunks, if that gives each stream more units (docs/msccl.md)
        best = _units(fit[1], spec.chunks_per_loop(d, fit[0]) * inst, design)
        shortest = min(pc.cnt for pc in cut_pieces(sched, trees, 1 << 40)[1])  # the smallest range, in chunks
        # a block of S classic steps holds >= S / (most classic pieces of a range) ranges, each >= min(p, shortest x s)
        # steps when cut evenly: pieces counts that cannot fit are not tried (building them is what costs)
        ranges = -(-_channel_figures(fit[3], n)[0] // _pieces_per_range(fit[1], max))
        for s in AUTO_SPLITS if best < AUTO_UNITS else ():
            iterations = slices_for(design / (spec.chunks_per_loop(d, fit[0] // opts.split * s) * inst),
                                    RUNTIME_SLICE_BYTES, None, rule="ring")
            tries = [p for p in (s >> i for i in range(8)) if p and min(shortest * s, p) * iterations > best
                     and ranges * min(shortest * s, p) <= limits.steps_per_tb]
            if not tries:
                continue  # cannot give the smallest range more units than the classic pieces
            try:
                other = _fit_duplex(sched, trees, opts, s, s, n, limits, ports, levels, tries)
            except ExportError:
                continue
            units = _units(other[1], spec.chunks_per_loop(d, other[0]) * inst, design)
            if units > best:
                best, fit, split = units, other, s
    k, _pieces, c, ops, scratch = fit
    steps_per_tb, tbs_per_gpu, _per_channel, _targets = _channel_figures(ops, n)
    merged = opts.duplex and tbs_per_gpu > limits.tbs_per_gpu  # as _layout decided (its second pass)
    layout, groups = duplex.assign(ops, n, limits.steps_per_tb if merged else None,
                                   duplex.op_affinities(ops) if merged else None, limits.tbs_per_gpu)
    if merged:
        steps_per_tb = max(len(v) for v in groups.values())
        tbs_per_gpu = max(len(x) for x in layout)

    coll = spec.msccl
    nchunks = spec.chunks_per_loop(d, k) * inst
    in_chunks = k * inst if spec.input == "own" else nchunks
    out_chunks = k * inst if spec.output == "own" else nchunks
    gpus: list[Gpu] = []
    for g in range(n):
        gpu = Gpu(g, in_chunks, out_chunks, scratch[g])
        for tb_id, (send, recv, chan) in enumerate(layout[g]):
            tb = ThreadBlock(tb_id, send, recv, chan)
            for op in groups[(g, tb_id)]:
                dep = op.dep
                tb.steps.append(Step(op.s, op.type, op.srcbuf, op.srcoff, op.dstbuf, op.dstoff, op.cnt,
                                     dep.tb if dep is not None and dep.tb != op.tb else -1,
                                     dep.s if dep is not None and dep.tb != op.tb else -1,
                                     int(op.hasdep)))
            gpu.tbs.append(tb)
        gpus.append(gpu)
    name = opts.name or (f"forestcoll_{coll}_k{sched.k}" + (f"_s{split}" if split > 1 else "")
                         + (f"_x{inst}" if inst > 1 else "") + ("_duplex" if merged else ""))
    name = re.sub(r"[^A-Za-z0-9_.:-]", "_", name)[:200]
    comments = [
        f"forestcoll: {sched.collective} for {sched.topology or 'a custom topology'}, {n} ranks, k={sched.k}"
        + (f", root {sched.root}" if sched.root else ""),
        f"algbw {format_rational(sched.algbw)} GB/s (optimum {format_rational(sched.bound_algbw)} GB/s); "
        f"rank i runs the schedule's i-th rank ({ranks[0]}, {ranks[1]}, ...)",
    ] + ([f"weighted shards: rank i reduces w_i/{d} of each loop's chunks, contiguous in rank order (w "
          f"{min(sched.weights)}..{max(sched.weights)}, the schedule's shard_weights)"] if sched.shard_weights else [])
    algo = Algo(name=name, proto=opts.proto, nchannels=c * inst, nchunksperloop=nchunks, ngpus=n, coll=coll,
                inplace=int(opts.inplace), outofplace=int(opts.outofplace), min_bytes=opts.min_bytes,
                max_bytes=opts.max_bytes, gpus=gpus, comments=comments)
    total = sum(len(tb.steps) for g in gpus for tb in g.tbs)
    notes = list(opts.notes)
    if merged:
        notes.append(f"sends and receives share thread blocks (a send and a receive stream of one GPU and channel per "
                     f"block, steps in the global order) to keep within {limits.tbs_per_gpu} per GPU ({limits.name})")
    mult = size_multiplier(coll, n)
    step = nchunks // math.gcd(nchunks, mult)
    if step & (step - 1):
        notes.append(f"the runtime uses this file only when count x {mult} is a multiple of nchunksperloop={nchunks}, "
                     f"i.e. count a multiple of {step}; power-of-two sizes are not: a power-of-two --k avoids this")
    if tbs_per_gpu > (resident := opts.resident or RESIDENT_TBS):
        notes.append(f"{tbs_per_gpu} thread blocks per GPU: more than the GPU keeps resident ({resident}"
                     + (" SMs / CUs" if opts.resident else ", an A100's SMs") + "); all must be resident at once")
    return ExportResult(algo, c * inst, tbs_per_gpu, steps_per_tb, total, limits, notes)


def self_check(result: ExportResult, runtime: str | None = None, progress: Progress | None = None) -> list[str]:
    """Lint the written text and run the algorithm in every mode it declares, with one slot per connection
    (the strictest buffering) and race detection; returns a line per mode (raises on any problem: a bug here).
    ``progress`` (:mod:`forestcoll.progress`) hears the interpreter's steps."""
    from forestcoll.msccl.interpreter import run_modes
    from forestcoll.msccl.ir import parse_algo, write_algo
    from forestcoll.msccl.lint import lint

    text = write_algo(result.algo)
    algo = parse_algo(text, result.algo.name)
    errors = [f for f in lint(algo, text, runtime or result.limits.name) if f.severity == "error"]
    if errors:
        raise AssertionError(f"exported file fails lint: {errors[0].format(algo.name)}")
    lines = []
    for run in run_modes(algo, slots=1, nbytes=None, progress=progress):
        if not run.ok:
            problem = run.stuck[0].format() if run.stuck else run.errors[0]
            raise AssertionError(f"exported file fails in the interpreter ({run.mode}): {problem}")
        lines.append(f"{run.mode}: {run.summary()} ({run.transmissions} transmissions, {run.seconds:.2f} s, "
                     "one slot per connection)")
    return lines


def write_msccl(sched: Schedule | AlltoallSchedule, path: Output, options: ExportOptions | None = None, check: bool = True,
                progress: Progress | None = None, **kwargs: Any) -> ExportResult:
    """Export ``sched``, check the file (:func:`self_check`, unless ``check`` is False) and write it to ``path``
    whole (temporary file, then rename): what ``forestcoll export`` does."""
    return write_checked(export_msccl(sched, options, **kwargs), path, check, progress)


def write_checked(result: ExportResult, path: Output, check: bool, progress: Progress | None) -> ExportResult:
    """Self-check an exported file (unless ``check`` is False) and write it to ``path`` whole."""
    from forestcoll.fileio import atomic_write_text
    from forestcoll.msccl.ir import write_algo

    if check:
        result.checks = self_check(result, progress=progress)
        result.checked = True
    atomic_write_text(path, write_algo(result.algo))
    result.output = str(path)
    return result


def _over_limits(exc: ExportError) -> bool:
    """Whether an export failed on the runtime's step / thread-block limits (a smaller k needs fewer of both)."""
    return "steps;" in str(exc) or "thread blocks on one GPU" in str(exc)


def fitting_msccl(topology, collective: str, sched: Schedule, options: ExportOptions | None = None,
                  rate: Callable[[Schedule, int], float] | None = None, size: int = 1 << 30,
                  file_rate: Callable[[Algo, int], float] | None = None, incumbent: Algo | None = None,
                  **generate_kwargs: Any) -> tuple[Schedule, str] | None:
    """The schedule to export when ``sched``'s MSCCL file exceeds the runtime's limits (steps per thread block,
    thread blocks per GPU): among the powers of two k below ``sched.k`` whose files fit (from k = 1 up to the first
    that does not), the one whose *file* is fastest, ``file_rate(algo, size)`` (the file as the runtime runs it:
    its layout, not only its trees, decides), or else the highest ``rate(schedule, size)`` (asked largest k first),
    or without either the highest exact rate of the trees; ties to the larger k.  ``incumbent``, ``sched``'s own
    file when it fits, competes too (by ``file_rate``).  Returns it with a phrase saying how it was chosen; None
    when none fits.  (The rates come from the caller: this layer does not simulate.)"""
    found = _fitting(topology, collective, sched, options, rate, size, file_rate, incumbent, **generate_kwargs)
    return None if found is None else found[:2]


def _fitting(topology, collective: str, sched: Schedule, options: ExportOptions | None, rate: Callable | None,
             size: int, file_rate: Callable | None, incumbent: ExportResult | Algo | None, **generate_kwargs: Any):
    """:func:`fitting_msccl`, the chosen file as exported (None for an :class:`Algo` ``incumbent``) and every file
    that fits, ``{k: (schedule, export result)}`` (an :class:`Algo` ``incumbent`` left out)."""
    from forestcoll.msccl.reuse import exported, generated
    from forestcoll.units import format_size

    base = options or ExportOptions()
    fitting: dict[int, Schedule] = {}
    files: dict[int, ExportResult | Algo] = {}
    # smallest k first, up to the first that does not fit (more trees never need fewer steps or blocks)
    for kk in sorted(2**i for i in range(20) if 2**i < sched.k):
        cand = generated(topology, collective, kk, **generate_kwargs)  # once per run (msccl/reuse.py)
        try:
            files[kk] = exported(cand, base)
        except ExportError as exc:
            if _over_limits(exc):
                break
            raise
        fitting[kk] = cand
    if not fitting:
        return None
    as_result = lambda kk: files[kk] if isinstance(files[kk], ExportResult) else None  # noqa: E731
    every = lambda: {kk: (fitting[kk], files[kk]) for kk in fitting if as_result(kk)}  # noqa: E731
    if rate is None and file_rate is None:
        top = max(fitting, key=lambda kk: (fitting[kk].algbw, kk))
        return fitting[top], (f"the power of two below it whose file fits with the highest exact rate "
                              f"({float(fitting[top].algbw):.1f} GB/s)"), as_result(top), every()
    if file_rate is not None:
        if incumbent is not None:
            fitting[sched.k], files[sched.k] = sched, incumbent
        rates = {kk: file_rate(getattr(files[kk], "algo", files[kk]), size) for kk in sorted(fitting, reverse=True)}
        what = "files"
    else:
        assert rate is not None
        rates = {kk: rate(fitting[kk], size) for kk in sorted(fitting, reverse=True)}
        what = "trees"
    chosen = max(rates, key=lambda kk: (rates[kk], kk))
    others = ", ".join(f"k={kk} {rates[kk]:.1f}" for kk in sorted(rates, reverse=True) if kk != chosen)
    among = (f"the files that fit (k={sched.k} and the powers of two below it)" if incumbent is not None and file_rate
             else "the powers of two below it whose files fit")
    return fitting[chosen], (f"the fastest of {among}, {what} simulated at "
                             f"{format_size(size)} ({rates[chosen]:.1f} GB/s" + (f"; {others}" if others else "") + ")"
                             ), as_result(chosen), every()


def write_generated_msccl(topology, sched: Schedule, path: Output, options: ExportOptions | None = None,
                          check: bool = True, rate: Callable[[Schedule, int], float] | None = None,
                          progress: Progress | None = None, file_rate: Callable[[Algo, int], float] | None = None,
                          size: int = 1 << 30, split: bool = True, **generate_kwargs: Any) -> tuple[Schedule, ExportResult]:
    """Write :func:`forestcoll.msccl.generated.generated_msccl`'s file (what ``forestcoll generate --format msccl``
    does without ``--k``): ``sched``'s, or the fastest that fits, split or with even pieces where faster; notes say which."""
    from forestcoll.msccl.generated import generated_msccl
    from forestcoll.progress import report

    report(progress, "choosing the file (k, variant) by simulated rate", 0)
    sched, result = generated_msccl(topology, sched, options, rate, file_rate, size, split, **generate_kwargs)
    if file_rate is not None and (advice := sizes_advice(result.limits.name, result.algo.min_bytes, result.algo.max_bytes,
                                                         file_rate(result.algo, size), sched.bound_algbw, size)):
        result.notes.append(advice)  # the one file misses the target for RCCL: per-size files (advice.py)
    return sched, write_checked(result, path, check, progress)
