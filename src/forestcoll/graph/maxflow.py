"""Exact maximum flows on integer capacities, with OR-Tools' C++ push-relabel (int64).

Every capacity forestcoll hands over is a non-negative integer (bandwidths are
scaled to integers first) and totals are checked below 2**62, so results are
exact.  A network's arcs are added once from numpy arrays; each query sets all
capacities (one vectorised call) and solves.  benchmarks/maxflow_backends.py
compares this with igraph and networkx on the networks forestcoll solves; the
numbers are in docs/design.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ortools.graph.python import max_flow

from forestcoll.errors import ForestCollError

__all__ = ["EXACT_LIMIT", "FlowNetwork", "check_capacities"]

EXACT_LIMIT = 2**62


def check_capacities(caps: Sequence[int] | np.ndarray) -> None:
    """Refuse capacities whose total could overflow int64 arithmetic."""
    total = float(np.sum(caps, dtype=np.float64)) if isinstance(caps, np.ndarray) else float(sum(caps))
    if total >= EXACT_LIMIT:
        raise ForestCollError(
            "the bandwidths need too many digits for exact max-flow arithmetic: over their common denominator "
            f"(times k) they sum to {total:.3g} units, above the 2^62 (4.6e18) that 64-bit max-flow holds; "
            "round them to fewer digits (e.g. 0.001 GB/s steps) or pass a smaller --k"
        )


class FlowNetwork:
    """A directed network with a fixed arc list; capacities are given per query.

    Arc ``i`` runs ``tails[i] -> heads[i]``.  ``caps`` passed to the queries is a
    sequence (or numpy array) of non-negative integers aligned with the arcs.
    """

    def __init__(self, n: int, tails: Sequence[int] | np.ndarray, heads: Sequence[int] | np.ndarray) -> None:
        self.n = n
        self.tails = np.asarray(tails, dtype=np.int32)
        self.heads = np.asarray(heads, dtype=np.int32)
        self._smf = max_flow.SimpleMaxFlow()
        if len(self.tails):
            self._smf.add_arcs_with_capacity(self.tails, self.heads, np.zeros(len(self.tails), dtype=np.int64))
        self._all = np.arange(len(self.tails), dtype=np.int32)

    def _solve(self, caps: Sequence[int] | np.ndarray | None, source: int, sink: int) -> int:
        if caps is not None and len(self.tails):
            self._smf.set_arcs_capacity(self._all, np.asarray(caps, dtype=np.int64))
        status = self._smf.solve(source, sink)
        if status != max_flow.SimpleMaxFlow.OPTIMAL:
            if status == max_flow.SimpleMaxFlow.POSSIBLE_OVERFLOW:
                check_capacities(np.asarray(caps, dtype=np.int64))
            raise ForestCollError(f"max-flow failed (OR-Tools status {status}); capacities may be too large")
        return int(self._smf.optimal_flow())

    def value(self, caps: Sequence[int] | np.ndarray | None, source: int, sink: int) -> int:
        """Maximum flow value from ``source`` to ``sink`` (``caps`` None: the previous query's capacities)."""
        return self._solve(caps, source, sink)

    def last_source_side(self) -> list[int]:
        """The nodes on the source side of the minimal minimum cut of the flow just solved (those the source
        still reaches in its residual network): what :meth:`min_cut` gives, without solving again."""
        return self._smf.get_source_side_min_cut()

    def min_cut(self, caps: Sequence[int] | np.ndarray, source: int, sink: int) -> tuple[int, list[bool]]:
        """Minimum cut: its value and a mask of the source side (True = with the source)."""
        value = self._solve(caps, source, sink)
        mask = [False] * self.n
        for v in self._smf.get_source_side_min_cut():
            mask[v] = True
        return value, mask
