"""Execution plans: a schedule lowered to rounds of point-to-point messages over one flat buffer.

Every collective runs on a flat *work* buffer whose element ranges are the
roots' shards (:func:`work_layout`).  Each shard is cut into the schedule's k
chunks (chunk c of a shard of n elements is ``[c n / k, (c + 1) n / k)``, so any
n works, also n < k), the chunks into the pieces of
:func:`forestcoll.pieces.cut_pieces`, and each piece into pipeline slices
(:func:`forestcoll.pieces.slices_for`).  A schedule with shard weights (an
allreduce) gives rank r the elements ``[n S_r / D, n S_{r+1} / D)``, S_r = w_0 + ...
+ w_{r-1}, D = S_N (the layout of :func:`forestcoll.schedule.shard_layout`), cut into
its k*w_r chunks by the same rule; with every weight 1 that is the equal shards.
Slices move in synchronous *rounds*:

* out-tree edge into a node at depth d carries slice s in round ``s + d - 1``;
* in-tree edge out of a node whose subtree has height h carries slice s in
  round ``s + h`` (every child, of smaller height, has delivered it before);
* in allreduce the allgather tree of a piece starts after its reduce-scatter
  tree: round ``s + H + d - 1`` with H the height of the reduce-scatter tree;
  with weighted shards, from 32 MiB on (:func:`forestcoll.shard_pieces.root_waits`),
  after root r's whole shard is reduced: round ``G_r + s + d - 1`` with G_r the
  largest ``s_p + H_p`` (slices plus reduce-scatter height) over r's pieces, and
  :attr:`Plan.hold` makes the asynchronous run wait for the same.

Within a round every rank sends one message to each peer it feeds (all the
segments for that peer, in one agreed order) and receives one from each peer
that feeds it; a received segment either overwrites its range (out-trees) or is
combined into it with the reduction operator (in-trees).  A node never sends and
receives the same range in one round, and everything it sends in round t
arrived in rounds < t, so running the rounds in order with a wait at the end of
each is correct and deadlock-free.

:func:`async_ops` reads the same plan without the rounds' barriers: each
message becomes an operation (send it, or receive it and apply it) that waits
only for what it needs on its own rank: a send for the receives that last wrote
its ranges, a receive's apply for the earlier writes and reads of its ranges
(the synchronous order restricted to conflicting pairs, so the result is the
same bit for bit).  A round's message is cut into two *streams*: its in-tree
segments (stream 0, combined by the receiver) and its out-tree segments (stream
1, overwritten), so an allreduce's reduce-scatter traffic never waits for
allgather traffic merged into the same round's message (whose data comes back
over the network a round later).  Messages of one stream between two ranks keep
their round order, so they match in order with the stream as the tag.  (Finer
streams, one per set of feeding peers, were measured slower at 4 MiB on the
emulated fabric of benchmarks/netem.py: many more, smaller messages.)
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from forestcoll import collectives
from forestcoll.collectives import COLLECTIVES
from forestcoll.errors import ScheduleError, UsageError
from forestcoll.pieces import Piece, cut_pieces, piece_rule, shape_trees, slices_for
from forestcoll.schedule import Schedule
from forestcoll.shard_pieces import refuse_weighted, root_waits

__all__ = ["Message", "Op", "Plan", "Round", "Segment", "async_ops", "build_plans", "phase_schedule", "shard_bounds",
           "work_layout"]


@dataclass(frozen=True)
class Segment:
    """Elements ``[start, stop)`` of the work buffer; ``reduce``: the receiver combines instead of overwriting.

    ``stream``: the segment's stream between its two ranks (see :func:`async_ops`): 0 in-tree, 1 out-tree."""

    start: int
    stop: int
    reduce: bool
    stream: int = 0


@dataclass(frozen=True)
class Message:
    """One message of a round: to (sends) or from (recvs) schedule rank ``peer``, its segments in order."""

    peer: int
    segments: tuple[Segment, ...]

    @property
    def numel(self) -> int:
        return sum(s.stop - s.start for s in self.segments)


@dataclass(frozen=True)
class Round:
    """Round ``index`` of one rank: the messages it sends and receives (at most one per peer and direction)."""

    index: int
    sends: tuple[Message, ...]
    recvs: tuple[Message, ...]


@dataclass(frozen=True)
class Plan:
    """What schedule rank ``rank`` does for one call: its non-empty rounds, in order, on a ``numel``-element buffer."""

    collective: str
    rank: int
    ranks: int
    numel: int
    rounds: tuple[Round, ...]
    hold: tuple[int, int] | None = None  # the rank's own shard, broadcast only once all of it is reduced

    @property
    def messages(self) -> int:
        return sum(len(r.sends) for r in self.rounds)


