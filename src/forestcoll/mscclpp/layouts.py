"""The layout race of ``generate --format mscclpp``: the chosen trees' plan in every other layout that fits.

The exporter's ``auto`` layout takes a thread block per tree edge and piece when that fits (else ``shared`` for an
allreduce, else ``mixed``), which is not always the fastest plan: on the MI300 dump x4 rail the allgather's ``edge``
plan simulates 377.0 GB/s at 1 GiB and its ``level`` plan (fewer, coarser blocks) 380.6.  :func:`race_layouts`
exports the same trees in the other layouts, keeps the one whose plan ``plan_rate`` gives the highest rate at the
design size (a tie keeps ``auto``'s); :func:`laid_out` then tries half units on it (:func:`finer_units`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from forestcoll.errors import SimulationTooLarge
from forestcoll.limits import Unsimulated
from forestcoll.schedule import Schedule
from forestcoll.topology.model import Topology

if TYPE_CHECKING:
    from forestcoll.mscclpp.export import ExportOptions, ExportResult
    from forestcoll.mscclpp.plan import Plan

__all__ = ["BOUND", "SLACK", "TIE", "below", "cannot_beat", "ceiling", "finer_units", "laid_out", "once", "race_layouts",
           "raced"]

# rates within this fraction are a tie: plans of equal rate may simulate a rounding apart (dgx-a100:nodes=2 allreduce
# at 1 GiB: edge 171.2863106741303, source 171.28631067413033 GB/s), and a tie keeps auto's plan
TIE = 1e-9
# a simulated rate may pass its plan's bound by the engine's rounding only (events merged within 1e-9, transfers done
# with 1e-8 of their bytes left): a plan is skipped only when its bound is below the rate to beat by this much more
SLACK = 1e-6
BOUND = "at most"  # the note's word for a plan's bound in place of its simulated rate


def ceiling(plan_rate: Callable[[Plan, int], float], plan: Plan, size: int) -> float | None:
    """A rate that ``plan_rate(plan, size)`` never exceeds (``plan_rate.ceiling``, which
    :func:`forestcoll.simulate.mscclpp.plan_rate` offers; no simulation), or None when ``plan_rate`` has none."""
    top = getattr(plan_rate, "ceiling", None)
    return None if top is None else top(plan, size)


def below(top: float | None, rate: float, strict: bool = False) -> bool:
    """Whether a plan whose :func:`ceiling` is ``top`` cannot simulate faster than ``rate`` (``strict``: simulates
    slower), so that a race need not simulate it."""
    return top is not None and (top * (1 + SLACK) < rate or (not strict and top * (1 + SLACK) == rate))


def cannot_beat(plan_rate: Callable[[Plan, int], float], plan: Plan, size: int, rate: float) -> float | None:
    """``plan``'s :func:`ceiling` when it shows that ``plan`` cannot simulate faster than ``rate``; None when it does
    not (or ``plan_rate`` has no ceiling): then ``plan`` must be simulated."""
    top = ceiling(plan_rate, plan, size)
    return top if below(top, rate) else None


def raced(opts: ExportOptions) -> bool:
    """Whether ``opts`` leaves the layout to the exporter (``auto``, Simple protocol), so a race may choose it."""
    return opts.layout == "auto" and opts.protocol == "Simple"


def once(plan_rate: Callable[[Plan, int], float]) -> Callable[[Plan, int], float]:
    """``plan_rate`` that simulates each (plan object, size) once: a race asks again for the plan it kept."""
    memo: dict[tuple[int, int], tuple[Plan, float]] = {}

    def rate(plan: Plan, size: int) -> float:
        key = (id(plan), size)
        if key not in memo:
            memo[key] = (plan, plan_rate(plan, size))  # the plan is held, so its id is not reused
        return memo[key][1]
    if hasattr(plan_rate, "ceiling"):
        rate.ceiling = plan_rate.ceiling  # type: ignore[attr-defined]
    return rate


def race_layouts(topology: Topology, sched: Schedule, mine: ExportResult, rate: float, opts: ExportOptions,
                 plan_rate: Callable[[Plan, int], float]) -> tuple[ExportResult, float, str]:
    """``sched``'s unchecked plan ``mine`` (``auto`` layout, ``rate`` at the design size) against the same trees in
    each other layout whose plan fits and differs from those already simulated: the fastest by ``plan_rate`` at
    the design size (faster by more than :data:`TIE`, else ``mine``), its rate, and a phrase for the note ("" unless
    :func:`raced`; nothing is simulated when no other layout gives another plan that fits)."""
    from forestcoll.mscclpp.floor import fits_nowhere, lowering_for
    from forestcoll.mscclpp.offcpu import design_size, unchecked_plan
    from forestcoll.mscclpp.plan import write_plan
    from forestcoll.units import format_size

    if not raced(opts):
        return mine, rate, ""
    size = design_size(opts)
    layouts = ("edge", "shared", "mixed", "source", "level") if sched.collective == "allreduce" else (
        "edge", "mixed", "source", "level")
    seen = {write_plan(mine.plan)}
    best, best_rate = mine, rate
    tried = [f"{mine.layout} {rate:.1f} ({mine.stats.threadblocks_per_gpu} thread blocks per GPU)"]
    for layout in layouts:
        if layout == mine.layout:
            continue
        low = lowering_for(sched, topology, replace(opts, layout=layout))  # built once: floored, then exported
        if fits_nowhere(sched, topology, replace(opts, layout=layout), low):
            continue  # a layout whose floor exceeds the limit gives no plan that fits
        alt, _why = unchecked_plan(topology, sched, replace(opts, layout=layout), low)
        if alt is None:
            continue
        text = write_plan(alt.plan)
        if text in seen:  # e.g. 'mixed' where every block of 'edge' fits: the same plan
            continue
        seen.add(text)
        top = cannot_beat(plan_rate, alt.plan, size, best_rate * (1 + TIE))
        if top is not None:  # not simulated: it would not be taken
            tried.append(f"{layout} {BOUND} {top:.1f} ({alt.stats.threadblocks_per_gpu})")
            continue
        there = plan_rate(alt.plan, size)
        tried.append(f"{layout} {there:.1f} ({alt.stats.threadblocks_per_gpu})")
        if there > best_rate * (1 + TIE):
            best, best_rate = alt, there
    head = f"layouts raced, plans at {format_size(size)}: {', '.join(tried)}; "
    if len(tried) == 1:
        return mine, rate, head + "no other layout that fits gives another plan"
    return best, best_rate, head + f"{best.layout} taken"


def laid_out(topology: Topology, sched: Schedule, auto: ExportResult, rate: float, opts: ExportOptions,
              plan_rate: Callable[[Plan, int], float]) -> tuple[ExportResult, str]:
    """``sched``'s unchecked plan ``auto`` (``rate`` at the design size) raced in its other layouts
    (:func:`race_layouts`), then with half units on the layout taken (:func:`finer_units`):
    the plan to write and the note's phrases, each led by "; " ("" when nothing was raced)."""
    laid, best, said = race_layouts(topology, sched, auto, rate, opts, plan_rate)
    won = {sched.k: laid}
    units = opts if laid is auto else replace(opts, layout=laid.layout)
    said = (f"; {said}" if said else "") + finer_units(topology, sched, won, best, units, plan_rate)
    return won[sched.k], said


