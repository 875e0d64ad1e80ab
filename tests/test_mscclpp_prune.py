"""The races of ``generate --format mscclpp`` skip a plan whose bound shows it cannot win
(:mod:`forestcoll.simulate.plan_bound`, ``plan_rate.ceiling``): the bound never exceeds the simulation, and a race that
skips writes the plan the race that simulates everything writes."""

from __future__ import annotations

import re
from functools import cache

import pytest
from conftest import program_link_bytes
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportError, ExportOptions, export_mscclpp, write_generated_plan
from forestcoll.mscclpp.layouts import once
from forestcoll.mscclpp.offcpu import race_fallback, race_plans
from forestcoll.mscclpp.plan import write_plan
from forestcoll.simulate.mscclpp import plan_rate, simulate_plan
from forestcoll.simulate.network import build_network
from forestcoll.simulate.plan_bound import plan_link_bytes, plan_time_bound
from forestcoll.topology import load_topology

FABRICS = ["hypercube:dim=3", "dgx-1", "mi300x", "torus:dims=3x3", "ring:n=6", "dgx-a100:nodes=2"]
CUBE = "hypercube:dim=3"  # allgather k=3: edge, source and level plans differ; pieces of 2 chunks


@cache
def _fabric(spec: str):
    topo = load_topology(spec)
    return topo, build_network(topo)


@cache
def _sched(spec: str, collective: str, k: int | None):
    return generate(_fabric(spec)[0], collective, k=k)


@settings(max_examples=40, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.sampled_from(FABRICS), collective=st.sampled_from(["allgather", "allreduce", "reducescatter"]),
       k=st.sampled_from([None, 1, 2]), layout=st.sampled_from(["auto", "edge", "mixed", "source", "level", "LL"]),
       fine=st.booleans(), size=st.sampled_from([1 << 16, 1 << 20, 3 << 20, 16 << 20]))
def test_the_bound_never_exceeds_the_simulation(spec, collective, k, layout, fine, size):
    """plan_time_bound is at most the simulated time, on fabrics with and without port channels, every layout,
    Simple and LL plans, half units, several sizes."""
    topo, net = _fabric(spec)
    ll = layout == "LL"
    opts = ExportOptions(check=False, layout="auto" if ll else layout, protocol="LL" if ll else "Simple",
                         fine_units=fine and not ll, max_threadblocks=1024)
    try:
        plan = export_mscclpp(_sched(spec, collective, k), topo, opts).plan
    except ExportError:
        assume(False)
    assert plan_time_bound(net, plan, size) <= simulate_plan(net, plan, size).time_s * (1 + 1e-9)


def test_the_bound_is_the_busiest_link_where_that_binds():
    """dgx-a100:nodes=2 allreduce at 1 GiB: every layout's plan is bounded by the NICs, the trees' exact bound
    (173.3 GB/s); the plans simulate 171.3."""
    topo, net = _fabric("dgx-a100:nodes=2")
    plan = export_mscclpp(_sched("dgx-a100:nodes=2", "allreduce", None), topo, ExportOptions(check=False)).plan
    assert (1 << 30) / plan_time_bound(net, plan, 1 << 30) / 1e9 == pytest.approx(520 / 3, rel=1e-9)
    assert plan_rate(topo).ceiling(plan, 1 << 30) == pytest.approx(520 / 3, rel=1e-9)


def _by_text(rates: dict[str, float], ceilings: dict[str, float] | None):
    """A plan_rate giving each plan (known by its text) its rate (1.0 to any other), with ``ceiling`` (each plan's
    rate times ``ceilings[text]``, 1.0 to any other) unless ``ceilings`` is None; the texts it simulated."""
    asked: list[str] = []

    def rate(plan, size: int) -> float:
        text = write_plan(plan)
        asked.append(text)
        return rates.get(text, 1.0)
    if ceilings is not None:
        rate.ceiling = lambda plan, size: (rates.get(write_plan(plan), 1.0)  # type: ignore[attr-defined]
                                           * ceilings.get(write_plan(plan), 1.0))
    return rate, asked


def _rates_out(note: str) -> str:
    """A note without its rates (simulated, or "at most" a skipped plan's ceiling): the layouts raced, their thread
    blocks and what was taken remain, to compare the note of a race that skips with the full race's."""
    note = re.sub(r"half units for pieces of several chunks (at most )?[0-9.]+ GB/s, not taken",
                  "half units not taken", note)
    return re.sub(r"\b([a-z]+) (at most )?[0-9.]+ \(", r"\1 (", note)