@dataclass(frozen=True)
class Op:
    """One operation of a rank in an asynchronous run: send a message, or receive one and apply it.

    ``after`` are indices (into the rank's op list) of the operations that must be complete first: for a send
    the receives that last wrote its ranges; for a receive's apply, the receives that last wrote its ranges and
    the sends that read them since (a send is complete when its buffer is no longer needed).  ``stream``: its
    segments' stream (:class:`Segment`); messages match in order per peer and stream."""

    kind: str  # "send" | "recv"
    round: int
    message: Message
    after: tuple[int, ...]
    stream: int = 0


def async_ops(plan: Plan) -> tuple[Op, ...]:
    """The plan's messages as operations in round order (sends of a round before its receives; each message
    cut into its streams, in stream order) with the dependencies that make any execution respecting them equal
    to the synchronous rounds (see the module docstring); with :attr:`Plan.hold`, an out-tree send of the held
    range also waits for every in-tree receive of it (the root has reduced its whole shard).  Conflicts are found
    on the elementary intervals between all segment boundaries."""
    order: list[tuple[str, int, Message, int]] = []
    for rnd in plan.rounds:
        for kind, messages in (("send", rnd.sends), ("recv", rnd.recvs)):
            for m in messages:
                for stream in sorted({seg.stream for seg in m.segments}):
                    segs = tuple(seg for seg in m.segments if seg.stream == stream)
                    order.append((kind, rnd.index, Message(m.peer, segs), stream))
    cuts = sorted({b for _k, _r, m, _s in order for seg in m.segments for b in (seg.start, seg.stop)})
    where = {b: i for i, b in enumerate(cuts)}
    last_write: dict[int, int] = {}
    reads: dict[int, list[int]] = {}
    ops = []
    hold, reductions = plan.hold, []  # the in-tree receives of the held range so far
    for i, (kind, rnd_index, m, stream) in enumerate(order):
        after: set[int] = set()
        if hold is not None and any(seg.start < hold[1] and hold[0] < seg.stop for seg in m.segments):
            if kind == "recv" and stream == 0:
                reductions.append(i)
            elif kind == "send" and stream == 1:
                after.update(reductions)
        for seg in m.segments:
            for piece in range(where[seg.start], where[seg.stop]):
                w = last_write.get(piece)
                if w is not None:
                    after.add(w)
                if kind == "send":
                    reads.setdefault(piece, []).append(i)
                else:
                    after.update(reads.pop(piece, ()))
                    last_write[piece] = i
        ops.append(Op(kind, rnd_index, m, tuple(sorted(after)), stream))
    return tuple(ops)


