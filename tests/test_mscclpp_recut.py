"""An MSCCL++ plan recut for other sizes (mscclpp/recut.py) is the plan the export makes for them: the same plan,
units, layout, notes, stats (or the same refusal), over collectives, layouts, thread-block limits, lanes, protocols,
fine units, design sizes and size ranges; ``Cuts`` exports each (schedule, options but the size fields) once; and
``generate --sizes --format mscclpp`` writes the same files and prints the same lines as exporting every plan."""

from __future__ import annotations

import functools
import hashlib
import os
import re
from dataclasses import replace

import pytest

from forestcoll.errors import UsageError
from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportError, ExportOptions, export_mscclpp
from forestcoll.mscclpp.plan import write_plan
from forestcoll.mscclpp.recut import Cuts, recut, restamp
from forestcoll.topology import import_topology

MiB = 1 << 20
SIZES = [  # (design_size, min_message_size, max_message_size)
    (None, 0, None), (64 << 10, 0, None), (MiB, 0, 2 * MiB - 1), (3 * MiB, MiB, None), (16 * MiB, 0, 16 * MiB - 1),
    (1 << 30, 16 * MiB, None), (5 * MiB, 0, 64 * MiB), (None, 0, 300 << 10), (2 << 20, 0, (1 << 32) - 2)]


def _outcome(get) -> tuple:
    try:
        r = get()
    except (ExportError, UsageError) as exc:
        return (type(exc).__name__, str(exc))
    return (r.layout, r.stats, r.chunks_per_root, tuple(sorted(r.units.items())), r.inbox_port_edges,
            tuple(r.notes), r.plan, write_plan(r.plan))


@functools.cache
def _sched(spec: str, coll: str, k: int):
    topo = import_topology(spec).topology
    return topo, generate(topo, coll, k=k)


@pytest.fixture
def scheds():
    class Lazy:
        def __getitem__(self, key):
            return _sched(*key)
    return Lazy()


FAST = {("hypercube:dim=3", "allreduce", 2, 0), ("hypercube:dim=3", "allreduce", 2, 1),
        ("hypercube:dim=3", "allreduce", 2, 3), ("hypercube:dim=3", "allgather", 1, 4),
        ("hypercube:dim=3", "reduce_scatter", 2, 5), ("hypercube:dim=3", "broadcast", 1, 0)}
OPTS = (ExportOptions(), ExportOptions(protocol="LL"), ExportOptions(layout="level"), ExportOptions(max_threadblocks=6),
        ExportOptions(lanes=2, fine_units=True), ExportOptions(inplace=False, layout="source"))
BIG_OPTS = (ExportOptions(), ExportOptions(protocol="LL"), ExportOptions(max_threadblocks=24),
            ExportOptions(layout="edge", slice_bytes=256 << 10, max_slices=4))
CASES = [pytest.param("hypercube:dim=3", c, k, o, marks=() if (("hypercube:dim=3", c, k, i) in FAST) else
                      pytest.mark.slow) for c in ("allreduce", "allgather", "reduce_scatter", "broadcast")
         for k in (1, 2) for i, o in enumerate(OPTS)]
CASES += [pytest.param("dgx-a100:nodes=2", c, k, o, marks=pytest.mark.slow) for c in ("allreduce", "allgather")
          for k in (1, 4) for o in BIG_OPTS]


@pytest.mark.parametrize("spec,coll,k,opts", CASES)
def test_a_recut_plan_is_the_export_for_its_sizes(scheds, spec, coll, k, opts):
    topo, sched = scheds[(spec, coll, k)]
    cuts = Cuts(topo)
    for design, lo, hi in SIZES:
        o = replace(opts, design_size=design, min_message_size=lo, max_message_size=hi, check=False,
                    name=None if design is None else f"p{design}")
        assert _outcome(lambda o=o: cuts.export(sched, o)) == _outcome(lambda o=o: export_mscclpp(sched, topo, o)), o
    assert cuts.exports == 1  # one export, every other size recut


def test_recut_changes_only_the_units_and_the_size_fields(scheds):
    topo, sched = scheds[("hypercube:dim=3", "allreduce", 2)]
    small = export_mscclpp(sched, topo, design_size=MiB, check=False)
    big = recut(small, sched, ExportOptions(design_size=1 << 30, max_message_size=(1 << 31)))
    assert big.units != small.units  # the case exercises the restamp
    assert big.plan == replace(restamp(small.plan, big.units), max_message_size=1 << 31)
    assert restamp(small.plan, small.units) == small.plan


