"""One MSCCL++ plan per size range (``generate --sizes --format mscclpp``): the candidates whose plans fit the
executor (:func:`fitting_candidates`) and the plans written per range, LL where it wins (:func:`export_plans_by_size`)."""

from __future__ import annotations

from forestcoll import collectives
from forestcoll.errors import UsageError
from forestcoll.schedule import Schedule
from forestcoll.simulate.mscclpp import simulate_plan
from forestcoll.simulate.network import Network


def fitting_candidates(candidates: dict[str, Schedule], topo, options=None) -> tuple[dict[str, Schedule], list[str]]:
    """The candidate schedules whose plans fit the executor's limits (``options``:
    :class:`forestcoll.mscclpp.export.ExportOptions`), and a note for each one left out."""
    from dataclasses import replace

    from forestcoll.mscclpp.export import ExportError, ExportOptions, export_mscclpp

    base = replace(options or ExportOptions(), check=False, protocol="Simple", max_message_size=None, min_message_size=0)
    kept: dict[str, Schedule] = {}
    notes: list[str] = []
    for name, sched in candidates.items():
        try:
            export_mscclpp(sched, topo, base)
        except ExportError as exc:
            notes.append(f"{name} (k={sched.k}) left out: " + str(exc).split(" (--max-threadblocks")[0])
            continue
        kept[name] = sched
    if not kept:
        raise UsageError("no candidate schedule fits the executor's limits: " + "; ".join(notes))
    return kept, notes


def export_plans_by_size(net: Network, selection, outdir: str, collective: str, options=None, check: bool = True,
                         fairness: str = "max-min") -> list:
    """One MSCCL++ plan per size range of ``selection`` (:class:`forestcoll.simulate.select.Selection`) into
    ``outdir``: inside a range, sizes up to the LL cap (1 MiB) whose LL plan simulates faster than the Simple plan
    cut for that size get an LL plan, the others a Simple plan cut for the middle size of its sizes; every plan
    covers its sizes with ``min_message_size`` / ``max_message_size``.  Returns
    :class:`forestcoll.simulate.select.ExportedRange` entries (a failed export carries its reason)."""
    import os
    from dataclasses import replace

    from forestcoll.mscclpp.export import DEFAULT_LL_MAX_MESSAGE, ExportError, ExportOptions, export_mscclpp, write_mscclpp
    from forestcoll.simulate.select import ExportedRange

    base = options or ExportOptions()
    topo = net.topology
    coll = collectives.get(collective)
    out: list = []
    index = 0
    for rng in selection.ranges:
        sizes = sorted(rng.measured)
        proto = {s: "Simple" for s in sizes}
        small = [s for s in sizes if s <= DEFAULT_LL_MAX_MESSAGE]
        if small and not coll.rooted:
            try:
                ll = export_mscclpp(rng.schedule, topo, replace(base, protocol="LL", check=False, min_message_size=0,
                                                                max_message_size=None)).plan
            except ExportError:
                ll = None
            for s in small if ll is not None else ():
                simple = export_mscclpp(rng.schedule, topo, replace(base, protocol="Simple", check=False,
                                                                    min_message_size=0, max_message_size=None,
                                                                    design_size=s)).plan
                if simulate_plan(net, ll, s, fairness=fairness).algbw_gbps > \
                        simulate_plan(net, simple, s, fairness=fairness).algbw_gbps:
                    proto[s] = "LL"
        segments: list[tuple[str, list[int]]] = []
        for s in sizes:
            if segments and segments[-1][0] == proto[s]:
                segments[-1][1].append(s)
            else:
                segments.append((proto[s], [s]))
        for j, (p, seg) in enumerate(segments):
            lo = rng.min_bytes if j == 0 else seg[0]
            if j + 1 < len(segments):
                hi: int | None = segments[j + 1][1][0] - 1
            else:
                hi = rng.max_bytes or None
            if p == "LL" and hi is None:
                hi = max(DEFAULT_LL_MAX_MESSAGE, seg[-1])
            part = replace(rng, min_bytes=lo, max_bytes=hi or 0, measured={s: rng.measured[s] for s in seg})
            name = f"{rng.name}_{coll.mscclpp}_{index}_{p.lower()}".replace("-", "_")
            path = os.path.join(outdir, f"{coll.mscclpp}-{index:02d}-{rng.name}-{p}-{lo}-{hi if hi else 'any'}.json")
            index += 1
            opts = replace(base, protocol=p, min_message_size=lo, max_message_size=hi, name=name, check=check,
                           design_size=None if p == "LL" else seg[len(seg) // 2])
            failed: list[str] = []
            for q in dict.fromkeys((p, "Simple")):  # an LL plan that cannot be written (its self-check): the Simple plan
                at, mid = path.replace(f"-{p}-", f"-{q}-"), seg[len(seg) // 2]
                qopts = replace(opts, protocol=q, name=name[:-len(p)] + q.lower(), design_size=None if q == "LL" else mid)
                try:
                    result = write_mscclpp(rng.schedule, at, topo, qopts)
                except ExportError as exc:
                    failed.append(str(exc))
                    continue
                result.notes.extend(f"the LL plan was not written: {why}" for why in failed)
                out.append(ExportedRange(part, at, result))
                break
            else:
                out.append(ExportedRange(part, None, None, failed[-1]))
    return out
