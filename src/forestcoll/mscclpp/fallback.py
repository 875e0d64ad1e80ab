"""The fallback of ``generate --format mscclpp`` when the optimal k's plan needs more thread blocks than a GPU runs at
once: the powers of two k below it whose plans fit (:func:`fitting_powers`), ranked at the design size
(:func:`fitting_schedule`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forestcoll.schedule import Schedule
from forestcoll.topology import Topology

if TYPE_CHECKING:
    from forestcoll.mscclpp.export import ExportOptions, ExportResult

__all__ = ["fitting_powers", "fitting_schedule", "ranked"]


def fitting_schedule(topology: Topology, collective: str, sched: Schedule, options: ExportOptions | None = None,
                     rate: Callable[[Schedule, int], float] | None = None, what: str = "trees",
                     exported: dict[int, ExportResult] | None = None,
                     **generate_kwargs: Any) -> tuple[Schedule, str] | None:
    """The schedule to export when ``sched``'s plan needs more thread blocks than ``options.max_threadblocks``:
    among the powers of two k below its k whose plans fit (:func:`fitting_powers`), the one with the highest
    ``rate(schedule, size)`` at the design size (``options.design_size``, default 1 GiB), ties to the larger k
    (:func:`forestcoll.simulate.mscclpp.executor_rate`: the trees simulated on the routes the executor takes; the
    CLI ranks the fitting k's plans, ``write_generated_plan`` with ``plan_rate``; without ``rate`` the largest
    fitting k is taken); with a phrase saying how it was chosen
    (``what`` the rate simulates).  None when no power of two fits.  ``exported`` (when given) receives each
    fitting k's unchecked export (:func:`fitting_powers`) before ``rate`` is asked, so ``rate`` can rank the plan
    exported there instead of exporting it again.  A ``rate`` with ``rate.ceiling(schedule, size)`` (a rate it never
    exceeds) lets a k that cannot win go unsimulated (:func:`ranked`); the phrase gives its ceiling ("at most")."""
    from forestcoll.mscclpp.export import ExportOptions
    from forestcoll.mscclpp.layouts import BOUND
    from forestcoll.mscclpp.offcpu import design_size
    from forestcoll.units import format_size

    fitting = fitting_powers(topology, collective, sched, options, exported, **generate_kwargs)
    if not fitting:
        return None
    if rate is None:
        top = max(fitting)
        return fitting[top], "the largest power of two below it whose plan fits"
    base = options or ExportOptions()
    size = design_size(base)
    rates, tops = ranked(fitting, rate, size)
    chosen = max(rates, key=lambda kk: (rates[kk], kk))
    others = ", ".join(f"k={kk} {BOUND} {tops[kk]:.1f}" if kk in tops else f"k={kk} {rates[kk]:.1f}"
                       for kk in sorted(fitting, reverse=True) if kk != chosen)
    how = (f"the fastest of the powers of two below it whose plans fit, {what} simulated at {format_size(size)} "
           f"({rates[chosen]:.1f} GB/s" + (f"; {others}" if others else "") + ")")
    return fitting[chosen], how


def fitting_powers(topology: Topology, collective: str, sched: Schedule, options: ExportOptions | None = None,
                   exported: dict[int, ExportResult] | None = None, **generate_kwargs: Any) -> dict[int, Schedule]:
    """The schedules at the powers of two k below ``sched.k`` whose plans fit the executor's thread blocks
    (with any layout the exporter picks), largest k first (a k whose every layout has a floor above the limit,
    :func:`~forestcoll.mscclpp.floor.fits_nowhere`, is not exported; one that is exported takes over the actions
    built for its floors); once one fits, every smaller k is tried too (fewer
    trees need no more thread blocks, but a smaller k may still be faster: shallower trees, fewer pieces).
    ``exported`` (when given) receives each fitting k's export (``options`` without the self-check)."""
    from dataclasses import replace

    from forestcoll.generate import generate
    from forestcoll.mscclpp.export import ExportError, ExportOptions, export_mscclpp
    from forestcoll.mscclpp.floor import fits_nowhere, lowering_for

    base = replace(options or ExportOptions(), check=False)
    found: dict[int, Schedule] = {}
    for kk in sorted((2**i for i in range(20) if 2**i < sched.k), reverse=True):
        cand = generate(topology, collective, k=kk, **generate_kwargs)
        low = lowering_for(cand, topology, base)  # its actions built once: floored here, then exported
        if fits_nowhere(cand, topology, base, low):  # no layout can fit: its export would fail for thread blocks
            continue
        try:
            result = export_mscclpp(cand, topology, base, lowering=low)
        except ExportError as exc:
            if "thread blocks per GPU" in str(exc):
                continue
            raise
        found[kk] = cand
        if exported is not None:
            exported[kk] = result
    return found


def ranked(fitting: dict[int, Schedule], rate: Callable[[Schedule, int], float],
           size: int) -> tuple[dict[int, float], dict[int, float]]:
    """``rate(schedule, size)`` of the fitting k, largest k first (ties go to the larger k, so the first is the
    incumbent), skipping a k whose ``rate.ceiling(schedule, size)`` shows it cannot beat the best rate so far (it
    would not be chosen): the rates simulated, and the ceilings of the k skipped."""
    from forestcoll.mscclpp.layouts import below

    top = getattr(rate, "ceiling", None)
    rates: dict[int, float] = {}
    tops: dict[int, float] = {}
    for kk in sorted(fitting, reverse=True):
        s = fitting[kk]
        if rates and top is not None:
            bound = top(s, size)
            if below(bound, max(rates.values())):  # a smaller k than every rated one: a tie would not take it
                tops[kk] = bound
                continue
        rates[kk] = rate(s, size)
    return rates, tops
