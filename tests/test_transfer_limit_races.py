"""mi21: a candidate whose simulation the simulator refuses (above limits.MAX_SIM_TRANSFERS) loses its race instead of
failing the command, wherever candidates are simulated: the race (one process and the worker pool), the plan rates
of ``generate --format mscclpp`` (layouts, half units, the fallback's ranking), the per-size plans' own comparisons
and the MSCCL file rates.  Each test fails on bdadcd0, where the refusal escaped (tab20 guarded only the half
units)."""

from __future__ import annotations

import pytest

from forestcoll import limits
from forestcoll.errors import SimulationTooLarge
from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportOptions, write_generated_plan
from forestcoll.simulate.network import build_network
from forestcoll.simulate.race import Unsimulated, race, tree_lowering
from forestcoll.topology import load_topology

CUBE = "hypercube:dim=3"


def _refusing_big(contender, net, size, *slicing):
    """The trees of ``contender[1]``; refused above 1 MiB when ``contender[0]`` is "big" (as the builder refuses)."""
    if contender[0] == "big" and size > 1 << 20:
        raise SimulationTooLarge("the simulation needs more than 4,194,304 transfers")
    return tree_lowering(contender[1], net, size, *slicing)


def test_unsimulated_loses_and_says_so():
    rate = Unsimulated()
    import pickle

    assert rate == 0.0 and rate < 1e-300 and f"{rate:.1f}" == "not simulated (above the simulator's transfer limit)"
    assert isinstance(pickle.loads(pickle.dumps(rate)), Unsimulated)  # as a worker process sends it back


@pytest.mark.parametrize("workers", [1, 2])
def test_a_refused_contender_loses_the_race(workers):
    """One contender's program is refused at 1 GiB (the lowering raises as the builder does): it is pruned, the
    other wins; with the worker pool the same (the refusal is not retried in this process)."""
    from forestcoll.simulate.race_pool import RacePool

    topo = load_topology(CUBE)
    net = build_network(topo)
    sched = generate(topo, "allgather")

    cands = {"big": ("big", sched), "ok": ("ok", sched)}
    got = RacePool(net, workers).race(1 << 30, cands, lowering=_refusing_big, first="big")
    assert [r.algorithm for r in got.results] == ["ok"] and got.pruned == {"big": float("inf")}
    one = race(net, 1 << 30, cands, lowering=_refusing_big)
    assert [r.algorithm for r in one.results] == ["ok"] and one.best().time_s == got.best().time_s


def test_a_contender_refused_at_the_probe_size_loses():
    """Refused even at the link bound's probe size: an infinite bound, never simulated."""
    from forestcoll.simulate.race import link_per_byte

    topo = load_topology(CUBE)
    net = build_network(topo)

    def refusing(contender, net, size, *slicing):
        raise SimulationTooLarge("too large")

    assert link_per_byte(generate(topo, "allgather"), net, refusing, (float(1 << 20), 16)) == float("inf")
    got = race(net, 1 << 30, {"a": generate(topo, "allgather")}, lowering=refusing)
    assert got.results == [] and got.pruned == {"a": float("inf")}


def test_plan_rate_of_a_refused_plan(monkeypatch):
    from forestcoll.mscclpp.export import export_mscclpp
    from forestcoll.simulate.mscclpp import plan_rate

    topo = load_topology(CUBE)
    plan = export_mscclpp(generate(topo, "allgather"), topo, ExportOptions(check=False)).plan
    rate = plan_rate(topo)
    assert rate(plan, 1 << 20) > 0 and hasattr(rate, "ceiling")
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 1000)
    assert isinstance(rate(plan, 1 << 30), Unsimulated)


def test_generate_with_every_plan_simulation_refused(tmp_path, monkeypatch):
    """The layout race (auto's plan and every other layout), its half units and the plan's own rate at the design
    size all refused: generate writes what auto writes and says the rates were not simulated."""
    from forestcoll.mscclpp.export import write_mscclpp
    from forestcoll.mscclpp.plan import write_plan
    from forestcoll.simulate.mscclpp import plan_rate

    topo = load_topology(CUBE)
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 1000)
    chosen, result = write_generated_plan(topo, "allgather", str(tmp_path / "p.json"), plan_rate=plan_rate(topo))
    assert (tmp_path / "p.json").read_text() == write_plan(write_mscclpp(chosen, str(tmp_path / "q.json"), topo).plan)
    assert "edge not simulated (above the simulator's transfer limit)" in result.notes[0], result.notes


