"""Benchmark: LP back ends for the all-to-all bound — HiGHS (through scipy) against OR-Tools' GLOP.

Both solve the same source-aggregated LP (:mod:`forestcoll.alltoall.lp`; phase 1,
max lambda) without symmetry, so the LP has one commodity per rank.  Build
time (from the same integer matrix) and solve time are reported separately,
with the optimum each finds.  ``highspy`` itself is not measured: OR-Tools, which
forestcoll needs for max-flow, ships its own libhighs.so.1 of another version,
and with both in one process the second import fails (see docs/design.md).

    python benchmarks/lp_backends.py [--markdown]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from rich.console import Console
from tables import show

from forestcoll.alltoall.lp import build_lp, highs_solve, split_rows
from forestcoll.alltoall.reduction import reduce_topology
from forestcoll.topology import load_topology


def highs(model):
    t0 = time.perf_counter()
    parts = split_rows(model)
    cost = np.zeros(model.ncols)
    cost[0] = -1.0
    t1 = time.perf_counter()
    res = highs_solve(model, cost, 0.0, parts)
    return t1 - t0, time.perf_counter() - t1, float(res.x[0])


def glop(model):
    from ortools.linear_solver import pywraplp

    t0 = time.perf_counter()
    s = pywraplp.Solver.CreateSolver("GLOP")
    inf = s.infinity()
    x = [s.NumVar(0, inf, f"x{j}") for j in range(model.ncols)]
    rows = [s.Constraint(-inf, float(model.rhs[r])) if model.is_capacity[r] else s.Constraint(0, 0)
            for r in range(model.nrows)]
    for r, c, v in zip(model.rows.tolist(), model.cols.tolist(), model.vals.tolist()):
        rows[r].SetCoefficient(x[c], float(v))
    s.Objective().SetCoefficient(x[0], 1)
    s.Objective().SetMaximization()
    t1 = time.perf_counter()
    status = s.Solve()
    assert status == pywraplp.Solver.OPTIMAL
    return t1 - t0, time.perf_counter() - t1, x[0].solution_value()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average), {os.cpu_count()} cores")
    import scipy.optimize  # noqa: F401  (imports are not part of the solve)
    from ortools.linear_solver import pywraplp  # noqa: F401

    rows = []
    for spec, sym in [("dgx-a100:nodes=16", True), ("mi250:nodes=2", False), ("dgx-a100:nodes=4", False),
                      ("dgx-a100:nodes=8", False), ("dgx-a100:nodes=16", False)]:
        model = build_lp(reduce_topology(load_topology(spec), sym))
        results = {name: fn(model) for name, fn in (("HiGHS (scipy)", highs), ("GLOP (OR-Tools)", glop))}
        fastest = min(r[1] for r in results.values())
        for i, (name, (build, solve, lam)) in enumerate(results.items()):
            rows.append([spec + (" (symmetric)" if sym else " (no symmetry)") if i == 0 else "",
                         f"{model.nrows} x {model.ncols}" if i == 0 else "", name, f"{build:.3f}", f"{solve:.3f}",
                         f"{solve / fastest:.1f}x", f"{lam:.9g}"])
    show(Console(), "LP back ends (phase 1 of the all-to-all LP)",
         ["LP", "rows x columns", "back end", "build s", "solve s", "vs fastest", "lambda"], rows, args.markdown, 3)


if __name__ == "__main__":
    main()