def test_cuts_keep_a_refusal(scheds):
    topo, sched = scheds[("hypercube:dim=3", "allreduce", 2)]
    cuts = Cuts(topo)
    opts = ExportOptions(max_threadblocks=2, check=False)
    with pytest.raises(ExportError) as direct:
        export_mscclpp(sched, topo, opts)
    for design in (MiB, 1 << 30):
        with pytest.raises(ExportError) as cut:
            cuts.export(sched, replace(opts, design_size=design))
        assert str(cut.value) == str(direct.value)
    assert cuts.exports == 1


def test_cuts_write_is_write_mscclpp(scheds, tmp_path):
    from forestcoll.mscclpp.export import write_mscclpp

    topo, sched = scheds[("hypercube:dim=3", "allreduce", 2)]
    cuts = Cuts(topo)
    cuts.export(sched, ExportOptions(check=False))
    for proto, design in (("Simple", 4 * MiB), ("LL", None)):
        opts = ExportOptions(protocol=proto, design_size=design, min_message_size=MiB, max_message_size=8 * MiB,
                             name="x")
        a = cuts.write(sched, str(tmp_path / "a.json"), opts)
        b = write_mscclpp(sched, str(tmp_path / "b.json"), topo, opts)
        assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
        assert a.notes == b.notes and [re.sub(r"[\d.]+ s\)", "", c) for c in a.checks] == \
            [re.sub(r"[\d.]+ s\)", "", c) for c in b.checks] and a.checks


def _run(cli, out, args) -> dict[str, str]:
    code = cli(["generate", *args, "-o", str(out)])
    assert code == 0
    files = {f: hashlib.sha256((out / f).read_bytes()).hexdigest() for f in sorted(os.listdir(out))}
    return files


@pytest.mark.parametrize("coll", [pytest.param("allreduce", marks=pytest.mark.slow), "allgather"])
def test_generate_sizes_writes_what_exporting_every_plan_writes(tmp_path, capsys, monkeypatch, coll):
    """The CLI with the recut plans against the CLI with every ``Cuts`` call an export of its own."""
    import forestcoll.mscclpp.recut as rc
    from forestcoll.cli import main

    args = ["ring:n=4", "--collective", coll, "--sizes", "64KiB,1MiB,16MiB,1GiB", "--format", "mscclpp", "--jobs", "1"]
    got = _run(main, tmp_path / "a", args)
    text = capsys.readouterr().out

    def export(self, sched, opts):
        opts.validate()
        return export_mscclpp(sched, self.topology, replace(opts, check=False))
    monkeypatch.setattr(rc.Cuts, "export", export)
    want = _run(main, tmp_path / "b", args)
    again = capsys.readouterr().out

    def masked(s: str) -> str:
        return re.sub(r"[\d.]+ s, [\d.]+ s CPU", "T", s.replace(str(tmp_path / "a"), "D").replace(str(tmp_path / "b"),
                                                                                                   "D"))
    assert got == want and masked(text) == masked(again)


def test_a_plan_and_its_range_cut_run_the_same_program(scheds):
    """export_plans_by_size reuses a plan's rates for its range cut when they differ only in the size fields
    (plan_sizes._same_program): the simulator reads neither field; a range that caps the units is another program."""
    from forestcoll.simulate.mscclpp import simulate_plan
    from forestcoll.simulate.network import build_network
    from forestcoll.simulate.plan_sizes import _same_program

    topo, sched = scheds[("hypercube:dim=3", "allreduce", 2)]
    cuts = Cuts(topo)
    free = cuts.export(sched, ExportOptions(design_size=4 * MiB)).plan
    ranged = cuts.export(sched, ExportOptions(design_size=4 * MiB, min_message_size=MiB, max_message_size=8 * MiB - 1,
                                              name="r")).plan
    capped = cuts.export(sched, ExportOptions(design_size=4 * MiB, max_message_size=(1 << 32) - 2)).plan
    tiny = cuts.export(sched, ExportOptions(design_size=64 << 10)).plan
    assert ranged != free and _same_program(ranged, free) and not _same_program(tiny, free)
    net = build_network(topo)
    for size in (MiB, 4 * MiB):
        assert simulate_plan(net, ranged, size).algbw_gbps == simulate_plan(net, free, size).algbw_gbps
    assert _same_program(capped, free) == (capped.gpus == free.gpus)
