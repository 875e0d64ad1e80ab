"""Exact solution of a sparse linear system over the rationals.

Used to turn the vertex HiGHS reports in floats into the exact vertex it stands
for: the non-zero variables of a vertex are linearly independent on its tight
constraints, so they are the unique solution of those constraints as equations.  Gaussian elimination on dict rows with Fractions, pivoting on the
sparsest row and, in it, the column that occurs in the fewest other rows
(Markowitz), which keeps the fill-in of network matrices small.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from fractions import Fraction

Row = dict[int, Fraction]


def solve_exact(rows: Sequence[Row], rhs: Sequence[Fraction], ncols: int) -> list[Fraction] | None:
    """The unique x with ``sum(row[j] * x[j]) == rhs[i]`` for every row i, or None when there is none
    (inconsistent) or more than one (rank below ``ncols``).

    ``rows`` holds one {column: coefficient} dict per equation; there may be more equations than unknowns
    (a degenerate vertex has more tight constraints than non-zero variables).
    """
    if len(rows) != len(rhs):
        raise ValueError(f"{len(rows)} equations but {len(rhs)} right-hand sides")
    work = [dict(r) for r in rows]
    b = [Fraction(v) for v in rhs]
    where: list[set[int]] = [set() for _ in range(ncols)]  # column -> rows (not yet pivoted) containing it
    for i, r in enumerate(work):
        for j, v in list(r.items()):
            if v == 0:
                del r[j]
            else:
                where[j].add(i)
    alive = set(range(len(work)))
    heap = [(len(r), i) for i, r in enumerate(work)]  # lazy: stale entries are skipped when popped
    heapq.heapify(heap)
    pivots: list[tuple[int, int]] = []  # (row, column) in elimination order
    while alive:
        size, i = heapq.heappop(heap)
        if i not in alive or size != len(work[i]):
            continue
        row = work[i]
        if not row:  # 0 = b[i]: redundant or inconsistent
            if b[i] != 0:
                return None
            alive.discard(i)
            continue
        j = min(row, key=lambda c: (len(where[c]), c))
        alive.discard(i)
        for c in row:
            where[c].discard(i)
        piv = row[j]
        for k in list(where[j]):
            other = work[k]
            factor = other[j] / piv
            for c, v in row.items():
                nv = other.get(c, 0) - factor * v
                if nv == 0:
                    if c in other:
                        del other[c]
                        where[c].discard(k)
                else:
                    if c not in other:
                        where[c].add(k)
                    other[c] = nv
            b[k] -= factor * b[i]
            heapq.heappush(heap, (len(other), k))
        pivots.append((i, j))
    if len(pivots) != ncols:
        return None
    x: list[Fraction | None] = [None] * ncols
    for i, j in reversed(pivots):
        row = work[i]
        acc = b[i]
        for c, v in row.items():
            if c != j:
                acc -= v * x[c]  # type: ignore[operator]
        x[j] = acc / row[j]
    return x  # type: ignore[return-value]
