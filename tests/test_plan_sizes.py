"""Per-size MSCCL++ plans (``generate --sizes --format mscclpp``) ranked by the plans' own simulated rates, and the
rates printed for each range are those of the plan written for it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import cli

from forestcoll.mscclpp.export import ExportOptions, export_mscclpp
from forestcoll.mscclpp.plan import read_plan
from forestcoll.simulate.mscclpp import simulate_plan
from forestcoll.simulate.network import load_network
from forestcoll.simulate.plan_sizes import select_plans
from forestcoll.simulate.select import candidate_schedules, export_by_size

SIZES = [64 << 10, 16 << 20]


def test_ranges_report_their_written_plans_rates(tmp_path):
    """Every size of every range: the rate given is the written plan's simulated rate (the trees' were given
    before: on ring:n=4 allreduce the Simple plan's 16 MiB rate is below its trees')."""
    out = export_by_size("ring:n=4", "allreduce", SIZES, str(tmp_path), format="mscclpp", workers=1)
    assert out.ok and any(n.startswith("ranked by the candidates' MSCCL++ plans") for n in out.notes)
    net = load_network("ring:n=4")
    seen = set()
    for r in out.ranges:
        plan = read_plan(r.path)
        for size, rate in r.range.measured.items():
            assert simulate_plan(net, plan, size).algbw_gbps == pytest.approx(rate, rel=1e-9)
            seen.add(size)
    assert seen >= set(SIZES)  # and the powers of two between where LL and Simple were compared


def test_the_fastest_plan_wins_at_each_size():
    """select_plans keeps, at each size, the candidate whose plan (Simple cut for that size, or LL up to 1 MiB)
    simulates fastest: checked against simulating every candidate's plans."""
    net = load_network("ring:n=4")
    cands = candidate_schedules(net.topology, net, "allreduce", sizes=SIZES, element_bytes=16)
    sel, rates, note = select_plans(net, "allreduce", SIZES, cands, margin=0.0)
    base = ExportOptions(check=False)
    for size in SIZES:
        best = {}
        for name, sched in cands.items():
            plans = [export_mscclpp(sched, net.topology, replace(base, design_size=size)).plan]
            if size <= 1 << 20:
                plans.append(export_mscclpp(sched, net.topology, replace(base, protocol="LL")).plan)
            best[name] = max(simulate_plan(net, p, size).algbw_gbps for p in plans)
        top = max(best.values())
        rng = next(r for r in sel.ranges if size in r.measured)
        assert best[rng.name] == pytest.approx(top, rel=1e-9) and rng.measured[size] == pytest.approx(top, rel=1e-9)
    assert "plan simulations run" in note and rates


def test_cli_prints_the_written_plans_rates(tmp_path):
    """The command line's "GB/s at" of a range is its plan's simulated rate."""
    code, out, err = cli("generate", "ring:n=4", "-c", "allreduce", "--sizes", "16MiB", "--format", "mscclpp",
                         "-o", str(tmp_path))
    assert code == 0, err
    (path,) = sorted(tmp_path.glob("*.json"))
    rate = simulate_plan(load_network("ring:n=4"), read_plan(path), 16 << 20).algbw_gbps
    assert f"GB/s at 16MiB {rate:.1f})" in out
    assert "ranked by the candidates' MSCCL++ plans simulated at each size" in out


def test_a_size_gets_its_own_cut_when_that_runs_faster(tmp_path):
    """ring:n=4 allreduce: the ring wins at 16 MiB, 256 MiB and 1 GiB; one Simple plan cut for 256 MiB runs 16 MiB
    more than 2% slower than a plan cut for 16 MiB, so 16 MiB gets its own plan: no written plan runs a size of its
    range more than CUT_MARGIN below that size's own cut."""
    from forestcoll.simulate.plan_sizes import CUT_MARGIN

    sizes = [16 << 20, 256 << 20, 1 << 30]
    out = export_by_size("ring:n=4", "allreduce", sizes, str(tmp_path), format="mscclpp", workers=1)
    assert out.ok and len(out.ranges) >= 2
    net = load_network("ring:n=4")
    for r in out.ranges:
        for size, rate in r.range.measured.items():
            own = export_mscclpp(r.range.schedule, net.topology, ExportOptions(check=False, design_size=size)).plan
            assert rate * (1 + CUT_MARGIN) >= simulate_plan(net, own, size).algbw_gbps


