"""Exact maximum flows on integer capacities, with two C/C++ back ends.

* igraph (push-relabel in C): fastest per call on small networks (tens of
  nodes, a few hundred arcs), which dominate tree packing.  It takes
  capacities as doubles; all of ours are integers, and a network whose total
  capacity reaches 2**52 goes to OR-Tools instead, so the arithmetic (sums and
  differences of integers) is always exact.
* OR-Tools ``SimpleMaxFlow`` (C++, int64): builds large networks from numpy
  arrays two orders of magnitude faster than igraph and solves them faster,
  so it serves networks from 2,000 arcs up.

``FORESTCOLL_MAXFLOW=igraph|ortools`` forces one back end (for benchmarks);
docs/design.md records the measurements behind the threshold.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from forestcoll.errors import ForestCollError

DOUBLE_EXACT = 2**52  # igraph computes in doubles: exact below this total
EXACT_LIMIT = 2**62  # OR-Tools computes in int64
ORTOOLS_FROM_ARCS = 2000


def _total(caps: Sequence[int] | np.ndarray) -> float:
    return float(np.sum(caps, dtype=np.float64)) if isinstance(caps, np.ndarray) else float(sum(caps))


def check_capacities(caps: Sequence[int] | np.ndarray) -> None:
    """Refuse capacities whose total could overflow exact integer arithmetic."""
    total = _total(caps)
    if total >= EXACT_LIMIT:
        raise ForestCollError(
            "bandwidths need too many significant digits for exact max-flow arithmetic "
            f"(scaled total {int(total)} >= 2^62); round them to fewer digits or pass a smaller --k"
        )


def choose_backend(num_arcs: int) -> str:
    forced = os.environ.get("FORESTCOLL_MAXFLOW", "").strip().lower()
    if forced in ("igraph", "ortools"):
        return forced
    return "ortools" if num_arcs >= ORTOOLS_FROM_ARCS else "igraph"


class FlowNetwork:
    """A directed network with a fixed arc list; capacities are given per query.

    Arc ``i`` runs ``tails[i] -> heads[i]``.  ``caps`` passed to the queries is a
    sequence (or numpy array) of non-negative integers aligned with the arcs.
    """

    def __init__(self, n: int, tails: Sequence[int] | np.ndarray, heads: Sequence[int] | np.ndarray, backend: str | None = None) -> None:
        self.n = n
        self.tails = np.asarray(tails, dtype=np.int32)
        self.heads = np.asarray(heads, dtype=np.int32)
        self.backend = backend or choose_backend(len(self.tails))
        self._smf = None
        if self.backend == "ortools":
            self._init_ortools()
        else:
            import igraph

            self._graph = igraph.Graph(n=n, edges=np.column_stack([self.tails, self.heads]).tolist(), directed=True)

    def _init_ortools(self) -> None:
        from ortools.graph.python import max_flow

        self._smf = max_flow.SimpleMaxFlow()
        if len(self.tails):
            self._smf.add_arcs_with_capacity(self.tails, self.heads, np.zeros(len(self.tails), dtype=np.int64))
        self._all = np.arange(len(self.tails), dtype=np.int32)
        self._optimal = max_flow.SimpleMaxFlow.OPTIMAL

    def _use_ortools(self, caps: Sequence[int] | np.ndarray) -> bool:
        """OR-Tools when chosen, or when the total is too large for igraph's doubles to stay exact."""
        if self.backend == "ortools":
            return True
        if _total(caps) < DOUBLE_EXACT:
            return False
        check_capacities(caps)
        if self._smf is None:
            self._init_ortools()
        return True

    def _solve(self, caps: Sequence[int] | np.ndarray, source: int, sink: int) -> int:
        if len(self.tails):
            self._smf.set_arcs_capacity(self._all, np.asarray(caps, dtype=np.int64))
        status = self._smf.solve(source, sink)
        if status != self._optimal:  # pragma: no cover - capacities are checked
            raise RuntimeError(f"OR-Tools max-flow failed with status {status}")
        return int(self._smf.optimal_flow())

    def value(self, caps: Sequence[int] | np.ndarray, source: int, sink: int) -> int:
        """Maximum flow value from ``source`` to ``sink``."""
        if self._use_ortools(caps):
            return self._solve(caps, source, sink)
        caps_list = caps.tolist() if isinstance(caps, np.ndarray) else caps
        return int(round(self._graph.maxflow_value(source, sink, caps_list)))

    def min_cut(self, caps: Sequence[int] | np.ndarray, source: int, sink: int) -> tuple[int, list[bool]]:
        """Minimum cut: its value and a mask of the source side (True = with the source)."""
        mask = [False] * self.n
        if self._use_ortools(caps):
            value = self._solve(caps, source, sink)
            for v in self._smf.get_source_side_min_cut():
                mask[v] = True
            return value, mask
        caps_list = caps.tolist() if isinstance(caps, np.ndarray) else caps
        cut = self._graph.mincut(source, sink, caps_list)
        side = cut.partition[0] if source in cut.partition[0] else cut.partition[1]
        for v in side:
            mask[v] = True
        return int(round(cut.value)), mask
