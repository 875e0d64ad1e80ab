"""MSCCL++ plans of all-to-all schedules: lint clean, right in the interpreter, the rate of the schedule in the
simulator, one-line refusals; the CLI path."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from conftest import cli

from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.alltoall.mscclpp import alltoall_actions, export_alltoall_mscclpp, write_alltoall_mscclpp
from forestcoll.alltoall.schedule import AlltoallSchedule, Flow
from forestcoll.mscclpp.export import ExportError, ExportOptions
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.mscclpp.lint import lint_plan
from forestcoll.mscclpp.plan import parse_plan, write_plan
from forestcoll.simulate.alltoall import simulate_alltoall
from forestcoll.simulate.mscclpp import simulate_plan
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

OUT = ExportOptions(inplace=False)
FABRICS = ["ring:n=5", "dgx-1", "dgx-a100:nodes=2", "torus:dims=2x4"]


def _made(spec: str):
    topo = load_topology(spec)
    made = generate_alltoall(topo)
    assert made.ok and made.schedule is not None
    return topo, made.schedule


@pytest.mark.parametrize("spec", FABRICS)
def test_plans_lint_clean_and_run_right(spec):
    topo, sched = _made(spec)
    result = export_alltoall_mscclpp(sched, topo, OUT)
    assert len(result.checks) == 2 and all("OK" in line for line in result.checks)
    text = write_plan(result.plan)
    data = json.loads(text)
    n, k = len(sched.ranks), sched.k
    assert data["collective"] == "alltoall" and data["inplace"] is False and data["protocol"] == "Simple"
    assert all(g["input_chunks"] == n * k and g["output_chunks"] == n * k for g in data["gpus"])
    plan = parse_plan(text, spec)
    assert not lint_plan(plan, spec).errors
    unit = n * k * 16
    for size, launches in ((unit, 1), (unit * 7, 3), (unit * 64, 2)):
        run = run_plan(plan, source=spec, size=size, launches=launches, dtype="int32")
        assert run.ok, (size, run.message)


def test_relays_go_through_scratch_and_boxes_pick_channels():
    topo, sched = _made("ring:n=5")
    acts, scratch, _ = alltoall_actions(sched, topo)
    assert sum(scratch) > 0  # a 5-ring relays: pairs two apart pass a middle GPU
    assert any(a.push and a.push[0].type == "s" for a in acts)
    topo, sched = _made("dgx-a100:nodes=2")
    plan = export_alltoall_mscclpp(sched, topo, OUT, check=False).plan
    chans = {c.channel_type for g in plan.gpus for c in g.channels}
    assert chans == {"memory", "port"}  # NVSwitch inside a box, NICs across boxes
    for g in plan.gpus:  # port channels only to the other box's GPUs, memory channels only inside the box
        for c in g.channels:
            same = [(p < 8) == (g.id < 8) for p in c.connected_to]
            assert all(same) if c.channel_type == "memory" else not any(same)


@pytest.mark.parametrize("spec", ["dgx-1", "dgx-a100:nodes=2", "torus:dims=2x4"])
def test_plan_keeps_the_schedules_rate(spec):
    topo, sched = _made(spec)
    plan = export_alltoall_mscclpp(sched, topo, OUT, check=False).plan
    net = build_network(topo)
    size = 1 << 30
    got = simulate_plan(net, plan, size).algbw_gbps
    want = simulate_alltoall(net, sched, size).algbw_gbps
    assert got >= 0.95 * want, (got, want)


def test_one_line_refusals(tmp_path):
    topo, sched = _made("dgx-a100:nodes=2")
    with pytest.raises(ExportError, match=r"thread blocks per GPU .*--max-threadblocks") as err:
        export_alltoall_mscclpp(sched, topo, ExportOptions(inplace=False, max_threadblocks=4))
    assert "\n" not in str(err.value) and "--format msccl" in str(err.value)
    with pytest.raises(ExportError, match="out of place only"):
        export_alltoall_mscclpp(sched, topo, ExportOptions(inplace=True))
    with pytest.raises(ExportError, match="Simple protocol only"):
        export_alltoall_mscclpp(sched, topo, ExportOptions(inplace=False, protocol="LL"))
    half = AlltoallSchedule(sched.topology, sched.ranks, sched.flows[1:], sched.algbw, sched.bound_algbw)
    with pytest.raises(ExportError, match="fractions add up to 0/1"):
        export_alltoall_mscclpp(half, topo, OUT)
    f = sched.flows[0]
    odd = AlltoallSchedule(sched.topology, sched.ranks, (Flow(f.src, f.dst, Fraction(1, 2), f.path),
                                                          Flow(f.src, f.dst, Fraction(1, 2), f.path), *sched.flows[1:]),
                           sched.algbw, sched.bound_algbw)
    assert odd.k == 2
    path = tmp_path / "p.json"
    write_alltoall_mscclpp(odd, str(path), topo, OUT)  # two flows of one pair: consecutive ranges, still right
    assert json.loads(path.read_text())["gpus"][0]["input_chunks"] == 32


def test_cli_export_generate_simulate(tmp_path):
    sched = tmp_path / "s.json"
    plan = tmp_path / "plan.json"
    code, _, err = cli("generate", "dgx-1", "-c", "alltoall", "-o", sched)
    assert code == 0, err
    code, out, err = cli("export", sched, "--format", "mscclpp", "-o", plan)
    assert code == 0, err
    assert "plan       forestcoll_alltoall_n8_k" in out and "out-of-place" in out and "checked    one iteration: OK" in out
    assert json.loads(plan.read_text())["collective"] == "alltoall"
    code, out, err = cli("simulate", plan, "-t", "dgx-1", "--size", "64MiB")
    assert code == 0, err and "algbw" in out
    code, out, err = cli("mscclpp", "lint", plan)
    assert code == 0 and "clean" in out
    plan2 = tmp_path / "plan2.json"
    code, out, err = cli("generate", "torus:dims=2x4", "-c", "alltoall", "--format", "mscclpp", "-o", plan2)
    assert code == 0, err
    assert json.loads(plan2.read_text())["collective"] == "alltoall"
    bad = tmp_path / "bad.json"
    code, out, err = cli("export", sched, "--format", "mscclpp", "--mode", "in-place", "-o", bad)
    assert code == 2 and "out of place only" in err and len(err.strip().splitlines()) == 1 and not bad.exists()
    code, out, err = cli("export", sched, "--format", "mscclpp", "--max-threadblocks", "2", "-o", bad)
    assert code == 2 and "--max-threadblocks" in err and len(err.strip().splitlines()) == 1 and not bad.exists()