def finer_units(topology: Topology, sched: Schedule, exported: dict[int, ExportResult], rate: float,
                opts: ExportOptions, plan_rate: Callable[[Plan, int], float]) -> str:
    """Put ``sched``'s plan with ``fine_units`` into ``exported[sched.k]`` when it simulates faster (``plan_rate`` at
    the design size) than ``rate``, the plan there now, and fits; a phrase for the note either way ("" when no
    piece has several chunks, so the units would not change)."""
    from forestcoll.mscclpp.export import export_mscclpp
    from forestcoll.mscclpp.offcpu import design_size
    from forestcoll.units import format_size

    if opts.fine_units or opts.unit_bytes is not None or all(c == 1 for c in exported[sched.k].units):
        return ""
    size = design_size(opts)
    alt = export_mscclpp(sched, topology, replace(opts, check=False, fine_units=True))
    if max(len(g.threadblocks) for g in alt.plan.gpus) > opts.max_threadblocks:
        return ""
    top = cannot_beat(plan_rate, alt.plan, size, rate)
    if top is not None:
        return f"; half units for pieces of several chunks {BOUND} {top:.1f} GB/s, not taken"
    try:
        fine = plan_rate(alt.plan, size)
    except SimulationTooLarge:  # its simulation is above the transfer limit (twice the units): the plan there stays
        fine = Unsimulated()
    if isinstance(fine, Unsimulated):  # (plan_rate of forestcoll.simulate.mscclpp says so without raising)
        return "; half units for pieces of several chunks not simulated (above the simulator's transfer limit), not taken"
    if fine <= rate:
        return f"; half units for pieces of several chunks {fine:.1f} GB/s, not taken"
    exported[sched.k] = alt
    return f"; then half units for pieces of several chunks, {format_size(size)}: {fine:.1f} GB/s (taken)"
