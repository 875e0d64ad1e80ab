"""Every result forestcoll returns has one shape: ``ok``, ``message``, ``to_dict()`` (forestcoll.results)."""

import json

import pytest

from forestcoll import generate, load_topology, optimal_bound, verify
from forestcoll.bound.report import bound_report
from forestcoll.fileio import dump_json
from forestcoll.msccl import export_msccl, lint_file, run_file, write_msccl
from forestcoll.msccl.interpreter import run_algo
from forestcoll.results import Result
from forestcoll.simulate import build_network, simulate
from forestcoll.simulate.compare import compare_topology
from forestcoll.simulate.select import candidate_schedules, export_by_size, select_schedules
from forestcoll.topology.show import summarize


@pytest.fixture(scope="module")
def ring4():
    topo = load_topology("ring:n=4")
    return topo, generate(topo, "allreduce")


def _check(result, ok=True):
    assert isinstance(result, Result), type(result).__name__
    assert result.ok is ok
    assert isinstance(result.message, str) and result.message
    json.loads(dump_json(result.to_dict()))  # JSON-ready


def test_bound_schedule_verdict(ring4):
    topo, sched = ring4
    _check(optimal_bound(topo, "allreduce"))
    report = bound_report(topo, "broadcast", k=2)
    _check(report)
    assert report.to_dict()["allreduce_algbw_gbps"] == "400/3" and report.to_dict()["k"] == 2
    _check(sched)
    assert sched.to_dict()["format"] == "forestcoll-schedule" and "optimal" in sched.message
    verdict = verify(sched, topo)
    _check(verdict)
    assert verdict.certified_optimal and verdict.message.startswith("OK, optimal")
    bad = verify(sched, load_topology("ring:n=5"))
    _check(bad, ok=False)
    assert bad.message == bad.errors[0] and bad.to_dict()["ok"] is False
    _check(summarize(topo))


def test_msccl_results(ring4, tmp_path):
    _topo, sched = ring4
    result = export_msccl(sched)
    _check(result)
    assert result.to_dict()["checked"] is False and result.to_dict()["output"] is None
    written = write_msccl(sched, str(tmp_path / "a.xml"))
    assert written.checked and written.checks and written.output == str(tmp_path / "a.xml")
    _check(run_algo(result.algo, mode="in-place"))
    _check(run_file(written.output))
    _check(lint_file(written.output, "rccl"))
    (tmp_path / "bad.xml").write_text(
        (tmp_path / "a.xml").read_text().replace('type="s"', 'type="r"', 1))
    assert not lint_file(str(tmp_path / "bad.xml")).ok


def test_simulation_results(ring4, tmp_path):
    topo, sched = ring4
    net = build_network(topo)
    _check(simulate(net, sched, size=1 << 20))
    comp = compare_topology(topo, "allreduce", [1 << 20, 2 << 20], algorithms=["forestcoll", "ring"],
                            plot=str(tmp_path / "c.svg"))
    _check(comp)
    assert comp.to_dict()["plot"] == str(tmp_path / "c.svg") and comp.algorithms() == ["forestcoll", "ring"]
    cands = candidate_schedules(topo, net, "allgather", ks=[1, 2], ring=False)
    assert list(cands) == ["forestcoll"] or all(s.k < cands["forestcoll"].k for s in list(cands.values())[1:])
    sel = select_schedules(topo, net, "allgather", [1 << 20], cands)
    _check(sel)
    out = export_by_size(topo, "allgather", [1 << 20, 4 << 20], str(tmp_path / "sel"))
    _check(out)
    assert all(r.path for r in out.ranges) and out.to_dict()["ranges"][0]["output"]


def test_alltoall_results(tmp_path):
    from forestcoll.alltoall.bound import alltoall_bound
    from forestcoll.alltoall.generate import generate_alltoall
    from forestcoll.alltoall.verify import verify_alltoall

    topo = load_topology("ring:n=4")
    _check(alltoall_bound(topo))
    made = generate_alltoall(topo)
    _check(made)
    _check(made.schedule)
    assert made.schedule.to_dict()["collective"] == "alltoall" and "optimal" in made.schedule.message
    _check(verify_alltoall(made.schedule, topo))
    _check(export_msccl(made.schedule))
    _check(simulate(build_network(topo), made.schedule, size=1 << 20))
    _check(compare_topology(topo, "alltoall", [1 << 20], algorithms=["forestcoll", "direct"]))
