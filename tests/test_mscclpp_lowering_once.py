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


@pytest.mark.parametrize("coll,layouts,limits", [
    ("allgather", ("auto", "edge", "mixed", "level", "source"), (6, 16, 64)),
    ("allreduce", ("auto", "shared", "level"), (6, 64)),
    pytest.param("allreduce", ("auto", "edge", "mixed", "level", "source", "shared"), (6, 10, 16, 64),
                 marks=pytest.mark.slow)])
def test_given_lowering_gives_the_same_export(cube, coll, layouts, limits):
    topo, scheds = cube
    sched = scheds[coll]
    for layout in layouts:
        for mx in limits:
            for inplace in (True, False) if layout == "auto" else (True,):
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


@pytest.mark.parametrize("spec,coll,limit", [("hypercube:dim=3", "allreduce", 8), ("hypercube:dim=3", "allgather", 8),
                                             pytest.param("mi250:nodes=1", "reduce_scatter", 12,
                                                          marks=pytest.mark.slow)])
def test_fallback_writes_the_same_as_lowering_again(tmp_path, spec, coll, limit):
    """``generate --format mscclpp`` forced to fall back: the same k, plan file and notes whether the export takes
    the floors' lowering or lowers the schedule again (as before)."""
    import forestcoll.mscclpp.export as export
    from forestcoll.mscclpp.export import write_generated_plan
    from forestcoll.simulate.mscclpp import plan_rate

    topo = import_topology(spec).topology
    opts = ExportOptions(max_threadblocks=limit, design_size=1 << 22)
    plain = export.export_mscclpp

    given = []

    def lowering_again(*args, lowering=None, **kwargs):  # what the export did before: it ignores the one given
        given.append(lowering is not None)
        return plain(*args, **kwargs)
    outs = []
    for again in (False, True):
        mp = pytest.MonkeyPatch()
        if again:
            mp.setattr(export, "export_mscclpp", lowering_again)
        try:
            path = tmp_path / f"{again}.json"
            sched, result = write_generated_plan(topo, coll, str(path), options=opts, plan_rate=plan_rate(topo))
        finally:
            mp.undo()
        outs.append((sched.k, path.read_bytes(), result.notes))
    assert outs[0] == outs[1] and "does not fit" in outs[0][2][0] and any(given)
