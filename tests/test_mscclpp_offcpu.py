"""Plans of trees packed without the CPUs (mscclpp/offcpu.py): ``generate --format mscclpp`` races the optimum's plan
against the same optimum packed without the CPUs (the MI300 dump's trees join GPUs of one box through them), and
keeps the faster plan at the design size; fabrics without such detours write what they wrote before."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import cli, shared_file

from forestcoll.generate import generate
from forestcoll.msccl.detours import cpu_detours
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp, write_generated_plan, write_mscclpp
from forestcoll.mscclpp.offcpu import off_cpu_rival, race_fallback, race_plans
from forestcoll.mscclpp.plan import read_plan, write_plan
from forestcoll.topology import load_topology


def _mi300(nodes: int):
    return load_topology(str(shared_file("data", "nccl-topo", "topo_8p_940.xml")), {"nodes": str(nodes), "fabric": "rail"})


def _rates(*values: float):
    """A plan_rate giving ``values`` in turn (race_plans asks the optimum's plan first, then its rival's)."""
    given = list(values)
    return lambda plan, size: given.pop(0)


@pytest.mark.parametrize("collective", ["allgather", pytest.param("allreduce", marks=pytest.mark.slow)])
def test_the_off_cpu_plan_is_written_when_it_simulates_faster(tmp_path, collective):
    """Two MI300 boxes, plans ranked at 1 GiB by the simulator: the optimal k=8's trees go through the CPUs, its
    packing without them simulates faster (allgather 401.3 against 383.2 GB/s; allreduce 199.3 against 194.4; at 16 MiB
    the optimum's plans are the faster since port signals ride right behind their puts: 179.4 against 176.7, 111.9
    against 110.9), and that plan is the one written, self-checked."""
    from forestcoll.simulate.mscclpp import plan_rate

    topo = _mi300(2)
    opts = ExportOptions(max_threadblocks=304, design_size=1 << 30, layout="edge")  # auto's; no layout race
    path = tmp_path / "p.json"
    sched, result = write_generated_plan(topo, collective, str(path), options=opts, plan_rate=plan_rate(topo))
    assert sched.k == 8 and cpu_detours(topo, sched) == 0 and sched.algbw == sched.bound_algbw
    assert cpu_detours(topo, generate(topo, collective)) > 0
    assert result.checks and result.notes[0].startswith("the optimal k=8's trees join GPUs of one box through a CPU")
    assert result.notes[0].endswith(": taken") and "at 1GiB against" in result.notes[0]
    assert path.read_text() == write_plan(export_mscclpp(sched, topo, replace(opts, check=False)).plan)


def test_the_optimum_is_kept_when_its_plan_is_as_fast(tmp_path):
    """The race keeps the optimum's plan on a tie (and when slower): the file is what write_mscclpp writes for it."""
    topo = _mi300(2)
    opts = ExportOptions(max_threadblocks=304, design_size=16 << 20, check=False, layout="edge")  # no layout race
    optimal = generate(topo, "allgather")
    for rates in ((2.0, 2.0), (2.0, 1.0)):
        path = tmp_path / "p.json"
        sched, result = write_generated_plan(topo, "allgather", str(path), options=opts, plan_rate=_rates(*rates))
        assert sched.algbw == optimal.algbw and cpu_detours(topo, sched) == cpu_detours(topo, optimal) > 0
        assert result.notes[0].endswith("against 2.0 (edge layout, 35 thread blocks per GPU against 35): not taken")
        assert path.read_text() == write_plan(write_mscclpp(optimal, str(tmp_path / "q.json"), topo, opts).plan)


def test_a_rival_that_does_not_fit_is_not_taken():
    """The optimum's plan (exported here within 304 blocks) against a rival whose plan needs 29 blocks when 24 are
    allowed: the optimum is kept, nothing is simulated, and the note says why."""
    topo = _mi300(2)
    optimal = generate(topo, "allgather")
    mine = export_mscclpp(optimal, topo, ExportOptions(max_threadblocks=304, check=False))
    chosen, plan, note = race_plans(topo, optimal, mine, off_cpu_rival(topo, optimal, True),
                                    ExportOptions(max_threadblocks=24), _rates())
    assert chosen is optimal and plan is mine
    assert note.endswith("packed again without the CPUs (k=8, the same exact rate), its plan does not fit (allgather k=8 "
                         "needs 29 thread blocks per GPU even at the 'level' layout, more than the 24 a GPU runs at "
                         "once): not taken")


def test_no_rival_without_detours_nor_with_a_given_k(tmp_path):
    """Fabrics whose trees take no CPU detour (no CPU switch at all on the built-ins) race nothing; a given k is
    written as it is, detours and all."""
    cube = load_topology("hypercube:dim=3")
    assert off_cpu_rival(cube, generate(cube, "allgather"), True) is None
    topo = _mi300(2)
    sched, result = write_generated_plan(topo, "allgather", str(tmp_path / "p.json"), k=8, plan_rate=_rates(),
                                         options=ExportOptions(max_threadblocks=304, check=False))
    assert cpu_detours(topo, sched) > 0 and not any("packed again without the CPUs" in n for n in result.notes)


