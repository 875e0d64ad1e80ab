"""All-to-all schedules: every ordered pair's data split over paths, and how they are generated.

A schedule lists *flows* ``{src, dst, fraction, path}``: ``fraction`` (an exact
``p/q``) of the size/N bytes that rank ``src`` sends to rank ``dst`` go along
``path``, a walk over the fabric's links from src to dst (through switches,
which forward, or through other ranks, which relay).  Every pair's fractions
sum to 1.  ``k`` is the common denominator: cut each pair's block into k chunks
and a flow of fraction p/k carries p of them (the MSCCL export does so).  All
flows run at once; the time of a call is the largest ``load / bandwidth`` over
the links, with a link's load the sum of (size/N) x fraction over the flows
crossing it, so algbw = N * min over links of bandwidth / (sum of fractions).

In the schedule file (version 1) the object carries ``"collective": "alltoall"``
and ``"flows"`` instead of ``"trees"``::

    {"format": "forestcoll-schedule", "version": 1, "collective": "alltoall",
     "topology": "...", "k": 2, "algbw_gbps": "50", "bound_algbw_gbps": "50",
     "optimal": true, "certified": true, "ranks": ["n0.gpu0", ...],
     "flows": [{"src": "n0.gpu0", "dst": "n0.gpu1", "fraction": "1/2",
                "path": ["n0.gpu0", "n0.nvswitch", "n0.gpu1"]}, ...]}
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from forestcoll.alltoall.bound import AlltoallBound, Solved, bound_from_solved, paths_rate, quantize, solve_alltoall
from forestcoll.errors import ForestCollError, ScheduleError, UsageError
from forestcoll.rational import format_rational, parse_rational
from forestcoll.topology.model import Topology

FORMAT = "forestcoll-schedule"
VERSION = 1


@dataclass(frozen=True)
class Flow:
    """``fraction`` of the pair (src, dst)'s data along ``path`` (node names, src first, dst last)."""

    src: str
    dst: str
    fraction: Fraction
    path: tuple[str, ...]


@dataclass(frozen=True)
class AlltoallSchedule:
    """Flows for every ordered pair, the algbw they reach (GB/s) and the optimum they are measured against."""

    topology: str
    ranks: tuple[str, ...]
    flows: tuple[Flow, ...]
    algbw: Fraction
    bound_algbw: Fraction | None  # the certified optimum (None when not certified)
    certified: bool = False

    @property
    def k(self) -> int:
        """Chunks per pair: the common denominator of the fractions."""
        return math.lcm(*(f.fraction.denominator for f in self.flows)) if self.flows else 1

    @property
    def optimal(self) -> bool:
        return self.bound_algbw is not None and self.algbw == self.bound_algbw

    @property
    def collective(self) -> str:
        return "alltoall"

    def to_dict(self) -> dict[str, Any]:
        """The schedule-file object (see the module docstring)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "collective": "alltoall",
            "topology": self.topology,
            "k": self.k,
            "algbw_gbps": format_rational(self.algbw),
            "bound_algbw_gbps": format_rational(self.bound_algbw) if self.bound_algbw is not None else None,
            "optimal": self.optimal,
            "certified": self.certified,
            "ranks": list(self.ranks),
            "flows": [{"src": f.src, "dst": f.dst, "fraction": format_rational(f.fraction), "path": list(f.path)}
                      for f in self.flows],
        }


def _req(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise ScheduleError(f"{where}: missing '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ScheduleError(f"{where}: '{key}' has the wrong type ({type(value).__name__})")
    return value


def _rational(value: Any, where: str) -> Fraction:
    try:
        return parse_rational(value, where)
    except ForestCollError as exc:
        raise ScheduleError(str(exc)) from None


def schedule_from_dict(data: Any, where: str = "schedule") -> AlltoallSchedule:
    """Parse the schedule-file object; malformed input raises :class:`ScheduleError` (one line)."""
    if not isinstance(data, Mapping):
        raise ScheduleError(f"{where}: expected a JSON object")
    if data.get("format", FORMAT) != FORMAT:
        raise ScheduleError(f"{where}: format {data.get('format')!r} is not {FORMAT!r}")
    if data.get("version", VERSION) != VERSION:
        raise ScheduleError(f"{where}: version {data.get('version')!r} is not supported (expected {VERSION})")
    if data.get("collective") != "alltoall":
        raise ScheduleError(f"{where}: collective {data.get('collective')!r} is not 'alltoall'")
    topology = data.get("topology") or ""
    if not isinstance(topology, str):
        raise ScheduleError(f"{where}: 'topology' must be a string")
    ranks = _req(data, "ranks", list, where)
    if not all(isinstance(r, str) for r in ranks) or len(set(ranks)) != len(ranks):
        raise ScheduleError(f"{where}: 'ranks' must be distinct names")
    flows = []
    for i, f in enumerate(_req(data, "flows", list, where)):
        w = f"{where}: flow {i}"
        if not isinstance(f, Mapping):
            raise ScheduleError(f"{w}: expected an object")
        path = _req(f, "path", list, w)
        if not all(isinstance(x, str) for x in path):
            raise ScheduleError(f"{w}: 'path' must list node names")
        flows.append(Flow(_req(f, "src", str, w), _req(f, "dst", str, w), _rational(_req(f, "fraction", (str, int), w), w),
                          tuple(path)))
    algbw = _rational(_req(data, "algbw_gbps", (str, int), where), f"{where}: algbw_gbps")
    raw_bound = data.get("bound_algbw_gbps")
    bound = _rational(raw_bound, f"{where}: bound_algbw_gbps") if raw_bound is not None else None
    return AlltoallSchedule(topology, tuple(ranks), tuple(flows), algbw, bound, bool(data.get("certified", False)))


# ----- generation --------------------------------------------------------------------------------


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


__all__ = ["AlltoallGenerated", "AlltoallSchedule", "Flow", "auto_chunks", "best_chunks", "flows_from_paths", "generate_alltoall",
           "paths_rate", "schedule_from_dict"]