@pytest.mark.parametrize("sizes", [[256 << 10, 16 << 20], [256 << 10]])
def test_no_size_is_served_by_ll_where_simple_runs_faster(tmp_path, sizes):
    """ring:n=4 allreduce: LL wins at 256 KiB, the Simple plan from 288 KiB.  The LL plan used to serve up to the next
    listed size (16 MiB - 1: 31-34 GB/s where Simple plans run 43-113) or the LL cap (1 MiB); now at every power of
    two a plan serves, LL only where it beats the Simple plan cut for that size, the plan after it beats LL where it
    starts, and the plans still cover the sizes without gap or overlap, from 0 up."""
    out = export_by_size("ring:n=4", "allreduce", sizes, str(tmp_path), format="mscclpp", workers=1)
    assert out.ok
    net = load_network("ring:n=4")
    plans = sorted((read_plan(r.path) for r in out.ranges), key=lambda p: p.setting("min_message_size"))
    assert plans[0].setting("min_message_size") == 0
    for a, b in zip(plans, plans[1:]):
        assert b.setting("min_message_size") == a.setting("max_message_size") + 1
    for plan in plans:
        if plan.protocol != "LL":
            continue
        sched = next(r.range.schedule for r in out.ranges if r.result.plan.protocol == "LL")
        lo, hi = plan.setting("min_message_size"), plan.setting("max_message_size")
        for size in (1 << e for e in range(12, 32)):
            if lo <= size <= hi:
                cut = export_mscclpp(sched, net.topology, ExportOptions(check=False, design_size=size)).plan
                assert simulate_plan(net, plan, size).algbw_gbps > simulate_plan(net, cut, size).algbw_gbps, size
        after = next(p for p in plans if p.setting("min_message_size") == hi + 1)
        assert simulate_plan(net, after, hi + 1).algbw_gbps >= simulate_plan(net, plan, hi + 1).algbw_gbps
    assert any(p.protocol == "LL" for p in plans) and any(p.protocol == "Simple" for p in plans)
    assert any(n.startswith("LL ends here: from ") for r in out.ranges for n in r.result.notes)


def test_ll_keeps_listed_sizes_above_the_cap_where_it_wins(tmp_path):
    """dgx-a100:nodes=2 allgather k=1: LL runs 1.5 MiB at 41.3 GB/s, the Simple plan cut for it 34.8 (LL loses from
    2 MiB: 45.2 against 45.7; from 4 MiB before port senders ended with a flush instead of the end handshake).
    A listed size above the LL cap right after LL sizes gets the LL plan while LL wins (it was given to Simple): every
    listed size is served by a plan within CUT_MARGIN of the faster of LL and the Simple plan cut for it."""
    from forestcoll.generate import generate
    from forestcoll.simulate.plan_sizes import CUT_MARGIN, export_plans_by_size
    from forestcoll.simulate.select import Selection, SizeRange

    net = load_network("dgx-a100:nodes=2")
    sched = generate(net.topology, "allgather", k=1)
    sizes = [1 << 20, 3 << 19]
    sel = Selection([SizeRange(0, 0, "k1", sched, dict.fromkeys(sizes, 0.0))], [])
    out = export_plans_by_size(net, sel, str(tmp_path), "allgather", check=False)
    base = ExportOptions(check=False)
    ll = export_mscclpp(sched, net.topology, replace(base, protocol="LL")).plan
    for size in sizes:
        (plan,) = [r.result.plan for r in out if r.range.min_bytes <= size <= (r.range.max_bytes or 1 << 62)]
        own = export_mscclpp(sched, net.topology, replace(base, design_size=size)).plan
        best = max(simulate_plan(net, p, size).algbw_gbps for p in (ll, own))
        assert simulate_plan(net, plan, size).algbw_gbps >= (1 - CUT_MARGIN) * best, size
    assert [r.result.plan.protocol for r in out][:1] == ["LL"] and out[0].range.max_bytes >= 3 << 19
