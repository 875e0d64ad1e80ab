"""The source-aggregated all-to-all LP on the symmetry-reduced fabric, solved with HiGHS, then made exact.

Maximise lambda subject to, for every representative rank r (one per orbit,
see :mod:`forestcoll.alltoall.reduction`) and its arc classes a (flow x[r,a] on
each arc of the class):

* conservation at one node v per node class, v != r:
  ``sum_{e into v} x[r,cls(e)] - sum_{e out of v} x[r,cls(e)] = lambda * [v is a rank]``;
* capacity, one row per orbit O of arcs: ``sum_r |orbit(r)| * sum_{a in O} |a| x[r,a] <= |O| * c_O``.

Every coefficient is an integer, so the matrix is exact as built.  Phase 1
maximises lambda; phase 2 keeps lambda at its optimum and minimises the flow's
hops (a hop out of a relaying rank counts twice), so paths are short and free
of cycles.  HiGHS (through scipy's ``linprog``) solves both in floats; each
vertex is then made exact (:func:`forestcoll.alltoall.exact.solve_exact` on
its tight rows and non-zero columns) and checked exactly.  The dual value of a
capacity row is the length of each arc of that orbit in the length-function
certificate (the row is the orbit's constraints summed).

HiGHS is used through scipy because OR-Tools (our max-flow library) ships its
own libhighs.so.1 of another version: with ``highspy`` in the same process the
two clash at import (docs/design.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from forestcoll.alltoall.exact import solve_exact
from forestcoll.alltoall.reduction import Reduction

IPM_COLUMNS = 5_000  # larger LPs: HiGHS's interior point method (with crossover to a vertex), ~3x faster than simplex there
EXACT_LIMIT = 20_000  # non-zero columns above which the exact vertex solve is skipped (float result + certified interval)


@dataclass
class ReducedLP:
    """The LP in column-wise integer form, with the bookkeeping to read flows back per arc."""

    nrows: int
    ncols: int
    rows: np.ndarray  # COO, summed duplicates
    cols: np.ndarray
    vals: np.ndarray  # int64
    rhs: list[Fraction]  # exact right-hand sides (conservation 0; capacity |O| * c_O)
    is_capacity: np.ndarray  # per row
    orbit_of_row: np.ndarray  # capacity rows: the arc orbit id; -1 otherwise
    col_of_arc: list[np.ndarray]  # per source class: the column of every arc
    hop_cost: np.ndarray  # phase-2 objective per column

    @property
    def nnz(self) -> int:
        return len(self.vals)


def build_lp(red: Reduction) -> ReducedLP:
    """The reduced LP of ``red`` (column 0 is lambda)."""
    n = red.n
    tails, heads = red.tails, red.heads
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    ncols = 1
    nrows = 0
    col_of_arc = []
    class_cols: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []  # (column, class size, first arc, orbit size)
    hop_cost: list[np.ndarray] = [np.zeros(1)]
    for sc in red.sources:
        _, first, inverse, counts = np.unique(sc.arc_class, return_index=True, return_inverse=True, return_counts=True)
        col = ncols + inverse
        col_of_arc.append(col)
        k = len(first)
        # conservation rows: one per node class except the representative's own
        is_rep = sc.node_class == np.arange(n)
        is_rep[sc.rep] = False
        rowmap = np.full(n, -1, dtype=np.int64)
        reps = np.flatnonzero(is_rep)
        rowmap[reps] = nrows + np.arange(len(reps))
        hin = rowmap[heads] >= 0
        tout = rowmap[tails] >= 0
        rows += [rowmap[heads[hin]], rowmap[tails[tout]]]
        cols += [col[hin], col[tout]]
        vals += [np.ones(int(hin.sum()), dtype=np.int64), -np.ones(int(tout.sum()), dtype=np.int64)]
        sinks = reps[red.is_compute[reps]]
        rows.append(rowmap[sinks])
        cols.append(np.zeros(len(sinks), dtype=np.int64))
        vals.append(-np.ones(len(sinks), dtype=np.int64))
        nrows += len(reps)
        relay = red.is_compute[tails[first]] & (tails[first] != sc.rep)
        hop_cost.append(len(sc.members) * counts * (1.0 + relay))
        class_cols.append((ncols + np.arange(k), counts, first, len(sc.members)))
        ncols += k
    # capacity rows
    orbit_ids, orbit_first, orbit_size = np.unique(red.arc_orbit, return_index=True, return_counts=True)
    cap_row = {int(o): nrows + i for i, o in enumerate(orbit_ids)}
    for colk, counts, first, osize in class_cols:
        rows.append(np.array([cap_row[int(red.arc_orbit[f])] for f in first], dtype=np.int64))
        cols.append(colk)
        vals.append(osize * counts.astype(np.int64))
    rhs = [Fraction(0)] * nrows + [int(sz) * red.caps[int(f)] for f, sz in zip(orbit_first, orbit_size)]
    is_capacity = np.zeros(nrows + len(orbit_ids), dtype=bool)
    is_capacity[nrows:] = True
    orbit_of_row = np.full(nrows + len(orbit_ids), -1, dtype=np.int64)
    orbit_of_row[nrows:] = orbit_ids
    nrows += len(orbit_ids)
    r = np.concatenate(rows)
    c = np.concatenate(cols)
    v = np.concatenate(vals)
    key = r * ncols + c
    uniq, inv = np.unique(key, return_inverse=True)
    summed = np.bincount(inv, weights=v.astype(float)).round().astype(np.int64)
    keep = summed != 0
    uniq, summed = uniq[keep], summed[keep]
    return ReducedLP(nrows, ncols, uniq // ncols, uniq % ncols, summed, rhs, is_capacity, orbit_of_row, col_of_arc,
                     np.concatenate(hop_cost))


@dataclass
class LPSolution:
    """What the LP gave: float optimum and flows, and where possible the exact vertex and dual."""

    status: str
    lam_float: float
    x_float: np.ndarray  # per column
    lam: Fraction | None = None  # exact optimum of the reduced LP (None: exact solve skipped or failed)
    x: list[Fraction] | None = None  # exact primal per column (phase 2 when it worked, else phase 1)
    dual: dict[int, Fraction] = field(default_factory=dict)  # arc orbit id -> exact length of each of its arcs
    dual_float: dict[int, float] = field(default_factory=dict)
    exact_note: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    phase2: bool = False


def split_rows(lp: ReducedLP):
    """(A_eq, A_ub) as scipy sparse matrices and the map from their rows to the LP's."""
    from scipy.sparse import csr_array

    eq_rows = np.flatnonzero(~lp.is_capacity)
    ub_rows = np.flatnonzero(lp.is_capacity)
    pos = np.empty(lp.nrows, dtype=np.int64)
    pos[eq_rows] = np.arange(len(eq_rows))
    pos[ub_rows] = np.arange(len(ub_rows))
    cap = lp.is_capacity[lp.rows]
    vals = lp.vals.astype(float)
    a_eq = csr_array((vals[~cap], (pos[lp.rows[~cap]], lp.cols[~cap])), shape=(len(eq_rows), lp.ncols))
    a_ub = csr_array((vals[cap], (pos[lp.rows[cap]], lp.cols[cap])), shape=(len(ub_rows), lp.ncols))
    b_ub = np.array([float(lp.rhs[r]) for r in ub_rows])
    return a_eq, a_ub, b_ub, eq_rows, ub_rows


