"""Run plans for all ranks in one process on numpy buffers: the executor's semantics, without a network.

Used by the tests to check plans on every schedule quickly, and as the
specification of what :mod:`forestcoll.torch` does with real messages.
:func:`run_plans` is the synchronous rounds: in each round every rank first
packs what it sends (from the buffer as it was at the end of the previous
round), then every message is delivered and applied.  :func:`run_plans_async`
is the asynchronous execution (:func:`forestcoll.runtime.plan.async_ops`) on a
network as stingy as one wants: every connection (per peer and stream) holds
``capacity`` messages in flight, a rank posts ``window`` receives ahead per peer
and stream, and the ranks take
turns in an order drawn from ``seed``; it raises when the ranks wait on each
other (a deadlock).
"""

from __future__ import annotations

import random
from collections import defaultdict, deque
from collections.abc import Sequence

import numpy as np

from forestcoll.errors import ScheduleError
from forestcoll.runtime.plan import Plan, async_ops

__all__ = ["COMBINE", "run_plans", "run_plans_async"]

COMBINE = {"sum": np.add, "avg": np.add, "product": np.multiply, "max": np.maximum, "min": np.minimum}


def run_plans(plans: Sequence[Plan], works: Sequence[np.ndarray], op: str = "sum") -> None:
    """Execute ``plans`` (one per rank) in place on ``works``, checking that senders and receivers agree."""
    combine = COMBINE[op]
    by_round: dict[int, list[tuple[int, object]]] = defaultdict(list)
    for p in plans:
        for rnd in p.rounds:
            by_round[rnd.index].append((p.rank, rnd))
    for index in sorted(by_round):
        packed: dict[tuple[int, int], np.ndarray] = {}
        for rank, rnd in by_round[index]:
            for m in rnd.sends:
                packed[(rank, m.peer)] = np.concatenate([works[rank][s.start:s.stop] for s in m.segments])
        for rank, rnd in by_round[index]:
            for m in rnd.recvs:
                data = packed.pop((m.peer, rank), None)
                if data is None or len(data) != m.numel:
                    raise ScheduleError(f"round {index}: rank {rank} expects {m.numel} elements from rank {m.peer}, "
                                        f"which sends {'nothing' if data is None else len(data)}")
                off = 0
                for s in m.segments:
                    part = data[off:off + s.stop - s.start]
                    off += s.stop - s.start
                    if s.reduce:
                        combine(works[rank][s.start:s.stop], part, out=works[rank][s.start:s.stop])
                    else:
                        works[rank][s.start:s.stop] = part
        if packed:
            (src, dst), data = next(iter(packed.items()))
            raise ScheduleError(f"round {index}: rank {src} sends {len(data)} elements that rank {dst} never receives")


def _apply(work: np.ndarray, message, data: np.ndarray, combine) -> None:
    off = 0
    for s in message.segments:
        part = data[off:off + s.stop - s.start]
        off += s.stop - s.start
        if s.reduce:
            combine(work[s.start:s.stop], part, out=work[s.start:s.stop])
        else:
            work[s.start:s.stop] = part


def run_plans_async(plans: Sequence[Plan], works: Sequence[np.ndarray], op: str = "sum", *, capacity: int = 1,
                    window: int = 1, seed: int = 0) -> int:
    """Execute ``plans`` asynchronously in place on ``works``; returns the number of actions taken.

    A send leaves when the operations it depends on are complete, after the earlier sends to the same peer
    in its stream, and when its connection (peer and stream) has room; it is complete once the receiver has
    taken it.  A receive is posted within ``window`` per peer and stream, takes the next message of its
    connection, and is applied (complete) when its own dependencies are.  ScheduleError when no rank can move
    while work remains (a deadlock)."""
    combine = COMBINE[op]
    n = len(plans)
    ops = [async_ops(p) for p in plans]
    done = [[False] * len(o) for o in ops]
    sends = [defaultdict(deque) for _ in range(n)]  # rank -> (peer, stream) -> send op indices in order
    recvs = [defaultdict(deque) for _ in range(n)]  # rank -> (peer, stream) -> receive op indices not yet taken
    for r, o in enumerate(ops):
        for i, x in enumerate(o):
            (sends if x.kind == "send" else recvs)[r][(x.message.peer, x.stream)].append(i)
    channel: dict[tuple[int, int, int], deque] = defaultdict(deque)  # (src, dst, stream) -> [(src op index, data)]
    taken: list[dict[int, np.ndarray]] = [{} for _ in range(n)]  # received, not yet applied
    left = sum(len(o) for o in ops)
    rng = random.Random(seed)
    actions = 0

    def ready(r: int, i: int) -> bool:
        return all(done[r][j] for j in ops[r][i].after)

    while left:
        moved = False
        order = list(range(n))
        rng.shuffle(order)
        for r in order:
            for (peer, stream), queue in sends[r].items():  # sends, each peer and stream in order
                if queue and ready(r, queue[0]) and len(channel[(r, peer, stream)]) < capacity:
                    i = queue.popleft()
                    m = ops[r][i].message
                    channel[(r, peer, stream)].append((i, np.concatenate([works[r][s.start:s.stop] for s in m.segments])))
                    moved = True
                    actions += 1
            for (peer, stream), queue in recvs[r].items():  # receives: the head of the connection, if posted
                posted = list(queue)[:window]
                ch = channel[(peer, r, stream)]
                if ch and posted:
                    i = queue.popleft()
                    j, data = ch.popleft()
                    if ops[peer][j].message.numel != ops[r][i].message.numel or ops[peer][j].round != ops[r][i].round:
                        raise ScheduleError(f"rank {r} expects round {ops[r][i].round} from rank {peer} but receives "
                                            f"round {ops[peer][j].round}")
                    done[peer][j] = True  # the sender's buffer is free
                    left -= 1
                    taken[r][i] = data
                    moved = True
                    actions += 1
            for i in [i for i in taken[r] if ready(r, i)]:
                _apply(works[r], ops[r][i].message, taken[r].pop(i), combine)
                done[r][i] = True
                left -= 1
                moved = True
                actions += 1
        if not moved:
            stuck = [r for r in range(n) if not all(done[r])]
            raise ScheduleError(f"deadlock: ranks {stuck} wait on each other")
    return actions