@cache
def _texts(collective: str) -> list[str]:
    """The texts of the hypercube's plans in each layout, without and with half units."""
    sched = _sched(CUBE, collective, None)
    layouts = ("edge", "shared", "mixed", "source", "level") if collective == "allreduce" else (
        "edge", "mixed", "source", "level")
    return [write_plan(export_mscclpp(sched, _fabric(CUBE)[0], ExportOptions(check=False, layout=x, fine_units=f)).plan)
            for x in layouts for f in (False, True)]


RATES = st.sampled_from([1.0, 1.0 + 1e-12, 1.0 + 1e-7, 1.01, 0.99, 0.5, 2.0])
SLACKS = st.sampled_from([1.0, 1.0 + 1e-7, 1.0 + 1e-6, 1.005, 1.5])


@pytest.mark.slow
@settings(max_examples=40, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(rates=st.lists(RATES, min_size=6, max_size=6), slacks=st.lists(SLACKS, min_size=6, max_size=6),
       collective=st.sampled_from(["allgather", "allreduce"]))
def test_a_race_that_skips_writes_what_the_full_race_writes(tmp_path, rates, slacks, collective):
    """Every layout's plan and its half-units plan get rates (ties, roundings, faster, slower) and ceilings at or
    above them (as tight as the rate itself): the race that skips plans by their ceilings writes the same bytes as
    the race that simulates every plan, simulates a subset of what it simulates, and says the same apart from the
    plans it skipped."""
    _same_race(tmp_path, rates, slacks, collective)


@pytest.mark.parametrize("rates,slacks", [
    ([1.0, 1.0, 1.0 + 1e-12, 0.5, 2.0, 1.01], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),  # ties, a rounding, a winner, tight
    ([1.01, 0.99, 1.0 + 1e-7, 1.0, 0.5, 1.0], [1.0 + 1e-6, 1.005, 1.0, 1.5, 1.0 + 1e-7, 1.0]),
    ([0.5, 2.0, 1.0, 1.0 + 1e-7, 1.01, 0.99], [1.0, 1.0, 1.0 + 1e-7, 1.0, 1.0, 1.005])])
def test_a_race_that_skips_writes_what_the_full_race_writes_here(tmp_path, rates, slacks):
    """The same on three chosen cases (allgather): the fast tier's share of the hypothesis test above."""
    _same_race(tmp_path, rates, slacks, "allgather")


def _same_race(tmp_path, rates: list[float], slacks: list[float], collective: str) -> None:
    topo = _fabric(CUBE)[0]
    texts = _texts(collective)
    rate_of = {t: rates[i % 6] * (1 + i // 6) for i, t in enumerate(texts)}
    ceiling_of = {t: slacks[i % 6] for i, t in enumerate(texts)}
    full, asked_full = _by_text(rate_of, None)
    pruned, asked_pruned = _by_text(rate_of, ceiling_of)
    opts = ExportOptions(check=False)
    _, a = write_generated_plan(topo, collective, str(tmp_path / "a.json"), options=opts, plan_rate=full)
    _, b = write_generated_plan(topo, collective, str(tmp_path / "b.json"), options=opts, plan_rate=pruned)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert a.layout == b.layout and set(asked_pruned) <= set(asked_full)
    assert [_rates_out(n) for n in b.notes] == [_rates_out(n) for n in a.notes]


@pytest.mark.parametrize("tight", [False, True])
@pytest.mark.parametrize("order", [(2.0, 1.0), (1.0, 2.0), (2.0, 2.0)])
def test_the_off_cpu_race_skips_the_plan_that_loses(order, tight):
    """race_plans simulates first the plan whose ceiling is higher and skips the other when its ceiling shows it
    loses; the schedule taken is the full race's (ties keep the optimum)."""
    topo = load_topology(CUBE)
    mine_s, rival = generate(topo, "allgather"), generate(topo, "allgather", k=2)
    opts = ExportOptions(check=False, layout="edge")
    mine = export_mscclpp(mine_s, topo, opts)
    alt = export_mscclpp(rival, topo, opts)
    here, there = order
    rate_of = {write_plan(mine.plan): here, write_plan(alt.plan): there}
    full, _ = _by_text(rate_of, None)
    pruned, asked = _by_text(rate_of, {t: 1.0 if tight else 1.001 for t in rate_of})
    a = race_plans(topo, mine_s, mine, rival, opts, full)
    b = race_plans(topo, mine_s, mine, rival, opts, pruned)
    assert a[0] is b[0] and a[1].plan == b[1].plan
    assert len(asked) == (2 if here == there else 1)
    if here != there:
        assert "at most" in b[2] and b[2].endswith(a[2].rsplit(")", 1)[1])


@pytest.mark.parametrize("there", [0.5, 1.0, 2.0])
def test_the_fallback_race_skips_a_plan_that_loses(monkeypatch, there):
    """race_fallback does not simulate an off-CPU plan whose ceiling shows it cannot beat the chosen plan's rate
    (here 1.0: a plan as fast is not taken either); one that may win is simulated, and taken when faster."""
    import forestcoll.mscclpp.offcpu as offcpu

    topo = load_topology(CUBE)
    optimal, two = generate(topo, "allgather"), generate(topo, "allgather", k=2)
    monkeypatch.setattr(offcpu, "off_cpu_rival", lambda topology, sched, optimal, **kw: two if optimal else None)
    opts = ExportOptions(check=False)
    text = write_plan(export_mscclpp(two, topo, opts).plan)
    for slack in (1.0, 1.5):
        rate, asked = _by_text({text: there}, {text: slack})
        exported, rates = {optimal.k: None}, {optimal.k: 1.0}
        chosen, phrase = race_fallback(topo, optimal, optimal, {}, exported, rates, opts, rate)
        skipped = there * slack * (1 + 1e-6) <= 1.0  # layouts.SLACK: rounding room for the engine
        assert (chosen is two) == (there > 1.0) and len(asked) == (0 if skipped else 1)
        assert phrase.endswith((f"k=2 at most {there * slack:.1f}" if skipped else f"k=2 {there:.1f}")
                               + (", k=2 taken" if there > 1.0 else ", not taken"))


def test_once_keeps_the_ceiling():
    """The memo of a race's rates passes the ceiling on, so the races behind it can skip plans."""
    topo, _net = _fabric(CUBE)
    rate = plan_rate(topo)
    memo = once(rate)
    plan = export_mscclpp(_sched(CUBE, "allgather", None), topo, ExportOptions(check=False)).plan
    assert memo.ceiling(plan, 1 << 20) == rate.ceiling(plan, 1 << 20)


@pytest.mark.parametrize("spec,collective,k,layout", [
    ("dgx-a100:nodes=2", "allreduce", None, "auto"), ("dgx-a100:nodes=2", "allgather", None, "auto"),
    (CUBE, "allgather", 3, "source"), (CUBE, "allgather", 3, "level"), (CUBE, "allgather", 3, "LL"),
    (CUBE, "allreduce", 2, "LL"), ("ring:n=6", "reducescatter", None, "mixed")])
def test_the_bound_and_the_builder_count_the_same_bytes(spec, collective, k, layout):
    """plan_link_bytes (the bound's bytes per link) equals what the simulator's program of the plan moves over each
    link, at sizes that fill a pipeline's units and that do not: both read the plan through one PlanReader.  The one
    exception is an LL plan's ``respkt`` (a reduction whose packets go on to peers), whose remote writes the bound
    does not count: there it stays below the program on every link (still a lower bound)."""
    from forestcoll.simulate.mscclpp import mscclpp_program

    topo, net = _fabric(spec)
    ll = layout == "LL"
    opts = ExportOptions(check=False, layout="auto" if ll else layout, protocol="LL" if ll else "Simple",
                         max_threadblocks=1024)
    plan = export_mscclpp(_sched(spec, collective, k), topo, opts).plan
    unmodelled = any(op.name == "respkt" for g in plan.gpus for tb in g.threadblocks for op in tb.ops)
    assert unmodelled == (collective == "allreduce" and ll)
    for size in (1 << 20, 3 << 20, 1 << 30):
        prog = mscclpp_program(plan, net, size)
        moved = program_link_bytes(prog, len(net.capacity))
        counted = plan_link_bytes(net, plan, size)
        assert sum(moved) > 0
        if unmodelled:
            assert all(x <= y * (1 + 1e-9) for x, y in zip(counted, moved)) and sum(counted) < sum(moved)
        else:
            assert counted == pytest.approx(moved, rel=1e-9, abs=1e-6)
