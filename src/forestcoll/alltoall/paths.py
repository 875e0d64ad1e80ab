"""From one representative's flow to paths: cycle cancelling and flow decomposition, exact or in floats.

The representative r's flow delivers lambda to every other rank.  After
cancelling cycles the flow is acyclic, so walking back from any rank t along
arcs that still carry flow always ends at r; each walk is a path whose amount
is the smallest of t's remaining demand and the flows on it.  Every walk
empties an arc or a demand, so there are at most (arcs + ranks) paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np


def _out_lists(n: int, tails: Sequence[int], heads: Sequence[int]) -> tuple[list[list[int]], list[list[int]]]:
    out: list[list[int]] = [[] for _ in range(n)]
    into: list[list[int]] = [[] for _ in range(n)]
    for e, (u, v) in enumerate(zip(tails, heads)):
        out[u].append(e)
        into[v].append(e)
    return out, into


def cancel_cycles(n: int, tails: Sequence[int], heads: Sequence[int], flow: list, tol: float = 0.0) -> int:
    """Remove every directed cycle of positive flow in place (subtracting its smallest flow); returns how many."""
    out, _ = _out_lists(n, tails, heads)
    cancelled = 0
    state = [0] * n  # 0 new, 1 on the stack, 2 done
    for start in range(n):
        if state[start]:
            continue
        stack = [(start, iter(out[start]))]
        via: list[int] = []  # arcs on the stack path
        state[start] = 1
        while stack:
            u, it = stack[-1]
            e = next(it, None)
            if e is None:
                state[u] = 2
                stack.pop()
                if via:
                    via.pop()
                continue
            if flow[e] <= tol:
                continue
            v = heads[e]
            if state[v] == 0:
                state[v] = 1
                stack.append((v, iter(out[v])))
                via.append(e)
            elif state[v] == 1:  # a cycle: the stack from v to u plus e
                pos = next(i for i, (w, _) in enumerate(stack) if w == v)
                cycle = via[pos:] + [e]
                amount = min(flow[a] for a in cycle)
                for a in cycle:
                    flow[a] -= amount
                    if flow[a] <= tol:
                        flow[a] = 0 * flow[a]
                cancelled += 1
                # unwind to v, whose arcs are re-examined from the start
                while len(stack) > pos + 1:
                    w, _ = stack.pop()
                    state[w] = 0
                    via.pop()
                stack[-1] = (v, iter(out[v]))
    return cancelled


def decompose(n: int, tails: Sequence[int], heads: Sequence[int], flow: list, source: int, demand: dict[int, object],
              tol: float = 0.0) -> list[tuple[int, object, tuple[int, ...]]]:
    """Paths (destination, amount, arcs) from ``source`` that carry each destination's ``demand`` out of an
    acyclic ``flow`` (modified in place).  With floats, amounts below ``tol`` are dropped."""
    _, into = _out_lists(n, tails, heads)
    first = [0] * n  # into[v][:first[v]] carry no more flow (flows only decrease): skipped for good
    paths = []
    for t in sorted(demand):
        need = demand[t]
        while need > tol:
            arcs = []
            v = t
            guard = 0
            while v != source:
                lst = into[v]
                i = first[v]
                while i < len(lst) and flow[lst[i]] <= tol:
                    i += 1
                first[v] = i
                best = lst[i] if i < len(lst) else None
                if best is None:
                    break
                arcs.append(best)
                v = tails[best]
                guard += 1
                if guard > n:
                    raise AssertionError("flow decomposition walked in a cycle; cancel cycles first")
            if v != source:
                break  # float residue: nothing more reaches t
            arcs.reverse()
            amount = min([need] + [flow[e] for e in arcs])
            for e in arcs:
                flow[e] -= amount
            need -= amount
            paths.append((t, amount, tuple(arcs)))
    return paths


def largest_remainder(weights: Sequence[float], total: int) -> list[int]:
    """Non-negative integers summing to ``total`` in proportion to ``weights`` (largest remainders round up)."""
    w = np.asarray(weights, dtype=float)
    s = float(w.sum())
    if s <= 0:
        raise ValueError("weights must have a positive sum")
    exact = w / s * total
    base = np.floor(exact).astype(np.int64)
    short = total - int(base.sum())
    order = sorted(range(len(w)), key=lambda i: (-(exact[i] - base[i]), i))
    for i in order[:short]:
        base[i] += 1
    return [int(b) for b in base]


def pair_fractions(paths: list[tuple[int, object, tuple[int, ...]]], lam, denominator: int | None) -> list[tuple[int, Fraction, tuple[int, ...]]]:
    """Each path's share of its pair's demand: exact ``amount / lam`` (Fractions, ``denominator`` None) or
    rounded to multiples of 1/``denominator`` per pair (largest remainder; paths that round to 0 are dropped)."""
    if denominator is None:
        return [(t, Fraction(a) / Fraction(lam), arcs) for t, a, arcs in paths]
    by_dst: dict[int, list[tuple[object, tuple[int, ...]]]] = {}
    for t, a, arcs in paths:
        by_dst.setdefault(t, []).append((a, arcs))
    out = []
    for t in sorted(by_dst):
        items = by_dst[t]
        counts = largest_remainder([float(a) for a, _ in items], denominator)
        for (_, arcs), c in zip(items, counts):
            if c:
                out.append((t, Fraction(c, denominator), arcs))
    return out
