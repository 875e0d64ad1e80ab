"""All-to-all schedules from the optimal flow: paths for every rank, exact or rounded to few chunks.

The representatives' flows (:func:`forestcoll.alltoall.bound.solve_alltoall`)
are already paths with exact shares of each pair's demand; every other rank
s = g(r) of a representative r's orbit sends along g(path) (the transversal of
verified automorphisms).  With ``chunks=K`` every pair's shares are rounded to
multiples of 1/K (largest remainder, once per orbit, so the symmetry is kept)
and the rate they reach is computed exactly from the rounded paths' loads.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from forestcoll.alltoall.bound import AlltoallBound, Solved, bound_from_solved, quantize, solve_alltoall
from forestcoll.alltoall.schedule import AlltoallSchedule, Flow
from forestcoll.errors import UsageError
from forestcoll.rational import format_rational
from forestcoll.topology.model import Topology

__all__ = ["AlltoallGenerated", "auto_chunks", "best_chunks", "flows_from_paths", "generate_alltoall"]


def flows_from_paths(s: Solved, rep_paths: list[list[tuple[int, Fraction, tuple[int, ...]]]]) -> list[Flow]:
    """Every rank's flows: rank g(r) sends along g(path) for every path of its representative r."""
    red = s.red
    names = np.array([nd.name for nd in s.topo.nodes], dtype=object)
    rank_of = {name: i for i, name in enumerate(s.topo.compute_nodes)}
    tails, heads = red.tails, red.heads
    out: list[tuple[int, int, int, Flow]] = []
    for sc, plist in zip(red.sources, rep_paths):
        trans = sc.transversal
        for order, (_t, share, arcs) in enumerate(plist):
            nodes = np.concatenate([[tails[arcs[0]]], heads[list(arcs)]])
            mapped = names[trans[:, nodes]]  # (members, path length)
            for row in mapped:
                src, dst = row[0], row[-1]
                out.append((rank_of[src], rank_of[dst], order, Flow(src, dst, share, tuple(row))))
    out.sort(key=lambda x: (x[0], x[1], x[2]))
    return [f for *_, f in out]


@dataclass
class AlltoallGenerated:
    """What :func:`generate_alltoall` made: the schedule, the bound it is measured against, the time it took."""

    ok: bool
    message: str
    schedule: AlltoallSchedule | None = None
    bound: AlltoallBound | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        sched = self.schedule
        return {
            "ok": self.ok,
            "message": self.message,
            "collective": "alltoall",
            "k": sched.k if sched else None,
            "flows": len(sched.flows) if sched else 0,
            "algbw_gbps": format_rational(sched.algbw) if sched else None,
            "optimal": sched.optimal if sched else False,
            "bound": self.bound.to_dict() if self.bound else None,
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
        }


def generate_alltoall(topo: Topology, *, chunks: int | str | None = None, symmetry: bool = True,
                      exact: bool = True) -> AlltoallGenerated:
    """An all-to-all schedule for ``topo``: the optimal flow's paths (exact where certified), or with
    ``chunks`` given, every pair's shares rounded to multiples of 1/chunks (rate reported exactly).
    ``chunks="auto"``: the exact paths when they need at most 16 chunks per pair, else the fewest chunks
    (<= 16) that keep the optimum, else the fewest within 1% of it (runtimes want few chunks)."""
    t0 = time.perf_counter()
    try:
        if chunks is not None and chunks != "auto" and (not isinstance(chunks, int) or chunks < 1):
            raise UsageError(f"chunks must be a whole number >= 1 or 'auto', got {chunks!r}")
        s = solve_alltoall(topo, symmetry=symmetry, exact=exact)
    except UsageError as exc:
        return AlltoallGenerated(False, str(exc))
    bound = bound_from_solved(s, time.perf_counter() - t0)
    t1 = time.perf_counter()
    rep_paths, lam = s.rep_paths, s.lower
    if chunks == "auto":
        chunks = auto_chunks(s)
    if chunks is not None:
        rep_paths, _, lam = quantize(s, chunks)
    if lam is None:
        return AlltoallGenerated(False, "the flow carries nothing (no pair demand)", None, bound)
    n = s.red.num_ranks
    flows = flows_from_paths(s, rep_paths)
    best = bound.algbw if bound.certified else None
    sched = AlltoallSchedule(topo.name, tuple(topo.compute_nodes), tuple(flows), lam * n, best, bound.certified)
    seconds = dict(bound.seconds)
    seconds["flows"] = time.perf_counter() - t1
    seconds["total"] = time.perf_counter() - t0
    of = f" ({float(sched.algbw / best):.1%} of the optimum)" if best and not sched.optimal else ""
    status = "optimal, certified" if sched.optimal else ("certified bound" if best else "bound not certified")
    msg = (f"all-to-all schedule for {topo.name or 'the topology'}: {len(flows)} flows, k={sched.k}, algbw "
           f"{format_rational(sched.algbw)} GB/s (~{float(sched.algbw):.4g}){of}; {status}")
    return AlltoallGenerated(True, msg, sched, bound, seconds)


def best_chunks(s: Solved, max_chunks: int = 16, within: Fraction = Fraction(1, 100)) -> tuple[int, Fraction]:
    """The fewest chunks per pair (1..``max_chunks``) whose rounded paths reach at least (1 - ``within``) of the
    exact paths' lambda, else the best rounding found; returns (chunks, its lambda)."""
    best: tuple[int, Fraction] | None = None
    for k in range(1, max_chunks + 1):
        _, _, lam = quantize(s, k)
        if lam is None:
            continue
        if s.lower is not None and lam >= s.lower * (1 - within):
            return k, lam
        if best is None or lam > best[1]:
            best = (k, lam)
    if best is None:
        raise UsageError("no rounding of the paths carries every pair")
    return best


def auto_chunks(s: Solved, max_chunks: int = 16) -> int | None:
    """None (keep the exact paths) when they need at most ``max_chunks`` chunks per pair; else the fewest
    chunks that keep the optimum, else the fewest within 1% of it (or the best rounding up to ``max_chunks``)."""
    k = 1
    for plist in s.rep_paths:
        for _, share, _ in plist:
            k = math.lcm(k, share.denominator)
    if k <= max_chunks:
        return None
    found, lam = best_chunks(s, max_chunks, Fraction(0))
    if s.lower is not None and lam >= s.lower:
        return found
    return best_chunks(s, max_chunks, Fraction(1, 100))[0]