def shard_bounds(n: int, parts: int, weights: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """Cut ``n`` elements into ``parts`` contiguous ranges whose sizes differ by at most one; with ``weights`` (one
    positive integer per part) range i is ``[n S_i / D, n S_{i+1} / D)``, S_i the weights before i, D their sum."""
    if weights is None:
        return [(n * i // parts, n * (i + 1) // parts) for i in range(parts)]
    ends = list(itertools.accumulate(weights, initial=0))
    return [(n * ends[i] // ends[-1], n * ends[i + 1] // ends[-1]) for i in range(parts)]


def phase_schedule(sched: Schedule, collective: str) -> Schedule:
    """The part of ``sched`` that runs ``collective``: itself, or one phase of a several-phase schedule
    (an allreduce schedule's reduce-scatter or allgather phase)."""
    if collective not in COLLECTIVES:
        raise UsageError(f"unknown collective {collective!r}; use one of {', '.join(COLLECTIVES)}")
    if sched.collective == collective:
        return sched
    if collective in COLLECTIVES[sched.collective].phase_names and COLLECTIVES[collective].phase_names == (collective,):
        info = next(p for p in sched.phases if p.name == collective)
        trees = tuple(t for t in sched.trees if t.phase == collective)
        return dataclasses.replace(sched, collective=collective, k=info.k, algbw=info.algbw,
                                   bound_algbw=info.bound_algbw, phases=(info,), trees=trees)
    raise UsageError(f"a {sched.collective} schedule cannot run {collective}; generate one with --collective {collective}")


def work_layout(collective: str, ranks: int, numel: int, root: int = 0,
                weights: Sequence[int] | None = None) -> tuple[int, list[tuple[int, int]]]:
    """Work-buffer size and each schedule rank's shard for a call on ``numel`` elements per rank's input.

    allgather: input ``numel`` per rank, work = output (``ranks * numel``), shard i at ``i * numel``;
    reduce_scatter: input ``ranks * numel`` (``numel`` = output size), same shards; allreduce: work =
    the tensor, shards as :func:`shard_bounds` (with the schedule's shard ``weights``); broadcast / reduce: the
    root's shard is everything."""
    coll = collectives.get(collective)
    if coll.rooted:
        return numel, [(0, numel) if i == root else (0, 0) for i in range(ranks)]
    if "own" in (coll.input, coll.output):  # the call's count is one shard
        return ranks * numel, [(i * numel, (i + 1) * numel) for i in range(ranks)]
    return numel, shard_bounds(numel, ranks, weights)


def build_plans(sched: Schedule, numel: int, element_size: int, slice_bytes: int = 1 << 20,
                max_slices: int | None = None) -> list[Plan]:
    """Every rank's plan for ``sched`` on a call of ``numel`` elements per rank (see :func:`work_layout`).

    ``sched`` must already be the schedule of the collective (see :func:`phase_schedule`)."""
    if numel < 0:
        raise UsageError(f"element count must be >= 0, got {numel}")
    if element_size < 1 or slice_bytes < 1 or (max_slices is not None and max_slices < 1):
        raise UsageError("element size, slice bytes and max slices must be >= 1")
    coll = sched.collective
    if coll not in COLLECTIVES:
        raise ScheduleError(f"the executor cannot run a {coll!r} schedule")
    n_ranks = len(sched.ranks)
    if why := refuse_weighted(sched, "the executor"):
        raise UsageError(why)
    k, pieces = cut_pieces(sched, shape_trees(sched), 1 << 62)  # root r's trees carry k*w_r chunks
    root = sched.ranks.index(sched.root) if sched.root in sched.ranks else 0
    work, shards = work_layout(coll, n_ranks, numel, root, sched.shard_weights)
    weights = sched.weights
    # (round, sender, receiver) -> segments, in the order both sides build them
    traffic: dict[tuple[int, int, int], list[Segment]] = defaultdict(list)
    cut: list[tuple[Piece, int, int, int]] = []  # (piece, first element, end, slices)
    for pc in pieces:
        lo, hi = shards[pc.root]  # the root's shard, cut into its k*w_r chunks
        size, chunks = hi - lo, k * weights[pc.root]
        a = lo + size * pc.start // chunks
        b = lo + size * (pc.start + pc.cnt) // chunks
        if a == b:
            continue
        rule, depth = piece_rule(pc.trees, collectives.get(coll).rooted)  # as simulate.trees.tree_program
        s_count = slices_for((b - a) * element_size, slice_bytes, max_slices, rule=rule, depth=depth)
        cut.append((pc, a, b, min(s_count, b - a)))
    gate: dict[int, int] = {}  # root_waits: root -> the round its allgather trees start from
    if root_waits(sched, numel * element_size):
        for pc, _a, _b, s_count in cut:
            height = sum(t.level[t.root] for t in pc.trees if t.direction == "in")
            gate[pc.root] = max(gate.get(pc.root, 0), s_count + height)
    for pc, a, b, s_count in cut:
        offset = 0
        for t in pc.trees:
            if t.direction == "out" and pc.root in gate:
                offset = gate[pc.root]
            order = sorted(t.level, key=lambda x: (t.level[x], x))
            for j in range(s_count):
                sa = a + (b - a) * j // s_count
                sb = a + (b - a) * (j + 1) // s_count
                for v in order:
                    if v == t.root:
                        continue
                    if t.direction == "in":
                        src, dst, rnd, red = v, t.parent[v], offset + j + t.level[v], True
                    else:
                        src, dst, rnd, red = t.parent[v], v, offset + j + t.level[v] - 1, False
                    traffic[(rnd, src, dst)].append(Segment(sa, sb, red, 0 if red else 1))
            if t.direction == "in":
                offset += t.level[t.root]
    sends: list[dict[int, list[Message]]] = [defaultdict(list) for _ in range(n_ranks)]
    recvs: list[dict[int, list[Message]]] = [defaultdict(list) for _ in range(n_ranks)]
    for (rnd, src, dst), segs in sorted(traffic.items()):
        merged = _merge(segs)
        sends[src][rnd].append(Message(dst, merged))
        recvs[dst][rnd].append(Message(src, merged))
    plans = []
    for r in range(n_ranks):
        idx = sorted(set(sends[r]) | set(recvs[r]))
        rounds = tuple(Round(i, tuple(sends[r].get(i, ())), tuple(recvs[r].get(i, ()))) for i in idx)
        hold = None
        if r in gate:
            hold = shards[r]
        plans.append(Plan(coll, r, n_ranks, work, rounds, hold))
    return plans


def _merge(segs: Sequence[Segment]) -> tuple[Segment, ...]:
    """Join segments that continue each other with the same action and stream (fewer copies, same bytes)."""
    out: list[Segment] = []
    for s in segs:
        if out and out[-1].stop == s.start and out[-1].reduce == s.reduce and out[-1].stream == s.stream:
            out[-1] = Segment(out[-1].start, s.stop, s.reduce, s.stream)
        else:
            out.append(s)
    return tuple(out)
