"""The fastest of several schedules at one size, without simulating those that provably lose.

Every simulated time is at least the program's lower bound
(:func:`forestcoll.simulate.engine.lower_bound`: the busiest link's bytes over
its capacity, and the longest dependency chain at full link speed plus
latencies).  :func:`race` simulates the candidates in the order of their link
bounds (a likely winner first) and skips each one whose bound is already above the best time found
(divided by ``1 - slack``, so that a caller keeping the previous winner while
it is within ``slack`` of the best still sees every candidate it could keep).
A candidate that passes the bounds is simulated only until its clock passes
that limit (the engine's ``stop_at``): past it, it cannot win either.
The winner, and every time within that slack of it, are therefore exactly what
simulating every candidate would give; only the losers' rows are missing.

The link bound scales with the size (every program moves ``size`` times the
same bytes per link), so it is computed once per candidate and costs nothing
at the large sizes where it prunes most; the path bound needs the program at
that size and prunes the many-step schedules (rings) at small sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from forestcoll.errors import SimulationTooLarge
from forestcoll.limits import Unsimulated, losing  # (here too: a race's losers)
from forestcoll.progress import Progress, report
from forestcoll.schedule import Schedule
from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE, SimResult, simulate_program
from forestcoll.simulate.engine import ProgramBuilder, link_bound, path_bound
from forestcoll.simulate.network import Network
from forestcoll.simulate.trees import tree_program

__all__ = ["RaceResult", "Unsimulated", "attempt", "losing", "link_per_byte", "race", "race_limit", "race_loop", "race_order", "race_sizes", "ranking_rate",
           "tree_lowering"]

_PROBE = float(1 << 20)  # the size at which the per-byte link bound is measured (any size gives the same)
_EPS = 1e-6  # the engine merges events within a relative 1e-9: prune only clearly above the limit


def tree_lowering(sched: Schedule, net: Network, size: float, slice_bytes: float,
                  max_slices: int) -> tuple[ProgramBuilder, str, dict, None]:
    """A schedule's trees as a contender: (program, collective, extra fields of its result, bus factor: the
    collective's).  Another ``lowering`` (e.g. :func:`forestcoll.simulate.msccl.msccl_lowering`) races other
    artefacts the same way."""
    return tree_program(sched, net, size, slice_bytes, max_slices), sched.collective, {"k": sched.k}, None


def race_limit(best_s: float, slack: float) -> float:
    """The time a contender must beat to be kept when ``best_s`` is the best known (``slack`` as :func:`race`)."""
    return best_s / (1 - slack) * (1 + _EPS)


def link_per_byte(contender, net: Network, lowering, slicing: tuple[float, int | None]) -> float:
    """``contender``'s link bound (seconds) per byte: its program at a probe size, its busiest link; infinite when
    that program is above the simulator's transfer limit (:class:`~forestcoll.errors.SimulationTooLarge`: the
    contender cannot be simulated, so it loses every race)."""
    try:
        return link_bound(lowering(contender, net, _PROBE, *slicing)[0].build(), net.capacity) / _PROBE
    except SimulationTooLarge:
        return math.inf


def race_order(candidates: Mapping, bounds: Mapping[str, float], first: str | None) -> list[str]:
    """The order :func:`race` tries ``candidates`` in: ``first``, then by bound (ties: as given)."""
    return sorted(candidates, key=lambda n: (n != first, bounds[n]))


def attempt(name: str, contender, net: Network, size: int, bound: float, limit: float, lowering,
            slicing: tuple[float, int | None], fairness: str) -> tuple[float, SimResult | None, bool]:
    """One contender of :func:`race` whose link ``bound`` passed ``limit``: its program at ``size``, its bound
    raised by the path bound, and, if that still passes, its simulation stopped at ``limit``.  Returns (that bound,
    the result or None, whether the simulation ran and was stopped at ``limit``).  A program above the simulator's
    transfer limit (:class:`~forestcoll.errors.SimulationTooLarge`) loses: an infinite bound, no result."""
    try:
        builder, collective, extra, bus = lowering(contender, net, float(size), *slicing)
        program = builder.build()
    except SimulationTooLarge:
        return math.inf, None, False
    bound = max(bound, path_bound(program, net.capacity))
    if bound > limit:
        return bound, None, False
    res = simulate_program(program, net, name, collective, size, extra, fairness=fairness, bus_factor=bus,
                           stop_at=limit)
    return bound, res, res is None

@dataclass
class RaceResult:
    """What :func:`race` simulated (``results``) and what it skipped (``pruned``: name -> lower bound in seconds)."""

    results: list[SimResult]
    pruned: dict[str, float] = field(default_factory=dict)

    def best(self) -> SimResult | None:
        return min(self.results, key=lambda r: r.time_s, default=None)


def race(net: Network, size: int, candidates: Mapping[str, Schedule], *, best_s: float = math.inf,
         slack: float = 0.0, fairness: str = "max-min", slice_bytes: int = DEFAULT_SLICE,
         max_slices: int | None = DEFAULT_MAX_SLICES, per_byte: dict[str, float] | None = None,
         step=None, first: str | None = None, lowering=tree_lowering) -> RaceResult:
    """Simulate those of ``candidates`` (name -> schedule, or what ``lowering`` takes) that can finish a ``size``-byte call within
    ``best_s / (1 - slack)`` seconds (``best_s``: the best time already known, e.g. of schedules simulated by
    the caller), lowering that limit as faster ones are found; ``first`` (e.g. the winner at the previous size)
    is simulated first, the others in the order of their bounds.  ``per_byte`` caches each candidate's link
    bound per byte across calls.  ``step(name)`` is called once per candidate, simulated or skipped."""
    per_byte = {} if per_byte is None else per_byte
    slicing = (float(slice_bytes), None if max_slices is None else int(max_slices))
    bounds: dict[str, float] = {}
    for name, sched in candidates.items():
        if name not in per_byte:
            per_byte[name] = link_per_byte(sched, net, lowering, slicing)
        bounds[name] = per_byte[name] * size
    return race_loop(race_order(candidates, bounds, first), bounds, best_s, slack,
                     lambda name, limit: attempt(name, candidates[name], net, size, bounds[name], limit, lowering,
                                                 slicing, fairness), step)


def race_loop(order: Sequence[str], bounds: dict[str, float], best_s: float, slack: float,
              tries: Callable[[str, float], tuple[float, SimResult | None, bool]],
              step: Callable[[str], None] | None = None) -> RaceResult:
    """:func:`race`'s rule over the contenders in ``order`` (``bounds``: each one's link bound in seconds, raised
    in place to what pruned it): a contender whose bound passes the limit (the best time so far over ``1 - slack``)
    is tried, ``tries(name, limit)`` -> (its bound, its result or None, whether its run was stopped at ``limit``)
    as :func:`attempt` returns them; the others are pruned.  ``step(name)`` after each contender."""
    out = RaceResult([])
    for name in order:
        limit = race_limit(best_s, slack)
        if bounds[name] <= limit:  # the link bound first: no program is built for those it prunes
            bound, res, stopped = tries(name, limit)
            bounds[name] = limit if stopped else bound
            if res is not None:
                out.results.append(res)
                best_s = min(best_s, res.time_s)
        if not out.results or out.results[-1].algorithm != name:
            out.pruned[name] = bounds[name]
        if step is not None:
            step(name)
    return out


STAGE = "simulating candidates"

_NET: Network | None = None


def _init(net: Network) -> None:
    global _NET
    _NET = net


def _race_one(job: tuple) -> RaceResult:
    size, cands, best_s, slack, opts = job
    assert _NET is not None
    return race(_NET, size, cands, best_s=best_s, slack=slack, **opts)


def race_sizes(net: Network, sizes: Sequence[int], candidates: Mapping[int, Mapping[str, Schedule]], *,
               best_s: Mapping[int, float] | None = None, slack: float = 0.0, workers: int = 1,
               progress: Progress | None = None, done: int = 0, total: int | None = None,
               **opts) -> dict[int, RaceResult]:
    """:func:`race` at every size (``candidates[size]``: those competing there; ``best_s[size]``: the best time
    known there), in ``workers`` processes (one size each) when > 1.  Reports ``(STAGE, done, total)`` to
    ``progress`` per candidate and size, counting on from ``done``."""
    best_s = best_s or {}
    total = total if total is not None else done + sum(len(candidates[s]) for s in sizes)
    out: dict[int, RaceResult] = {}
    if workers <= 1 or len(sizes) <= 1:
        per_byte: dict[str, float] = {}
        count = [done]

        def step(_name: str) -> None:
            count[0] += 1
            report(progress, STAGE, count[0], total)

        first = None
        for size in sizes:
            out[size] = race(net, size, candidates[size], best_s=best_s.get(size, math.inf), slack=slack,
                             per_byte=per_byte, step=step, first=first, **opts)
            top = out[size].best()
            first = top.algorithm if top is not None else first
        return out
    jobs = [(size, dict(candidates[size]), best_s.get(size, math.inf), slack, opts) for size in sizes]
    with ProcessPoolExecutor(max_workers=workers, initializer=_init, initargs=(net,)) as pool:
        for size, res in zip(sizes, pool.map(_race_one, jobs)):
            out[size] = res
            done += len(candidates[size])
            report(progress, STAGE, done, total)
    return out


def ranking_rate(net: Network, **opts):
    """``rate(schedule, size)`` for ranking schedules one after another (the export fallbacks): the simulated algbw
    (GB/s), except that a schedule whose lower bound cannot beat the fastest one seen at that size is not
    simulated and gets the rate of its bound instead (lower than that fastest one's, so the choice is unchanged)."""
    best: dict[int, float] = {}

    def rate(sched: Schedule, size: int) -> float:
        got = race(net, size, {"s": sched}, best_s=best.get(size, math.inf), **opts)
        if got.results:
            best[size] = min(best.get(size, math.inf), got.results[0].time_s)
            return got.results[0].algbw_gbps
        return size / got.pruned["s"] / 1e9

    return rate
