"""One MSCCL++ plan per size range (``generate --sizes --format mscclpp``): the candidates whose plans fit the
executor (:func:`fitting_candidates`), ranked at each size by their *plans* simulated there (:func:`select_plans`:
what a user of the plan gets; their trees can run twice as fast as the plan), and the plans written per range, LL
where it wins (:func:`export_plans_by_size`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from forestcoll import collectives
from forestcoll.errors import UsageError
from forestcoll.mscclpp.plan import Plan
from forestcoll.progress import Progress, report
from forestcoll.schedule import Schedule
from forestcoll.simulate.mscclpp import mscclpp_collective, mscclpp_program, simulate_plan
from forestcoll.simulate.network import Network
from forestcoll.units import format_size

if TYPE_CHECKING:
    from forestcoll.mscclpp.recut import Cuts

LL = "@LL"  # the contender name suffix of a candidate's LL plan (its Simple plan has the candidate's name)
CUT_MARGIN = 0.02  # a size of a Simple range gets a plan cut for itself when that runs this much faster there
# (candidate, protocol, design size, max_message_size: None for LL and unbounded plans, size) -> GB/s
Rates = dict[tuple[str, str, int | None, int | None, int], float]


def fitting_candidates(candidates: dict[str, Schedule], topo, options=None,
                       cuts: Cuts | None = None) -> tuple[dict[str, Schedule], list[str]]:
    """The candidate schedules whose plans fit the executor's limits (``options``:
    :class:`forestcoll.mscclpp.export.ExportOptions`), and a note for each one left out (``cuts``: the exports kept
    for the later steps, :class:`forestcoll.mscclpp.recut.Cuts` on ``topo``)."""
    from forestcoll.mscclpp.export import ExportError, ExportOptions
    from forestcoll.mscclpp.recut import Cuts

    cuts = cuts or Cuts(topo)

    base = replace(options or ExportOptions(), check=False, protocol="Simple", max_message_size=None, min_message_size=0)
    kept: dict[str, Schedule] = {}
    notes: list[str] = []
    for name, sched in candidates.items():
        try:
            cuts.export(sched, base)
        except ExportError as exc:
            notes.append(f"{name} (k={sched.k}) left out: " + str(exc).split(" (--max-threadblocks")[0])
            continue
        kept[name] = sched
    if not kept:
        raise UsageError("no candidate schedule fits the executor's limits: " + "; ".join(notes))
    return kept, notes


def plan_lowering(plan: Plan, net: Network, size: float, slice_bytes: float, max_slices: int | None):
    """An MSCCL++ plan as a contender of :func:`forestcoll.simulate.race.race` (``lowering=``): the program
    :func:`simulate_plan` runs (the plan pipelines itself: the slicing is not used), its collective, extra fields,
    bus factor."""
    coll, bus = mscclpp_collective(plan, "plan")
    return mscclpp_program(plan, net, size), coll, {"protocol": plan.protocol}, bus


def select_plans(net: Network, collective: str, sizes: Sequence[int], candidates: dict[str, Schedule], options=None,
                 *, fairness: str = "max-min", margin: float = 0.02, workers: int = 1,
                 progress: Progress | None = None, cuts: Cuts | None = None) -> tuple[Any, Rates, str]:
    """The candidate whose MSCCL++ plan simulates fastest at each size, merged into size ranges
    (:func:`forestcoll.simulate.select.size_ranges`): at a size each candidate whose plan takes it competes with its
    Simple plan cut for that size and, up to the LL cap (not rooted collectives), its LL plan; a contender that cannot
    come within ``margin`` of the best is skipped by its lower bound (:func:`forestcoll.simulate.race.race`; the
    previous size's winner first).  The plans are exported here and simulated by ``workers`` processes
    (:class:`forestcoll.simulate.race_pool.RacePool`: the same results as one).  Returns the
    :class:`forestcoll.simulate.select.Selection` (``measured``: the best of a candidate's plans), the rates
    simulated (for :func:`export_plans_by_size`) and a note on the cost (its CPU: this process's and the workers').
    ``cuts``: :class:`forestcoll.mscclpp.recut.Cuts` on ``net.topology``, the plans exported once per candidate and
    protocol and recut for each size (the same plans)."""
    from forestcoll.mscclpp.export import DEFAULT_LL_MAX_MESSAGE, ExportError, ExportOptions
    from forestcoll.mscclpp.recut import Cuts
    from forestcoll.simulate.race_pool import RacePool, children_cpu
    from forestcoll.simulate.select import Selection, size_ranges, usable

    base = replace(options or ExportOptions(), check=False, min_message_size=0, max_message_size=None)
    rooted = collectives.get(collective).rooted
    cuts = cuts or Cuts(net.topology)
    t0, cpu0, children0 = time.perf_counter(), time.process_time(), children_cpu()
    ll: dict[str, Plan | None] = {}
    table: list = []
    rates: Rates = {}
    exported = runs = 0
    first = None
    pool = RacePool(net, workers)
    for i, size in enumerate(sorted(sizes)):
        report(progress, "simulating candidates' plans", i, len(sizes))
        contenders: dict[str, Plan] = {}
        design: dict[str, int | None] = {}
        for name, sched in candidates.items():
            if not usable(sched, size, 16):
                continue
            try:
                contenders[name] = cuts.export(sched, replace(base, protocol="Simple", design_size=size)).plan
                design[name] = size
                exported += 1
            except ExportError:
                pass
            if size <= DEFAULT_LL_MAX_MESSAGE and not rooted:
                if name not in ll:
                    try:
                        ll[name] = cuts.export(sched, replace(base, protocol="LL")).plan
                        exported += 1
                    except ExportError:
                        ll[name] = None
                if ll[name] is not None:
                    contenders[name + LL], design[name + LL] = ll[name], None
        got = pool.race(size, contenders, slack=margin, fairness=fairness, first=first, lowering=plan_lowering)
        refused_everywhere(got, size, "plan")
        runs += len(contenders)
        best: dict[str, Any] = {}
        for r in got.results:
            name = r.algorithm.removesuffix(LL)
            rates[(name, "LL" if r.algorithm.endswith(LL) else "Simple", design[r.algorithm], None, size)] = r.algbw_gbps
            if name not in best or r.algbw_gbps > best[name].algbw_gbps:
                best[name] = replace(r, algorithm=name)
        table += best.values()
        top = max(best.values(), key=lambda r: r.algbw_gbps, default=None)
        first = top.algorithm if top is not None else first
    report(progress, "simulating candidates' plans", len(sizes), len(sizes))
    cpu = time.process_time() - cpu0 + children_cpu() - children0
    note = (f"ranked by the candidates' MSCCL++ plans simulated at each size, not by their trees ({exported} plans "
            f"exported, {len(rates)} of {runs} plan simulations run, the others skipped by their lower "
            f"bounds; {time.perf_counter() - t0:.1f} s, {cpu:.1f} s CPU)")
    return Selection(size_ranges(table, sizes, candidates, margin), table), rates, note


def refused_everywhere(got, size: int, what: str) -> None:
    """A one-line UsageError when every contender of race result ``got`` at ``size`` lost by a refused simulation
    (an infinite bound: above the simulator's transfer limit), so no candidate can be chosen there."""
    from forestcoll import limits

    if not got.results and got.pruned and all(b == float("inf") for b in got.pruned.values()):
        raise UsageError(f"every candidate's {what} simulation at {format_size(size)} needs more than "
                         f"{limits.MAX_SIM_TRANSFERS:,} transfers, above forestcoll's limit; leave that size out of "
                         "--sizes (see docs/limits.md)")


def _same_program(a: Plan, b: Plan) -> bool:
    """Whether plans ``a`` and ``b`` differ at most in their name and size range (fields the simulator does not read:
    one call of either is the same program)."""
    return replace(a, name=b.name, min_message_size=b.min_message_size, max_message_size=b.max_message_size) == b


def _start(cuts: Cuts, pool, rng, path: str, opts, q: str, mid: int) -> tuple[str, Any, Any]:
    """The plan of ``rng``'s schedule to write at ``path`` (``opts`` with protocol ``q``; a Simple plan cut for
    ``mid``), its self-check started in ``pool``: (its path, its export, the check's Job)."""
    from forestcoll.mscclpp.export import ExportError
    from forestcoll.simulate.race_pool import Job

    p = opts.protocol
    qopts = replace(opts, protocol=q, name=opts.name[:-len(p)] + q.lower(), design_size=None if q == "LL" else mid)
    at = path.replace(f"-{p}-", f"-{q}-")
    try:
        result = cuts.prepare(rng.schedule, qopts)
    except ExportError as exc:  # as a failed self-check: the next protocol is tried
        return at, None, Job(done=(False, exc))
    return at, result, pool.submit(_timed, cuts.checked, result, qopts)


BISECT = 3  # halvings of the gap between the last size where LL wins and the first where it loses


def _round(size: int, unit: int) -> int:
    """``size`` rounded down to a multiple of ``unit`` (the plan's chunking) and of a sixteenth of its power of two
    (sizes a user reads: 3 MiB, not 3 MiB - 256 bytes)."""
    step = max(unit, (1 << max(size.bit_length() - 5, 0)) // unit * unit)
    return size - size % step


def ll_reach(rng, sizes: Sequence[int], proto: dict[int, str], ll_rate, simple_rate) -> dict[int, str]:
    """Where each run of LL sizes of ``rng`` (a :class:`forestcoll.simulate.select.SizeRange`; ``proto``: size ->
    protocol of its listed ``sizes``) stops winning before the next listed size (or the range's end; an open range:
    the LL cap): the powers of two in between and that end (each rounded down to a size the plan takes) are compared
    one after another (``ll_rate(size)`` against ``simple_rate(size)``, the Simple plan cut for that size) up to the
    first where Simple is at least as fast, and the crossover is narrowed by ``BISECT`` halvings from the last size
    LL won.  Returns size -> protocol for the sizes it adds: "LL" where LL won, "Simple" at the crossover found and
    the powers of two from the first loss to the end (the Simple sizes after the LL ones: LL serves no size from the
    crossover up, and the Simple plans there are cut for those sizes as for listed ones)."""
    from forestcoll.mscclpp.export import DEFAULT_LL_MAX_MESSAGE

    unit = 16 * collectives.get(rng.schedule.collective).chunks_per_loop(sum(rng.schedule.weights), rng.schedule.k)
    out: dict[int, str] = {}
    for i, s in enumerate(sizes):
        if proto[s] != "LL" or (i + 1 < len(sizes) and proto[sizes[i + 1]] == "LL"):
            continue  # not the last size of an LL run
        top = sizes[i + 1] - 1 if i + 1 < len(sizes) else rng.max_bytes or max(DEFAULT_LL_MAX_MESSAGE, s)
        powers = [p - p % unit for p in (1 << e for e in range(s.bit_length(), top.bit_length()))]
        probes = sorted({p for p in powers + [_round(top, unit)] if p > s})
        won, lost = s, None
        for j, probe in enumerate(probes):
            if ll_rate(probe) <= simple_rate(probe):
                lost = probe
                out.update((p, "Simple") for p in probes[j:] if p in powers)
                break
            out[probe], won = "LL", probe
        for _ in range(BISECT if lost is not None else 0):
            mid = _round((won + lost) // 2, unit)
            if mid <= won:
                break
            if ll_rate(mid) > simple_rate(mid):
                out[mid], won = "LL", mid
            else:
                lost = mid
        if lost is not None:
            out[lost] = "Simple"
    return out


def _algbw(net: Network, plan: Plan, size: int, fairness: str) -> float:
    """``plan``'s simulated algbw at ``size`` (GB/s); :class:`~forestcoll.simulate.race.Unsimulated` where the
    simulator refuses it (above its transfer limit: it loses every comparison)."""
    from forestcoll.simulate.race import losing

    return losing(lambda: simulate_plan(net, plan, size, fairness=fairness).algbw_gbps)()


def _timed(fn, *args) -> tuple[Any, float]:
    """(``fn(*args)``, its wall seconds)."""
    t0 = time.perf_counter()
    return fn(*args), time.perf_counter() - t0


def export_plans_by_size(net: Network, selection, outdir: str, collective: str, options=None, check: bool = True,
                         fairness: str = "max-min", rates: Rates | None = None, cuts: Cuts | None = None,
                         workers: int = 1) -> list:
    """One MSCCL++ plan per size range of ``selection`` (:class:`forestcoll.simulate.select.Selection`) into
    ``outdir``: inside a range, sizes up to the LL cap (1 MiB), and above it the sizes after those while LL keeps
    winning, whose LL plan simulates faster than the Simple plan cut for that size get an LL plan, which serves up
    to where it stops winning (:func:`ll_reach`; a Simple plan starts there), the others a Simple plan cut for the
    middle size of its sizes (a size whose own cut runs more than ``CUT_MARGIN`` faster there gets a plan cut for
    itself); every plan covers its sizes with ``min_message_size`` / ``max_message_size``, from 0 without gaps.  ``rates``: the plan rates
    :func:`select_plans` simulated (the others are simulated here).  Returns
    :class:`forestcoll.simulate.select.ExportedRange` entries (a failed export carries its reason) whose ``measured``
    are the written plan's own simulated rates at its sizes.  ``cuts``: as :func:`select_plans`'.  ``workers``: the
    processes (:class:`forestcoll.simulate.race_pool.Forked`) that run the simulations compared two at a time (LL
    against Simple at a size, a size's own cut against the middle size's) and the written plans' self-checks (the
    same files and results as one)."""
    import os
    from dataclasses import replace

    from forestcoll.mscclpp.export import DEFAULT_LL_MAX_MESSAGE, ExportError, ExportOptions
    from forestcoll.mscclpp.recut import Cuts
    from forestcoll.simulate.race_pool import Forked
    from forestcoll.simulate.select import ExportedRange

    base = options or ExportOptions()
    pool = Forked(workers)
    pending: dict[tuple, Any] = {}  # rate key -> the Job simulating it
    topo = net.topology
    coll = collectives.get(collective)
    out: list = []
    index = 0
    rates = {} if rates is None else rates
    cuts = cuts or Cuts(topo)

    simple_cuts: dict[tuple[int, int], Plan] = {}

    def simple(sched: Schedule, design: int) -> Plan:
        """``sched``'s unchecked Simple plan cut for ``design``, without a size range (as :func:`select_plans`)."""
        if (id(sched), design) not in simple_cuts:
            simple_cuts[(id(sched), design)] = cuts.export(sched, replace(
                base, protocol="Simple", check=False, min_message_size=0, max_message_size=None,
                design_size=design)).plan
        return simple_cuts[(id(sched), design)]

    def ahead(name: str, plan: Plan, design: int | None, hi: int | None, size: int) -> None:
        """Start simulating what ``rate`` asks with these arguments, unless known or started."""
        key = (name, plan.protocol, design, None if plan.protocol == "LL" else hi, size)
        if key not in rates and key not in pending:
            pending[key] = pool.submit(_algbw, net, plan, size, fairness)

    def rate(name: str, plan: Plan, design: int | None, hi: int | None, size: int) -> float:
        key = (name, plan.protocol, design, None if plan.protocol == "LL" else hi, size)
        if key not in rates:
            rates[key] = pending.pop(key).result() if key in pending else _algbw(net, plan, size, fairness)
        return rates[key]

    def faster(name: str, a: tuple, b: tuple, size: int, by: float = 1.0) -> bool:
        """``rate(name, *a, size) > by * rate(name, *b, size)`` (``a``, ``b``: plan, design, hi), both simulated at
        once."""
        ahead(name, *a, size)
        ahead(name, *b, size)
        return rate(name, *a, size) > by * rate(name, *b, size)

    for rng in selection.ranges:
        sizes = sorted(rng.measured)
        probed: dict[int, float] = {}  # sizes between the listed ones where LL and Simple were compared
        simple_cuts.clear()
        proto = {s: "Simple" for s in sizes}
        small = [s for s in sizes if s <= DEFAULT_LL_MAX_MESSAGE]
        if small and not coll.rooted:
            try:
                ll = cuts.export(rng.schedule, replace(base, protocol="LL", check=False, min_message_size=0,
                                                       max_message_size=None)).plan
            except ExportError:
                ll = None
            for i, s in enumerate(sizes if ll is not None else ()):
                if s > DEFAULT_LL_MAX_MESSAGE and (i == 0 or proto[sizes[i - 1]] != "LL"):
                    break  # above the LL cap only while LL keeps winning
                if faster(rng.name, (ll, None, None), (simple(rng.schedule, s), s, None), s):
                    proto[s] = "LL"
            if ll is not None:
                def ll_rate(s: int, r=rng, plan=ll) -> float:
                    ahead(r.name, simple(r.schedule, s), s, None, s)  # ll_reach asks for it next
                    return rate(r.name, plan, None, None, s)
                ends = ll_reach(rng, sizes, proto, ll_rate, lambda s, r=rng: rate(r.name, simple(r.schedule, s), s, None, s))
                for s, p in ends.items():
                    proto[s] = p
                    probed[s] = rate(rng.name, ll if p == "LL" else simple(rng.schedule, s), None if p == "LL" else s,
                                     None, s)
                sizes = sorted(proto)
        runs: list[tuple[str, list[int]]] = []
        for s in sizes:
            if runs and runs[-1][0] == proto[s]:
                runs[-1][1].append(s)
            else:
                runs.append((proto[s], [s]))
        segments: list[tuple[str, list[int], int | None]] = []  # (protocol, sizes, design size of a Simple plan)
        for p, seg in runs:
            listed = [s for s in seg if s in rng.measured] or seg  # sizes ll_reach added do not move the cut
            mid = listed[len(listed) // 2]
            if p == "LL" or len(seg) == 1:
                segments.append((p, seg, None if p == "LL" else mid))
                continue
            shared = simple(rng.schedule, mid)
            for s in seg:  # a size whose own cut runs faster than the middle size's gets its own plan
                cut = mid
                if s != mid and faster(rng.name, (simple(rng.schedule, s), s, None), (shared, mid, None), s,
                                       1 + CUT_MARGIN):
                    cut = s
                if cut == mid and segments and segments[-1][0] == "Simple" and segments[-1][2] == mid:
                    segments[-1][1].append(s)
                else:
                    segments.append(("Simple", [s], cut))
        jobs: list[tuple] = []  # per segment: (sizes, hi, range part, path, options, [(path, export, check's Job)])
        for j, (p, seg, cut) in enumerate(segments):
            lo = rng.min_bytes if j == 0 else seg[0]
            if j + 1 < len(segments):
                hi: int | None = segments[j + 1][1][0] - 1
            else:
                hi = rng.max_bytes or None
            if p == "LL" and hi is None:
                hi = max(DEFAULT_LL_MAX_MESSAGE, seg[-1])
            part = replace(rng, min_bytes=lo, max_bytes=hi or 0,
                           measured={s: rng.measured[s] if s in rng.measured else probed[s] for s in seg})
            name = f"{rng.name}_{coll.mscclpp}_{index}_{p.lower()}".replace("-", "_")
            path = os.path.join(outdir, f"{coll.mscclpp}-{index:02d}-{rng.name}-{p}-{lo}-{hi if hi else 'any'}.json")
            index += 1
            opts = replace(base, protocol=p, min_message_size=lo, max_message_size=hi, name=name, check=check,
                           design_size=cut)
            jobs.append((seg, hi, part, path, opts, [_start(cuts, pool, rng, path, opts, p, cut or seg[len(seg) // 2])]))
        for j, (seg, hi, part, path, opts, tried) in enumerate(jobs):  # the checks, in order, as they end
            p = opts.protocol
            failed: list[str] = []
            for q in dict.fromkeys((p, "Simple")):  # an LL plan that cannot be written (its self-check): the Simple plan
                mid = opts.design_size or seg[len(seg) // 2]
                if q != p:
                    tried.append(_start(cuts, pool, rng, path, opts, q, mid))
                at, result, job = tried[-1]
                try:
                    checked, seconds = job.result()
                except ExportError as exc:
                    failed.append(str(exc))
                    continue
                result = cuts.put(result, at, checked, seconds)
                result.notes.extend(f"the LL plan was not written: {why}" for why in failed)
                after = jobs[j + 1][0][0] if j + 1 < len(jobs) else None
                if q == "LL" and after in probed:
                    result.notes.append(f"LL ends here: from {format_size(after)} the Simple plan cut for it runs as "
                                        f"fast or faster ({probed[after]:.1f} against {rates[(rng.name, 'LL', None, None, after)]:.1f} GB/s)")
                design = None if q == "LL" else mid
                # the plan cut for ``design`` without a range runs alike (a range changes only the plan's size
                # fields, unless it caps the units): its rates serve
                top = None if design is not None and _same_program(result.plan, simple(rng.schedule, design)) else hi
                for s in seg:
                    ahead(rng.name, result.plan, design, top, s)
                measured = {s: rate(rng.name, result.plan, design, top, s) for s in seg}
                out.append(ExportedRange(replace(part, measured=measured), at, result))
                break
            else:
                out.append(ExportedRange(part, None, None, failed[-1]))
    pool.close()
    return out