def highs_solve(lp: ReducedLP, cost: np.ndarray, lam_min: float, parts):
    from scipy.optimize import linprog

    a_eq, a_ub, b_ub, _, _ = parts
    bounds = np.zeros((lp.ncols, 2))
    bounds[:, 1] = np.inf
    bounds[0, 0] = lam_min
    method = "highs-ipm" if lp.ncols > IPM_COLUMNS else "highs"
    return linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.zeros(a_eq.shape[0]), bounds=bounds, method=method)


def _exact_vertex(lp: ReducedLP, x: np.ndarray, fixed: dict[int, Fraction]) -> list[Fraction] | None:
    """The exact vertex behind the float solution ``x``: its non-zero columns (less ``fixed`` ones) solved
    from the rows it keeps tight; None when that does not determine them or the result is not feasible."""
    scale = max(float(np.abs(x).max()), 1e-300)
    support = [j for j in np.flatnonzero(x > 1e-9 * scale).tolist() if j not in fixed]
    if len(support) > EXACT_LIMIT:
        return None
    act = np.zeros(lp.nrows)
    np.add.at(act, lp.rows, lp.vals * x[lp.cols])
    rhs_f = np.array([float(b) for b in lp.rhs])
    tight = ~lp.is_capacity | (np.abs(act - rhs_f) <= 1e-7 * np.maximum(np.abs(rhs_f), 1.0))
    pos = {j: i for i, j in enumerate(support)}
    eqs: list[dict[int, Fraction]] = [{} for _ in range(lp.nrows)]
    rhs = list(lp.rhs)
    for r, c, v in zip(lp.rows.tolist(), lp.cols.tolist(), lp.vals.tolist()):
        if not tight[r]:
            continue
        if c in pos:
            eqs[r][pos[c]] = Fraction(v)
        elif c in fixed:
            rhs[r] -= v * fixed[c]
    keep = np.flatnonzero(tight).tolist()
    sol = solve_exact([eqs[r] for r in keep], [rhs[r] for r in keep], len(support))
    if sol is None:
        return None
    out = [Fraction(0)] * lp.ncols
    for c, val in fixed.items():
        out[c] = val
    for j, c in enumerate(support):
        out[c] = sol[j]
    return out if check_primal(lp, out) else None


