"""Floors on thread blocks per GPU (mscclpp/floor.py): never above a plan's real count, so the exporter skips only
layouts that cannot fit, exports exactly what trying every layout in order gives (plan or error message), and the
MSCCL++ fallback keeps every k whose plan fits (the one that would have won among them)."""

from __future__ import annotations

import re

import pytest

import forestcoll.mscclpp.fallback as fallback
import forestcoll.mscclpp.floor as floor
from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportError, ExportOptions, export_mscclpp, layouts_tried
from forestcoll.mscclpp.lower import Lowering
from forestcoll.mscclpp.plan import write_plan
from forestcoll.topology import import_topology

SLOW = pytest.mark.slow  # ~10-20 s each: bigger plans
CASES = [("hypercube:dim=3", "allreduce", 3), ("hypercube:dim=3", "allgather", 3),
         pytest.param(("hypercube:dim=3", "allreduce", 4), marks=SLOW),
         pytest.param(("dgx-a100:nodes=2", "allreduce", 2), marks=SLOW),
         pytest.param(("dgx-a100:nodes=2", "reduce_scatter", 2), marks=SLOW)]


def _outcome(sched, topo, opts: ExportOptions) -> tuple[str, ...]:
    """What an export gives: layout, blocks and plan text, or the error message."""
    try:
        r = export_mscclpp(sched, topo, opts)
    except ExportError as exc:
        return ("error", str(exc))
    return (r.layout, str(r.stats.threadblocks_per_gpu), write_plan(r.plan))


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}-k{c[2]}".replace(":", "-"))
def case(request):
    spec, coll, k = request.param
    topo = import_topology(spec).topology
    sched = generate(topo, coll, k=k)
    layouts = ("edge", "mixed", "level", "source") + (("shared",) if coll == "allreduce" else ())
    # every layout alone, with no limit that bites: the blocks it needs
    need = {lay: int(_outcome(sched, topo, ExportOptions(layout=lay, check=False, max_threadblocks=10**4))[1])
            for lay in layouts}
    return topo, sched, layouts, need


def test_floor_never_exceeds_a_plan(case):
    topo, sched, layouts, need = case
    low = Lowering(sched, topo, outofplace=False)
    found = floor.floors(low.build(), layouts)
    assert all(found[lay] <= need[lay] for lay in layouts), (found, need)
    # and below every limit a layout squeezes into (mixed / shared coarsen to fit: their count depends on the limit)
    for lay in ("mixed", "level") + (("shared",) if "shared" in layouts else ()):
        for mx in sorted({found[lay], (found[lay] + need[lay]) // 2, max(found[lay], need[lay] - 1)}):
            opts = ExportOptions(layout=lay, check=False, max_threadblocks=mx)
            got = _outcome(sched, topo, opts)
            assert got[0] == "error" or int(got[1]) >= found[lay]
            assert not floor.fits_nowhere(sched, topo, opts)  # the layout race skips only what cannot fit
        opts = ExportOptions(layout=lay, check=False, max_threadblocks=found[lay] - 1)
        assert floor.fits_nowhere(sched, topo, opts) and _outcome(sched, topo, opts)[0] == "error"


def test_auto_export_is_the_first_layout_that_fits(case):
    """The auto layout with the floors against trying every layout in order (each exported alone: no floor): the
    same plan, or the same message naming the fewest blocks (the coarsest layout among ties)."""
    topo, sched, _layouts, need = case
    order = layouts_tried(sched.collective, "auto")
    for mx in sorted({1, *need.values(), *(v - 1 for v in need.values())} - {0}):
        got = _outcome(sched, topo, ExportOptions(check=False, max_threadblocks=mx))
        alone = {lay: _outcome(sched, topo, ExportOptions(layout=lay, check=False, max_threadblocks=mx))
                 for lay in order}
        fit = [lay for lay in order if alone[lay][0] != "error"]
        if fit:
            assert got == alone[fit[0]], (mx, fit)
            continue
        counts = [int(re.search(r"needs (\d+) thread blocks per GPU", alone[lay][1]).group(1)) for lay in order]
        fewest = min(counts)
        last = [lay for c, lay in zip(counts, order) if c == fewest][-1]  # the coarsest of the fewest
        assert got[0] == "error" and f"needs {fewest} thread blocks per GPU even at the '{last}' layout" in got[1]


def _fitting(monkeypatch, topo, sched, opts, fits_nowhere=None) -> tuple[list[int], list[int]]:
    """The fitting k of fitting_powers (``fits_nowhere`` replaced when given) and the k it exported."""
    import forestcoll.mscclpp.export as export

    calls: list[int] = []
    orig = export.export_mscclpp

    def counted(s, *a, **kw):
        calls.append(s.k)
        return orig(s, *a, **kw)
    with monkeypatch.context() as m:
        m.setattr(export, "export_mscclpp", counted)
        if fits_nowhere is not None:
            m.setattr(floor, "fits_nowhere", fits_nowhere)
        return sorted(fallback.fitting_powers(topo, sched.collective, sched, opts)), calls


@pytest.mark.parametrize(("spec", "coll"), [("hypercube:dim=3", "allgather"),
                                            pytest.param("hypercube:dim=3", "allreduce", marks=SLOW)])
def test_fallback_keeps_every_fitting_k(monkeypatch, spec, coll):
    """fitting_powers with the floors keeps the same k as exporting every k, at the limits around each k's fewest
    blocks (where a k fits exactly), and exports fewer; a floor one block too high drops a k that fits (so this test
    can fail)."""
    topo = import_topology(spec).topology
    sched = generate(topo, coll, k=8)
    fewest = set()
    for kk in (4, 2, 1):
        try:
            export_mscclpp(generate(topo, coll, k=kk), topo, ExportOptions(max_threadblocks=1, check=False))
        except ExportError as exc:
            fewest.add(int(re.search(r"needs (\d+) thread blocks", str(exc)).group(1)))
    skipped = dropped = 0
    for mx in sorted({m + d for m in fewest for d in (-1, 0)} | {2}):
        opts = ExportOptions(max_threadblocks=mx)
        kept, asked = _fitting(monkeypatch, topo, sched, opts)
        full, every = _fitting(monkeypatch, topo, sched, opts, lambda *a, **kw: False)
        assert kept == full, mx
        skipped += len(every) - len(asked)
        with monkeypatch.context() as m:  # the mutation: floors one block too high
            m.setattr(floor, "floors", lambda acts, lays, f=floor.floors: {x: v + 1 for x, v in f(acts, lays).items()})
            worse, _ = _fitting(monkeypatch, topo, sched, opts)
        dropped += len(full) - len(worse)
    assert skipped > 0 and dropped > 0
