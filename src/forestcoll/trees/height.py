"""Packing trees of bounded height exactly, as a constraint program (OR-Tools CP-SAT).

Input: a switch-free graph with integer arc capacities, a demand of trees per
root (each tree carries one unit) and a height H.  A tree of root r is a
choice of one in-arc per other node, ``use[t, a]``, with integer depths
``1 <= depth[t, v] <= H`` such that the chosen arc (x, v) has
``depth[t, v] = depth[t, x] + 1`` (depth of r is 0).  Depths strictly grow
along the chosen arcs, so the chosen arcs have no cycle and form a spanning
out-tree of height <= H.  Capacities: the trees on an arc sum to at most its
capacity.  Any solution is a packing within the capacities, hence exactly as
fast as the capacities allow (the verifier recomputes the loads); CP-SAT may
also prove that no such packing exists for these capacities (INFEASIBLE), which
is a statement about this graph and this number of trees, not about every
schedule of that height.

With a group of automorphisms acting freely on the nodes (as the symmetric
packer uses), only one root per orbit gets variables; its trees stand for
their images, whose arcs count in every capacity.  The solver runs on one
worker with a deterministic time limit, so the same input gives the same trees.
"""

from __future__ import annotations

from collections.abc import Sequence

from forestcoll.trees.packing import Tree

__all__ = ["MAX_TREE_VARIABLES", "pack_height_limited"]

MAX_TREE_VARIABLES = 20_000  # (base trees) x (arcs): larger models are not tried


def pack_height_limited(n: int, caps: dict[tuple[int, int], int], demand: Sequence[int], max_height: int,
                        group: Sequence[Sequence[int]] | None = None, work: float = 20.0) -> tuple[str, list[Tree] | None]:
    """Unit trees (``demand[r]`` of root r) of height <= ``max_height`` within ``caps``: (status, trees).

    ``status`` is "found", "infeasible" (proved for these capacities), "unknown" (the deterministic work limit,
    in CP-SAT's deterministic seconds, ran out) or "too-large" (the model was not built)."""
    from ortools.sat.python import cp_model

    arcs = sorted(a for a, c in caps.items() if c > 0)
    into: dict[int, list[tuple[int, int]]] = {v: [] for v in range(n)}
    for a in arcs:
        into[a[1]].append(a)
    images = [list(g) for g in group] if group else [list(range(n))]
    reps = sorted({min(g[r] for g in images) for r in range(n) if demand[r] > 0})
    if sum(demand[r] for r in reps) * len(arcs) > MAX_TREE_VARIABLES:
        return "too-large", None
    model = cp_model.CpModel()
    load: dict[tuple[int, int], list] = {a: [] for a in arcs}
    trees = []
    for r in reps:
        for _ in range(demand[r]):
            use = {a: model.NewBoolVar("") for a in arcs if a[1] != r}
            depth = {v: model.NewIntVar(1, max_height, "") for v in range(n) if v != r}
            for v in range(n):
                if v == r:
                    continue
                choices = [a for a in into[v] if a in use]
                if not choices:
                    return "infeasible", None
                model.AddExactlyOne(use[a] for a in choices)
                for a in choices:
                    x = a[0]
                    if x == r:
                        model.Add(depth[v] == 1).OnlyEnforceIf(use[a])
                    else:
                        model.Add(depth[v] == depth[x] + 1).OnlyEnforceIf(use[a])
            for (x, y), var in use.items():
                for g in images:
                    load[(g[x], g[y])].append(var)
            trees.append((r, use))
    for a in arcs:
        if len(load[a]) > caps[a]:
            model.Add(sum(load[a]) <= caps[a])
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_deterministic_time = work
    status = solver.Solve(model)
    if status == cp_model.INFEASIBLE:
        return "infeasible", None
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return "unknown", None
    out: list[Tree] = []
    for r, use in trees:
        chosen = [a for a, var in use.items() if solver.Value(var)]
        for g in images:
            out.append(_ordered(g[r], [(g[x], g[y]) for x, y in chosen]))
    return "found", out


def _ordered(root: int, arcs: list[tuple[int, int]]) -> Tree:
    """A tree with its arcs listed parents first."""
    children: dict[int, list[int]] = {}
    for x, y in arcs:
        children.setdefault(x, []).append(y)
    ordered = []
    stack = [root]
    while stack:
        x = stack.pop()
        for y in sorted(children.get(x, [])):
            ordered.append((x, y))
            stack.append(y)
    return Tree(root, 1, tuple(ordered))
