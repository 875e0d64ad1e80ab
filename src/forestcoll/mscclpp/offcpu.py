"""Plans of trees packed without the CPUs: the rivals ``generate --format mscclpp`` races its choice of trees against.

A schedule's tree edge between two GPUs of one box may be routed through the CPUs (PCIe) when that keeps the optimum,
but the executor sends it over the pair's direct link (a memory channel over xGMI / NVLink), which then carries more
than the trees assumed (:mod:`forestcoll.msccl.detours`).  The MSCCL file writer already offers the optimum packed
without the CPUs; here a plan gets the same offer: :func:`off_cpu_rival` packs the schedule again without them (only
where its trees have such detours and the packing loses no exact rate), and :func:`race_plans` keeps whichever plan
simulates faster at the design size (``plan_rate``), so a plan never gets slower.  MI300 dump x4 rail at 1 GiB:
allreduce 185.4 -> 192.6 GB/s, allgather 359.0 -> 377.0 (docs/mscclpp.md, "On the imported dumps").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from forestcoll.schedule import Schedule
from forestcoll.topology.model import Topology

if TYPE_CHECKING:
    from forestcoll.mscclpp.export import ExportOptions, ExportResult
    from forestcoll.mscclpp.lower import Lowering
    from forestcoll.mscclpp.plan import Plan

__all__ = ["design_size", "off_cpu_rival", "race_fallback", "race_plans", "race_routed", "routed_laid_out",
           "unchecked_plan"]


def design_size(opts: ExportOptions) -> int:
    """The size at which plans are ranked: the design size, else the largest size up to 1 GiB."""
    return opts.design_size or min(opts.max_message_size or (1 << 30), 1 << 30)


def off_cpu_rival(topology: Topology, sched: Schedule, optimal: bool, **generate_kwargs: Any) -> Schedule | None:
    """``sched`` packed again without the CPUs when its trees join GPUs of one box through one and the packing
    keeps its exact rate (the optimum: :func:`~forestcoll.msccl.detours.optimum_on` on ``without_cpus``; a fixed k:
    :func:`~forestcoll.msccl.detours.off_cpu_packing` at ``sched.k``); else None (always on fabrics without
    detours, where either costs one scan of the edges)."""
    from forestcoll.msccl.detours import off_cpu_packing, optimum_on, without_cpus

    if optimal:
        return optimum_on(topology, sched, without_cpus, **generate_kwargs)
    return off_cpu_packing(topology, sched, **{**generate_kwargs, "k": sched.k})


def unchecked_plan(topology: Topology, sched: Schedule, opts: ExportOptions,
                   lowering: Lowering | None = None) -> tuple[ExportResult | None, str]:
    """``sched``'s unchecked plan, or None and why when it cannot be exported within ``opts``' limits (more thread
    blocks or operations than the executor allows): a rival that does not fit is not taken, never an error.
    ``lowering``: as :func:`~forestcoll.mscclpp.export.export_mscclpp` takes it."""
    from forestcoll.mscclpp.export import ExportError, export_mscclpp

    try:
        return export_mscclpp(sched, topology, replace(opts, check=False), lowering=lowering), ""
    except ExportError as exc:
        return None, str(exc).split(" (--max-threadblocks")[0]


def race_plans(topology: Topology, sched: Schedule, mine: ExportResult, rival: Schedule, opts: ExportOptions,
               plan_rate: Callable[[Plan, int], float]) -> tuple[Schedule, ExportResult, str]:
    """The optimal ``sched`` (its unchecked plan ``mine``, which fits) against ``rival`` (:func:`off_cpu_rival`):
    whichever plan ``plan_rate`` gives the higher rate at :func:`design_size` (ties keep ``sched``), its plan, and a
    note saying what was raced."""
    from forestcoll.msccl.detours import through_cpus_note
    from forestcoll.mscclpp.layouts import BOUND, below, ceiling
    from forestcoll.units import format_size

    size = design_size(opts)
    head = (through_cpus_note(topology, sched, "the executor")
            + f"; packed again without the CPUs (k={rival.k}, the same exact rate)")
    alt, why = unchecked_plan(topology, rival, opts)
    if alt is None:
        return sched, mine, head + f", its plan does not fit ({why}): not taken"
    # the plan that may be faster first: the other is not simulated when its bound shows it loses
    top_mine, top_alt = ceiling(plan_rate, mine.plan, size), ceiling(plan_rate, alt.plan, size)
    at = f" GB/s at {format_size(size)} against "
    if top_mine is not None and top_alt is not None and top_alt > top_mine:
        there = plan_rate(alt.plan, size)
        pruned = below(top_mine, there, strict=True)
        here = top_mine if pruned else plan_rate(mine.plan, size)
        rates = f"{there:.1f}{at}" + (f"{BOUND} {here:.1f}" if pruned else f"{here:.1f}")
    else:
        here = plan_rate(mine.plan, size)
        pruned = below(top_alt, here)
        there = top_alt if pruned else plan_rate(alt.plan, size)
        rates = (f"{BOUND} {there:.1f}" if pruned else f"{there:.1f}") + f"{at}{here:.1f}"
    said = (f", its plan simulates {rates} ({alt.layout} layout, "
            f"{alt.stats.threadblocks_per_gpu} thread blocks per GPU against {mine.stats.threadblocks_per_gpu})")
    if there > here:
        return rival, alt, head + said + ": taken"
    return sched, mine, head + said + ": not taken"


def race_fallback(topology: Topology, optimal: Schedule, chosen: Schedule, scheds: dict[int, Schedule],
                  exported: dict[int, ExportResult], rates: dict[int, float], opts: ExportOptions,
                  plan_rate: Callable[[Plan, int], float], **generate_kwargs: Any) -> tuple[Schedule, str]:
    """When the optimal k does not fit: the optimum and each fitting k's schedule (``scheds``, their unchecked plans
    in ``exported`` and their rates at :func:`design_size` in ``rates``; ``chosen`` the fastest), packed again
    without the CPUs where their trees have detours (:func:`off_cpu_rival`), race ``chosen`` by their plans (those
    that fit): the fastest, when faster, goes into ``exported`` and ``rates`` at its k and is returned.  The
    schedule to write and a phrase for the note ("" when no tree had detours)."""
    from forestcoll.mscclpp.layouts import BOUND, cannot_beat
    from forestcoll.units import format_size

    size = design_size(opts)
    tried: list[str] = []
    best, best_rate, best_plan = chosen, rates[chosen.k], exported[chosen.k]
    for sched in [optimal, *(scheds[kk] for kk in sorted(scheds, reverse=True))]:
        rival = off_cpu_rival(topology, sched, sched is optimal, **generate_kwargs)
        if rival is None:
            continue
        alt, _why = unchecked_plan(topology, rival, opts)
        top = None if alt is None else cannot_beat(plan_rate, alt.plan, size, best_rate)  # not simulated: not taken
        there = None if alt is None or top is not None else plan_rate(alt.plan, size)
        tried.append(f"k={rival.k} " + ("does not fit" if alt is None else f"{BOUND} {top:.1f}" if there is None
                                        else f"{there:.1f}"))
        if there is not None and there > best_rate:
            best, best_rate, best_plan = rival, there, alt
    if not tried:
        return chosen, ""
    phrase = (f"; the trees packed again without the CPUs where they join GPUs of one box through one (the same "
              f"exact rate), plans at {format_size(size)}: {', '.join(tried)}")
    if best is chosen:
        return chosen, phrase + ", not taken"
    exported[best.k], rates[best.k] = best_plan, best_rate
    return best, phrase + f", k={best.k} taken"


ROUTED_BELOW = 0.95  # a plan below this share of the bound races the packings as the runtime routes the fabric


def race_routed(topology: Topology, optimal: Schedule, chosen: Schedule, mine: ExportResult, rate: float,
                opts: ExportOptions, plan_rate: Callable[[Plan, int], float],
                **generate_kwargs: Any) -> tuple[Schedule, ExportResult, float, str]:
    """When ``mine`` (``chosen``'s unchecked plan, ``rate`` its rate at :func:`design_size`) runs below
    :data:`ROUTED_BELOW` of ``optimal``'s bound and ``optimal``'s trees pass PCIe switches or CPUs where the executor
    does not send them (:func:`forestcoll.msccl.routed.misrouted`): the packings of the fabric as the runtime routes
    it (:func:`~forestcoll.msccl.routed.routed_schedules`), highest exact rate first, race it by their plans (those
    that fit), each replacing the plan so far when faster at the mid size (16 MiB) or the design size and slower at
    neither (:func:`forestcoll.msccl.generated.replaces`, the MSCCL files' rule: one plan serves every size; a plan
    whose bound shows it slower at the design size is not simulated): the plan kept, with its rate at the design
    size, and a phrase for the note ("" when nothing was raced)."""
    from forestcoll.msccl.generated import MID_SIZE, replaces
    from forestcoll.msccl.routed import misrouted, routed_schedules
    from forestcoll.mscclpp.layouts import BOUND, below, ceiling
    from forestcoll.units import format_size

    if rate >= ROUTED_BELOW * float(optimal.bound_algbw) or not misrouted(topology, optimal):
        return chosen, mine, rate, ""
    size = design_size(opts)
    sizes = list(dict.fromkeys((min(MID_SIZE, size), size)))  # the mid size first, as the files' rule asks
    tried: list[str] = []
    best, rates = (chosen, mine), {size: rate}
    for sched in sorted(routed_schedules(topology, optimal, **generate_kwargs), key=lambda s: (-s.algbw, -s.k)):
        alt, _why = unchecked_plan(topology, sched, opts)
        if alt is None:
            continue
        top = ceiling(plan_rate, alt.plan, size)
        head = f"k={sched.k} {float(sched.algbw):.1f} -> "
        if below(top, rates[size], strict=True):  # slower at the design size: it cannot replace the plan so far
            tried.append(head + f"{BOUND} {top:.1f}")
            continue
        theirs: dict[int, float] = {}
        if replaces(plan_rate, alt.plan, best[1].plan, sizes, theirs, rates):
            best, rates = (sched, alt), theirs
        tried.append(head + " / ".join(f"{theirs[x]:.1f}" if x in theirs else "-" for x in reversed(sizes)))
    if not tried:
        return chosen, mine, rate, ""
    at = " / ".join(format_size(x) for x in reversed(sizes))
    phrase = (f"the plan runs below {ROUTED_BELOW:.0%} of the bound and the optimal k={optimal.k}'s trees pass PCIe "
              f"switches or CPUs where the executor does not send them ({misrouted(topology, optimal)} edges): "
              f"packed as the runtime routes the fabric (exact -> plans at {at}, GB/s: {', '.join(tried)}; the "
              f"bound {float(optimal.bound_algbw):.1f} counts routes no runtime takes), each replacing the plan so "
              f"far when faster at one size and slower at neither: ")
    if best[0] is chosen:
        return chosen, mine, rate, phrase + "none is"
    return (*best, rates[size], phrase + f"k={best[0].k}'s taken, {float(best[0].algbw / optimal.bound_algbw):.1%} "
            "of the bound")


def routed_laid_out(topology: Topology, optimal: Schedule, chosen: Schedule, result: ExportResult, said: str,
                    opts: ExportOptions, plan_rate: Callable[[Plan, int], float], kwargs: dict[str, Any]
                    ) -> tuple[Schedule, ExportResult, str]:
    """The plan laid out so far (``result``, ``chosen``'s) against the fabric packed as the runtime routes it
    (:func:`race_routed`); a packing taken is laid out in turn (:func:`~forestcoll.mscclpp.layouts.laid_out`, at
    the design size), that layout kept only when it too is slower than ``result`` at neither size; ``said`` grows."""
    from forestcoll.msccl.generated import MID_SIZE, replaces
    from forestcoll.msccl.routed import misrouted
    from forestcoll.mscclpp.layouts import laid_out

    if not misrouted(topology, optimal):  # (no simulation asked: most fabrics stop here)
        return chosen, result, said
    size = design_size(opts)
    new, plan, at, routed = race_routed(topology, optimal, chosen, result, plan_rate(result.plan, size), opts,
                                        plan_rate, **kwargs)
    said += f"; {routed}" if routed else ""
    if new is chosen:
        return chosen, result, said
    laid, how = laid_out(topology, new, plan, at, opts, plan_rate)
    if laid is not plan and not replaces(plan_rate, laid.plan, result.plan,
                                         list(dict.fromkeys((min(MID_SIZE, size), size))), {}, {}):
        return new, plan, said + how + "; that layout is slower than the plan so far at a size: the packing's own kept"
    return new, laid, said + how