def test_the_fallback_races_the_off_cpu_packings():
    """When the optimal k does not fit, the fitting k's and the optimum are offered packed without the CPUs too: on
    two MI300 boxes only the optimum (k=8) has detours; its rival replaces the chosen k=4 when its plan is faster,
    and not when it is slower or does not fit."""
    topo = _mi300(2)
    optimal = generate(topo, "allgather")
    four = generate(topo, "allgather", k=4)
    opts = ExportOptions(max_threadblocks=304, design_size=16 << 20, check=False)
    exported, rates = {4: export_mscclpp(four, topo, opts)}, {4: 1.0}
    chosen, phrase = race_fallback(topo, optimal, four, {4: four}, exported, rates, opts, _rates(2.0))
    assert chosen.k == 8 and cpu_detours(topo, chosen) == 0 and rates == {4: 1.0, 8: 2.0} and set(exported) == {4, 8}
    assert phrase == ("; the trees packed again without the CPUs where they join GPUs of one box through one (the same "
                      "exact rate), plans at 16MiB: k=8 2.0, k=8 taken")
    exported, rates = {4: exported[4]}, {4: 1.0}
    chosen, phrase = race_fallback(topo, optimal, four, {4: four}, exported, rates, opts, _rates(0.5))
    assert chosen is four and phrase.endswith("plans at 16MiB: k=8 0.5, not taken") and set(exported) == {4}
    small = replace(opts, max_threadblocks=24)  # the k=8 plans need 30 and 29 thread blocks
    chosen, phrase = race_fallback(topo, optimal, four, {4: four}, exported, rates, small, _rates())
    assert chosen is four and phrase.endswith("k=8 does not fit, not taken") and set(exported) == {4}


def test_generate_falls_back_to_the_off_cpu_optimum_that_fits(tmp_path):
    """Two MI300 boxes in 29 thread blocks: the optimal k=8's plan needs 30, the same optimum packed without the CPUs
    29; among the fitting powers of two k=4, 2 and 1 tie at 16 MiB (165.0 GB/s; the larger k is taken), the off-CPU
    k=8 plan is faster (176.7, the exact optimum), and it is written."""
    from forestcoll.simulate.mscclpp import plan_rate

    topo = _mi300(2)
    path = tmp_path / "p.json"
    opts = ExportOptions(max_threadblocks=29, design_size=16 << 20, check=False)
    sched, result = write_generated_plan(topo, "allgather", str(path), options=opts, plan_rate=plan_rate(topo))
    assert sched.k == 8 and cpu_detours(topo, sched) == 0 and result.stats.threadblocks_per_gpu == 29
    assert result.notes[0].startswith("the optimal k=8 does not fit: allgather k=8 needs 30 thread blocks per GPU")
    assert ("; exported k=8, packed without the CPUs, faster than k=4, the fastest of the powers of two below it whose "
            "plans fit, plans simulated at 16MiB (165.0 GB/s; k=2 165.0, k=1 165.0); the trees packed again without the "
            "CPUs where they join GPUs of one box through one (the same exact rate), plans at 16MiB: k=8 176.7, k=8 "
            "taken; ") in result.notes[0]
    assert result.notes[0].endswith("its trees reach 100.0% of the bound")
    assert path.read_text() == write_plan(export_mscclpp(sched, topo, opts).plan)


@pytest.mark.slow
def test_generate_writes_the_off_cpu_plan_on_four_mi300_boxes(tmp_path):
    """The whole command on the MI300 dump x4 rail (allgather, bound 396.4 GB/s, 304 resident blocks): the optimum's
    plan 359.0 GB/s at 1 GiB (0.906, before the port flush and port-channel model; not simulated: its bound, 361.4,
    shows it loses), the off-CPU plan 380.8 (0.961), whose level layout with half units (383.9, 0.968) is written."""
    dump = shared_file("data", "nccl-topo", "topo_8p_940.xml")
    path = tmp_path / "p.json"
    code, out, err = cli("generate", str(dump), "--nodes", "4", "--fabric", "rail", "-c", "allgather", "--format",
                         "mscclpp", "--no-check", "-o", str(path))
    assert code == 0, err
    assert ("note       the optimal k=8's trees join GPUs of one box through a CPU (96 edges), which the executor sends "
            "over their direct link; packed again without the CPUs (k=8, the same exact rate), its plan simulates 380.8 "
            "GB/s at 1GiB against at most 361.4 (edge layout, 178 thread blocks per GPU against 160): taken") in out
    assert ("note       layouts raced, plans at 1GiB: edge 380.8 (178 thread blocks per GPU), source 380.8 (115), level "
            "383.2 (79); level taken; then half units for pieces of several chunks, 1GiB: 383.9 GB/s (taken)") in out
    assert read_plan(path).gpus


@pytest.mark.slow
def test_the_off_cpu_ll_plan_on_four_mi300_boxes_passes_its_self_check():
    """MI300 dump x4 rail, allreduce: the optimum packed without the CPUs (k=8, what ``generate --sizes`` ranks as
    ``forestcoll-offcpu``) exported as LL.  Its GPUs use different numbers of packet slots (6 GPUs 4284 chunks, 26
    GPUs 4288); a sender puts packets at its own double-buffer offset, so until every GPU got the largest scratch
    (d1248f4) the plan failed its self-check ("gpu 0 tb 19 ops[1] (respkt) (call 2): waits for packets (flag 2)")
    and ``--sizes`` wrote the Simple plan for the LL range instead."""
    topo = _mi300(4)
    rival = off_cpu_rival(topo, generate(topo, "allreduce"), True)
    assert rival is not None and rival.k == 8
    r = export_mscclpp(rival, topo, ExportOptions(protocol="LL", max_message_size=1 << 20))
    assert r.checks and len({g.scratch_chunks for g in r.plan.gpus}) == 1
