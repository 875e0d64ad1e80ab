"""An all-to-all schedule as per-rank rounds of point-to-point messages over flat buffers (no torch here).

The call is ``all_to_all_single(output, input)`` with ``count`` elements per
pair: rank s's input elements ``t*count .. (t+1)*count`` go to rank t's output
elements ``s*count .. (s+1)*count``.  Each pair's block is cut into the
schedule's k chunks by floor division (chunk c is elements
``c*count//k .. (c+1)*count//k``, so any count works, even one smaller than k);
a flow of fraction p/k carries its p consecutive chunks.

A flow's path is cut at the ranks it relays through into hops; hop h of every
flow happens in round h (a relay receives into its scratch buffer in round h
and sends on from it in round h+1).  In each round a rank sends at most one
message to each peer and receives at most one from each: the segments of all
transfers between the two are packed in one message, in the same order on
both sides.  Every rank copies its own block locally first.  A torch executor
runs each round as one ``batch_isend_irecv``; :func:`run_plan` runs the plans
on numpy buffers (the executor's semantics without a network).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forestcoll.alltoall.schedule import AlltoallSchedule

BUFFERS = ("input", "output", "scratch")


@dataclass(frozen=True)
class Segment:
    """``length`` elements of one of a rank's buffers from ``start``."""

    buffer: str
    start: int
    length: int


@dataclass(frozen=True)
class Message:
    """What a rank sends to (or receives from) ``peer`` in one round: the segments, packed in order."""

    peer: int
    segments: tuple[Segment, ...]

    @property
    def numel(self) -> int:
        return sum(s.length for s in self.segments)


@dataclass(frozen=True)
class Round:
    sends: tuple[Message, ...]
    recvs: tuple[Message, ...]


@dataclass(frozen=True)
class RankPlan:
    rank: int
    scratch: int  # elements of scratch the rank needs
    copy: Segment  # its own block: input -> output at the same offset
    rounds: tuple[Round, ...]


@dataclass
class AlltoallPlan:
    """Every rank's plan for one call size, or why there is none."""

    ok: bool
    message: str
    count: int = 0
    ranks: int = 0
    plans: list[RankPlan] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "message": self.message,
            "count": self.count,
            "ranks": self.ranks,
            "rounds": max((len(p.rounds) for p in self.plans), default=0),
            "messages": sum(len(r.sends) for p in self.plans for r in p.rounds),
            "scratch": [p.scratch for p in self.plans],
        }


def plan_alltoall(sched: AlltoallSchedule, count: int) -> AlltoallPlan:
    """Per-rank rounds for an all-to-all of ``count`` elements per pair (see the module docstring)."""
    if count < 0:
        return AlltoallPlan(False, f"count must be >= 0, got {count}")
    ranks = list(sched.ranks)
    n = len(ranks)
    rank_of = {r: i for i, r in enumerate(ranks)}
    k = sched.k
    bounds = [c * count // k for c in range(k + 1)]
    used: dict[tuple[int, int], int] = defaultdict(int)
    scratch = [0] * n
    # (round, sender, receiver) -> [(src segment, dst segment)]
    moves: dict[tuple[int, int, int], list[tuple[Segment, Segment]]] = defaultdict(list)
    for f in sched.flows:
        if f.src not in rank_of or f.dst not in rank_of:
            return AlltoallPlan(False, f"flow {f.src} -> {f.dst} names a node that is not a rank")
        s, t = rank_of[f.src], rank_of[f.dst]
        chunks = f.fraction * k
        if chunks.denominator != 1:
            return AlltoallPlan(False, f"flow {f.src} -> {f.dst}: fraction is not a whole number of 1/{k}")
        first = used[(s, t)]
        used[(s, t)] += int(chunks)
        lo, hi = bounds[first], bounds[first + int(chunks)]
        if hi == lo:
            continue
        hops = [rank_of[x] for x in f.path if x in rank_of]
        src = Segment("input", t * count + lo, hi - lo)
        for h, (a, b) in enumerate(zip(hops, hops[1:])):
            if h == len(hops) - 2:
                dst = Segment("output", s * count + lo, hi - lo)
            else:
                dst = Segment("scratch", scratch[b], hi - lo)
                scratch[b] += hi - lo
            moves[(h, a, b)].append((src, dst))
            src = dst
    if any(v != k for v in used.values()) or len(used) != n * (n - 1):
        return AlltoallPlan(False, "the schedule's fractions do not cover every pair exactly once")
    nrounds = 1 + max((h for h, _, _ in moves), default=-1)
    sends: dict[tuple[int, int], list[Message]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[Message]] = defaultdict(list)
    for (h, a, b), pairs in sorted(moves.items()):
        sends[(h, a)].append(Message(b, tuple(p[0] for p in pairs)))
        recvs[(h, b)].append(Message(a, tuple(p[1] for p in pairs)))
    plans = []
    for r in range(n):
        rounds = tuple(Round(tuple(sends.get((h, r), [])), tuple(recvs.get((h, r), []))) for h in range(nrounds))
        plans.append(RankPlan(r, scratch[r], Segment("input", r * count, count), rounds))
    return AlltoallPlan(True, f"{n} ranks, {nrounds} round(s), count {count}", count, n, plans)


def run_plan(plan: AlltoallPlan, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Every rank's output after running the plans on numpy buffers (rounds in lock step, messages matched
    sender-to-receiver in order, as the executor's batched point-to-point operations would)."""
    n = plan.ranks
    bufs = [{"input": np.asarray(x), "output": np.full(n * plan.count, np.nan if np.asarray(x).dtype.kind == "f" else -1,
                                                         dtype=np.asarray(x).dtype),
             "scratch": np.zeros(p.scratch, dtype=np.asarray(x).dtype)} for x, p in zip(inputs, plan.plans)]
    for p, b in zip(plan.plans, bufs):
        c = p.copy
        b["output"][c.start:c.start + c.length] = b["input"][c.start:c.start + c.length]
    for h in range(max((len(p.rounds) for p in plan.plans), default=0)):
        wire: dict[tuple[int, int], np.ndarray] = {}
        for p in plan.plans:
            for m in p.rounds[h].sends:
                wire[(p.rank, m.peer)] = np.concatenate([bufs[p.rank][s.buffer][s.start:s.start + s.length] for s in m.segments])
        for p in plan.plans:
            for m in p.rounds[h].recvs:
                data = wire.pop((m.peer, p.rank))
                if len(data) != m.numel:
                    raise AssertionError(f"round {h}: {m.peer} -> {p.rank} sends {len(data)} elements, {m.numel} expected")
                pos = 0
                for s in m.segments:
                    bufs[p.rank][s.buffer][s.start:s.start + s.length] = data[pos:pos + s.length]
                    pos += s.length
        if wire:
            raise AssertionError(f"round {h}: messages nobody receives: {sorted(wire)[:3]}")
    return [b["output"] for b in bufs]
