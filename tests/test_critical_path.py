"""The critical path of a simulated call (simulate/critical.py, benchmarks/critical_path.py)."""

from __future__ import annotations

import subprocess
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp
from forestcoll.mscclpp.plan import write_plan
from forestcoll.schedule import write_schedule
from forestcoll.simulate.critical import critical_path, plan_critical_path, tree_critical_path
from forestcoll.simulate.engine import ProgramBuilder, run
from forestcoll.simulate.mscclpp import simulate_plan
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

SPEC = "dgx-a100:nodes=2"
ROOT = Path(__file__).resolve().parents[1]


@cache
def _ag():
    topo = load_topology(SPEC)
    sched = generate(topo, "allgather", k=1)
    plan = export_mscclpp(sched, topo, ExportOptions(check=False)).plan
    return topo, build_network(topo), sched, plan


def test_a_chain_splits_into_moving_and_latency_exactly():
    """Two slices along a two-hop chain: the path is the slowest chain, its parts sum to the time."""
    b = ProgramBuilder()
    a1 = b.transfer([0], 100.0, 1.0)
    b.transfer([1], 100.0, 1.0, after_delivered=[a1])
    a2 = b.transfer([0], 100.0, 1.0, after_sent=[a1])
    b.transfer([1], 100.0, 1.0, after_delivered=[a2])
    prog = b.build()
    res = run(prog, np.array([100.0, 100.0]))
    cp = critical_path(prog, res.sent, res.delivered)
    assert cp.time == pytest.approx(5.0)  # s + d - 1 = 3 slice times of 1 s, plus 2 latencies of 1 s
    assert cp.moving + cp.latency == pytest.approx(cp.time)
    assert cp.latency == pytest.approx(2.0) and cp.moving == pytest.approx(3.0)


def test_the_plan_path_adds_up_and_names_the_handshake():
    """On two DGX boxes the chain's parts sum to the simulated time; the start handshake over the NICs is on it, and
    the trees' path has the same bytes' time with fewer latencies."""
    _topo, net, sched, plan = _ag()
    size = 16 << 20
    cp = plan_critical_path(net, plan, size)
    assert cp.time == pytest.approx(simulate_plan(net, plan, size).time_s, rel=1e-9)
    assert cp.moving + cp.latency == pytest.approx(cp.time, rel=1e-9)
    assert "start signal/port" in cp.by_kind and "put/port" in cp.by_kind
    ct = tree_critical_path(net, sched, size)
    assert ct.latency < cp.latency


def test_the_benchmark_prints_both_paths_and_refuses_bad_input(tmp_path):
    _topo, _net, sched, plan = _ag()
    (tmp_path / "p.json").write_text(write_plan(plan))
    write_schedule(sched, str(tmp_path / "s.json"))
    cmd = [sys.executable, str(ROOT / "benchmarks" / "critical_path.py"), SPEC, str(tmp_path / "p.json"),
           str(tmp_path / "s.json"), "--size", "1MiB", "--steps"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "start signal/port" in out and "size / bound" in out and out.count("(= ") == 2
    bad = subprocess.run(cmd[:3] + [str(tmp_path / "missing.json")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
