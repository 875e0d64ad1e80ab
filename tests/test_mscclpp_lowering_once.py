"""The MSCCL++ export lowers a schedule once: the actions built for the thread-block floors (mscclpp/floor.py) serve
the first layout emitted, and the fallback and the layout race hand the lowering their floors built to the export
(``export_mscclpp(..., lowering=...)``), with the same plans and messages as lowering again."""

from __future__ import annotations

import sys

import pytest

import forestcoll.mscclpp.fallback as fallback
from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportError, ExportOptions, export_mscclpp
from forestcoll.mscclpp.floor import fits_nowhere, lowering_for
from forestcoll.mscclpp.lower import Lowering
from forestcoll.mscclpp.plan import write_plan
from forestcoll.topology import import_topology


@pytest.fixture(scope="module")
def cube():
    topo = import_topology("hypercube:dim=3").topology
    return topo, {coll: generate(topo, coll, k=2) for coll in ("allreduce", "allgather")}


@pytest.fixture
def lowerings(monkeypatch):
    """The number of Lowering objects made so far (a list holding one count)."""
    made = [0]
    init = Lowering.__init__

    def counted(self, *args, **kwargs):
        made[0] += 1
        init(self, *args, **kwargs)
    monkeypatch.setattr(Lowering, "__init__", counted)
    return made


def _outcome(sched, topo, opts: ExportOptions, lowering: Lowering | None = None) -> tuple[str, ...]:
    try:
        r = export_mscclpp(sched, topo, opts, lowering=lowering)
    except ExportError as exc:
        return ("error", str(exc))
    return (r.layout, str(r.stats.threadblocks_per_gpu), write_plan(r.plan), *r.notes)


def test_build_is_built_once():
    topo = import_topology("hypercube:dim=3").topology
    low = Lowering(generate(topo, "allreduce", k=1), topo, outofplace=False)
    acts = low.build()
    assert acts and low.build() is acts and len(low.build()) == len(acts)


@pytest.mark.parametrize("coll", ["allreduce", "allgather"])
def test_given_lowering_gives_the_same_export(cube, coll):
    topo, scheds = cube
    sched = scheds[coll]
    layouts = ("auto", "edge", "mixed", "level", "source") + (("shared",) if coll == "allreduce" else ())
    for layout in layouts:
        for mx in (6, 10, 16, 64):
            for inplace in (True, False):
                opts = ExportOptions(layout=layout, max_threadblocks=mx, check=False, inplace=inplace)
                low = lowering_for(sched, topo, opts)
                nowhere = fits_nowhere(sched, topo, opts, low)  # builds its actions, as the fallback does
                got = _outcome(sched, topo, opts, low)
                assert got == _outcome(sched, topo, opts), (layout, mx, inplace)
                assert not nowhere or got[0] == "error"


def test_export_lowers_once_where_the_first_layout_fits(cube, lowerings):
    topo, scheds = cube
    export_mscclpp(scheds["allreduce"], topo, ExportOptions(check=False, max_threadblocks=10**4))
    assert lowerings[0] == 1  # the floors' actions serve the 'edge' layout (it lowered twice before)
    opts = ExportOptions(check=False, max_threadblocks=10**4)
    low = lowering_for(scheds["allreduce"], topo, opts)
    fits_nowhere(scheds["allreduce"], topo, opts, low)
    export_mscclpp(scheds["allreduce"], topo, opts, lowering=low)
    assert lowerings[0] == 2  # the one made above, taken over


def test_fallback_lowers_each_k_once(lowerings):
    topo = import_topology("hypercube:dim=3").topology
    sched = generate(topo, "allreduce", k=8)  # 64 blocks per GPU in 'edge'; k = 4 / 2 / 1 need 32 / 32 / 16
    opts = ExportOptions(check=False, max_threadblocks=32)
    made, exported = [], {}

    def gen(*args, **kwargs):
        made.append(kwargs["k"])
        return generate(*args, **kwargs)
    mp = pytest.MonkeyPatch()
    mp.setattr(sys.modules["forestcoll.generate"], "generate", gen)
    try:
        found = fallback.fitting_powers(topo, "allreduce", sched, opts, exported)
    finally:
        mp.undo()
    assert sorted(found) == [1, 2, 4] and made == [4, 2, 1]
    assert lowerings[0] == len(made)  # one lowering per k: floored, then exported (three before)
    assert all(write_plan(exported[k].plan) == write_plan(export_mscclpp(found[k], topo, opts).plan) for k in found)


def test_a_lowering_not_fresh_is_refused(cube):
    topo, scheds = cube
    opts = ExportOptions(check=False, max_threadblocks=10**4)
    low = lowering_for(scheds["allreduce"], topo, opts)
    export_mscclpp(scheds["allreduce"], topo, opts, lowering=low)
    with pytest.raises(ValueError, match="fresh lowering"):  # taken: its actions are re-keyed
        export_mscclpp(scheds["allreduce"], topo, opts, lowering=low)
    for other, o in ((scheds["allgather"], opts), (scheds["allreduce"], ExportOptions(check=False, inplace=False))):
        with pytest.raises(ValueError, match="fresh lowering"):
            export_mscclpp(other, topo, o, lowering=lowering_for(scheds["allreduce"], topo, opts))
