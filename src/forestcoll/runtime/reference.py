"""Run plans for all ranks in one process on numpy buffers: the executor's semantics, without a network.

Used by the tests to check plans on every schedule quickly, and as the
specification of what :mod:`forestcoll.torch` does with real messages: in each
round every rank first packs what it sends (from the buffer as it was at the
end of the previous round), then every message is delivered and applied.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from forestcoll.errors import ScheduleError
from forestcoll.runtime.plan import Plan

__all__ = ["COMBINE", "run_plans"]

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