def check_primal(lp: ReducedLP, x: list[Fraction]) -> bool:
    """Exactly: x >= 0, conservation rows equal, capacity rows within bounds."""
    if any(v < 0 for v in x):
        return False
    act = [Fraction(0)] * lp.nrows
    for r, c, v in zip(lp.rows.tolist(), lp.cols.tolist(), lp.vals.tolist()):
        if x[c]:
            act[r] += v * x[c]
    return all((a <= b) if cap else (a == b) for a, b, cap in zip(act, lp.rhs, lp.is_capacity.tolist()))


def _exact_dual(lp: ReducedLP, x: np.ndarray, y_eq: np.ndarray, y_ub: np.ndarray, parts) -> dict[int, Fraction] | None:
    """The exact dual vertex behind the float duals (max lambda: y >= 0 on capacity rows): its non-zero
    values solved from the columns whose reduced cost is zero; capacity values by arc orbit."""
    _, _, _, eq_rows, ub_rows = parts
    y = np.zeros(lp.nrows)
    y[eq_rows] = y_eq
    y[ub_rows] = y_ub
    scale = max(float(np.abs(y).max()), 1e-300)
    support = np.flatnonzero(np.abs(y) > 1e-9 * scale).tolist()
    if len(support) > EXACT_LIMIT:
        return None
    cost = np.zeros(lp.ncols)
    cost[0] = 1.0
    reduced = cost - np.bincount(lp.cols, weights=lp.vals * y[lp.rows], minlength=lp.ncols)
    tight = (np.abs(reduced) <= 1e-7) | (x > 1e-9 * max(float(np.abs(x).max()), 1e-300))
    pos = {r: i for i, r in enumerate(support)}
    eqs: list[dict[int, Fraction]] = [{} for _ in range(lp.ncols)]
    for r, c, v in zip(lp.rows.tolist(), lp.cols.tolist(), lp.vals.tolist()):
        if tight[c] and r in pos:
            eqs[c][pos[r]] = Fraction(v)
    keep = np.flatnonzero(tight).tolist()
    sol = solve_exact([eqs[c] for c in keep], [Fraction(1 if c == 0 else 0) for c in keep], len(support))
    if sol is None:
        return None
    return {int(lp.orbit_of_row[r]): max(sol[i], Fraction(0)) for i, r in enumerate(support) if lp.is_capacity[r]}


def solve(lp: ReducedLP, exact: bool = True, shorten: bool = True) -> LPSolution:
    """Phase 1 (max lambda) made exact with its dual, then phase 2 (min hops at that lambda) made exact too."""
    parts = split_rows(lp)
    t0 = time.perf_counter()
    cost = np.zeros(lp.ncols)
    cost[0] = -1.0
    res = highs_solve(lp, cost, 0.0, parts)
    seconds = {"phase1": time.perf_counter() - t0}
    if res.status != 0:
        return LPSolution(str(res.message), float("nan"), np.zeros(lp.ncols), seconds=seconds)
    x1 = np.asarray(res.x, dtype=float)
    lam_f = float(x1[0])
    y_eq = -np.asarray(res.eqlin.marginals, dtype=float)
    y_ub = -np.asarray(res.ineqlin.marginals, dtype=float)
    dual_float = {int(lp.orbit_of_row[r]): max(float(v), 0.0) for r, v in zip(parts[4].tolist(), y_ub.tolist())}
    out = LPSolution("optimal", lam_f, x1, dual_float=dual_float, seconds=seconds)
    if exact:
        t1 = time.perf_counter()
        x = _exact_vertex(lp, x1, {})
        if x is not None and x[0] > 0:
            out.lam, out.x = x[0], x
            y = _exact_dual(lp, x1, y_eq, y_ub, parts)
            if y is not None:
                out.dual = y
            else:
                out.exact_note = "the exact dual vertex could not be recovered (float duals rationalised instead)"
        else:
            out.exact_note = "the float vertex could not be made exact (too large, or not determined by its tight rows)"
        out.seconds["exact1"] = time.perf_counter() - t1
    if shorten:
        t2 = time.perf_counter()
        res2 = highs_solve(lp, lp.hop_cost.astype(float), lam_f * (1 - 1e-9), parts)
        if res2.status == 0:
            x2 = np.asarray(res2.x, dtype=float)
            ok2 = True
            if out.lam is not None:
                x = _exact_vertex(lp, x2, {0: out.lam})
                if x is not None:
                    out.x = x
                else:
                    ok2 = False
            if ok2:
                out.x_float = x2
                out.phase2 = True
        out.seconds["phase2"] = time.perf_counter() - t2
    return out