def test_the_fallback_ranking_with_refused_simulations(tmp_path, monkeypatch):
    """hypercube:dim=3 allreduce in 8 thread blocks: the optimal k=3 does not fit; every fitting k's plan is refused
    at 1 GiB, so the ranking ties at 'not simulated' and takes the largest k (k=2, as the plans rank it when
    simulated: test_mscclpp_fallback_prune)."""
    from forestcoll.simulate.mscclpp import plan_rate

    topo = load_topology(CUBE)
    opts = ExportOptions(max_threadblocks=8, check=False)
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 1000)
    chosen, result = write_generated_plan(topo, "allreduce", str(tmp_path / "a.json"), options=opts,
                                          plan_rate=plan_rate(topo))
    assert chosen.k == 2 and (tmp_path / "a.json").exists()
    assert "plans simulated at 1GiB (not simulated (above the simulator's transfer limit) GB/s" in result.notes[0]


def test_per_size_plans_with_refused_simulations(tmp_path, monkeypatch):
    """The per-size plans' own comparisons (LL against Simple, a size's cut against the middle size's) and the
    written plans' rates, every simulation refused: the Simple plans are written, their rates 'not simulated'."""
    from forestcoll.mscclpp.recut import Cuts
    from forestcoll.simulate.plan_sizes import export_plans_by_size, select_plans

    topo = load_topology("ring:n=4")
    net = build_network(topo)
    cands = {"forestcoll": generate(topo, "allgather")}
    cuts = Cuts(topo)
    sel, _rates, _note = select_plans(net, "allgather", [64 << 10, 1 << 20, 1 << 30], cands, cuts=cuts)
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 10)
    out = export_plans_by_size(net, sel, str(tmp_path), "allgather", ExportOptions(check=False), rates={}, cuts=cuts,
                               workers=2)
    assert out and all(r.path is not None and r.result.plan.protocol == "Simple" for r in out)
    assert all(isinstance(v, Unsimulated) for r in out for v in r.range.measured.values())


def test_msccl_file_rates_of_a_refused_file(monkeypatch):
    from forestcoll.msccl.export import export_msccl
    from forestcoll.simulate.msccl import file_rate

    topo = load_topology(CUBE)
    algo = export_msccl(generate(topo, "allgather")).algo
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 10)
    assert isinstance(file_rate(topo)(algo, 1 << 30), Unsimulated)
    shared: dict = {}
    rate = file_rate(topo, shared=shared)
    got, exact = rate.race(algo, 1 << 30, 1e-3)  # a rate to beat that lets its bounds pass: the program is built
    assert exact and isinstance(got, Unsimulated)


@pytest.mark.parametrize("fmt", ["mscclpp", "msccl"])
def test_a_size_where_every_candidate_is_refused_says_so(tmp_path, monkeypatch, fmt):
    """(Before: the refusal of the first candidate simulated escaped, with its hint about --size and --slice, which
    generate --sizes does not take.)"""
    from forestcoll.errors import UsageError
    from forestcoll.simulate.select import export_by_size

    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 10)
    with pytest.raises(UsageError, match=r"every candidate's (plan|file) simulation at 1GiB needs more than 10 "
                                         r"transfers, above forestcoll's limit; leave that size out of --sizes"):
        export_by_size("ring:n=4", "allgather", [1 << 30], str(tmp_path), format=fmt, workers=1)


def test_the_alltoall_port_race_with_refused_simulations(monkeypatch):
    """The driven flows against the whole fabric's rerouted (simulate/alltoall_ports.py), every plan refused: the
    command goes on (the driven flows are kept unless the others win; here they tie at 'not simulated')."""
    from test_mscclpp_ports import dual_port

    from forestcoll.alltoall.generate import generate_alltoall
    from forestcoll.mscclpp.ports import driven_ports
    from forestcoll.simulate.alltoall_ports import _rates, generate_for_executor

    topo = dual_port()
    opts = ExportOptions(inplace=False, max_threadblocks=132)
    sched = generate_alltoall(driven_ports(topo), chunks="auto").schedule
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 10)
    assert all(isinstance(r, Unsimulated) for r in _rates(sched, topo, build_network(topo), opts))
    assert generate_for_executor(topo, opts, chunks="auto", symmetry=True).ok
