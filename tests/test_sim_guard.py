"""io19: the simulation guard (limits.MAX_SIM_TRANSFERS) refuses before the transfers are built.

Each program builder counts its transfers first and passes the count to ``engine.refuse_transfers``: trees, MSCCL
files and the baselines their exact count, MSCCL++ plans a count never above the real one (so no simulation that
fits is refused); the refusal's message is the builder's own."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import SHARED, cli

import forestcoll.simulate.baselines as baselines
import forestcoll.simulate.engine as engine
import forestcoll.simulate.msccl as sim_msccl
import forestcoll.simulate.mscclpp as sim_mscclpp
import forestcoll.simulate.trees as sim_trees
from forestcoll import limits
from forestcoll.errors import SimulationTooLarge, UsageError
from forestcoll.generate import generate
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

MESSAGE = ("the simulation needs more than 1,000 transfers (slices moved over paths), above forestcoll's limit; pass a "
           "smaller --size, or a larger --slice or a --max-slices cap (see docs/limits.md)")


def _counted(monkeypatch, module) -> list[int]:
    """The counts ``module``'s builder passes to the guard, recorded (the guard still runs)."""
    seen: list[int] = []

    def record(count: int) -> None:
        seen.append(count)
        engine.refuse_transfers(count)

    monkeypatch.setattr(module, "refuse_transfers", record)
    return seen


def _slicing(rng: random.Random) -> tuple[float, int | None]:
    return float(rng.choice([1 << 12, 1 << 16, 1 << 20])), rng.choice([None, None, 1, 3, 16])


SPECS = ["ring:n=4", "hypercube:dim=3", "dgx-a100", "dgx-a100:nodes=2", "mi250", "switch:n=5"]


@pytest.mark.parametrize("seed", range(6))
def test_trees_and_baselines_count_exactly(seed, monkeypatch):
    rng = random.Random(seed)
    spec = SPECS[seed]
    topo = load_topology(spec)
    net = build_network(topo)
    tree_counts, base_counts = _counted(monkeypatch, sim_trees), _counted(monkeypatch, baselines)
    for collective in ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce"):
        size = float(rng.choice([1, 1000, 1 << 16, 3 << 20, 1 << 24]))
        sched = generate(topo, collective, k=rng.choice([None, 1, 2]))
        prog = sim_trees.tree_program(sched, net, size, *_slicing(rng))
        assert tree_counts[-1] == len(prog), (spec, collective)
        for name, build in baselines.BASELINES.items():
            if not baselines.applicable(name, net, collective):
                continue
            prog = build(net, collective, size, _slicing(rng))
            assert base_counts[-1] == len(prog), (spec, collective, name)


@pytest.mark.parametrize("spec,collective", [("ring:n=4", "allreduce"), ("hypercube:dim=3", "allgather"),
                                             ("dgx-a100:nodes=2", "allreduce"), ("ring:n=6", "reduce_scatter")])
def test_msccl_files_count_exactly(spec, collective, monkeypatch):
    from forestcoll.msccl.export import export_msccl

    rng = random.Random(spec)
    topo = load_topology(spec)
    net = build_network(topo)
    counts = _counted(monkeypatch, sim_msccl)
    for k in (1, 2):
        algo = export_msccl(generate(topo, collective, k=k)).algo
        for size in (1 << 10, 5 << 20, 1 << 26):
            prog = sim_msccl.msccl_program(algo, net, float(size), *_slicing(rng))
            assert counts[-1] == len(prog), (spec, collective, k, size)


def _plans():
    """MSCCL++ plans of several shapes: exported (Simple, LL, out of place) and the shared real ones."""
    from forestcoll.mscclpp.export import ExportOptions, export_mscclpp

    for spec, collective in (("ring:n=4", "allreduce"), ("hypercube:dim=3", "allgather"), ("dgx-a100:nodes=2", "allreduce")):
        topo = load_topology(spec)
        sched = generate(topo, collective, k=1)
        for opts in (ExportOptions(check=False), ExportOptions(check=False, protocol="LL"),
                     ExportOptions(check=False, inplace=False, layout="source")):
            yield f"{spec}-{collective}-{opts.protocol}-{opts.layout}", export_mscclpp(sched, topo, opts).plan, topo
    from forestcoll.mscclpp.plan import read_plan

    for path in sorted((Path(SHARED) / "data" / "mscclpp-plans").glob("*.json")):
        plan = read_plan(path)
        yield path.name, plan, load_topology(f"fully-connected:n={len(plan.gpus)}")


def test_mscclpp_plans_count_never_above_the_real_count(monkeypatch):
    counts = _counted(monkeypatch, sim_mscclpp)
    tried = 0
    for name, plan, topo in _plans():
        net = build_network(topo)
        for size in (1 << 12, 3 << 20):
            try:
                prog = sim_mscclpp.mscclpp_program(plan, net, float(size))
            except Exception:  # a real plan this stand-in fabric or size does not take: nothing to compare
                continue
            assert 0 < counts[-1] <= len(prog), (name, size, counts[-1], len(prog))
            tried += 1
    assert tried >= 18


def _no_build(monkeypatch) -> list[int]:
    """Transfers added to any program (none, when the guard refuses before building)."""
    added: list[int] = []
    real = engine.ProgramBuilder.add

    def add(self, *a, **k):
        added.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(engine.ProgramBuilder, "add", add)
    return added


@pytest.mark.parametrize("what", ["schedule", "msccl", "mscclpp", "ring", "double-binary-tree", "hierarchical", "direct"])
def test_the_refusal_comes_before_building_with_the_same_message(what, tmp_path, monkeypatch):
    spec = "dgx-a100:nodes=2"
    if what == "schedule":
        assert cli("generate", spec, "-o", tmp_path / "s.json")[0] == 0
        argv = ["simulate", tmp_path / "s.json"]
    elif what == "msccl":
        assert cli("generate", "ring:n=4", "-c", "allgather", "--format", "msccl", "-o", tmp_path / "a.xml")[0] == 0
        argv = ["simulate", tmp_path / "a.xml", "-t", "ring:n=4"]
    elif what == "mscclpp":
        assert cli("generate", "ring:n=4", "--k", "1", "-o", tmp_path / "s.json")[0] == 0
        assert cli("export", tmp_path / "s.json", "--format", "mscclpp", "-o", tmp_path / "p.json")[0] == 0
        argv = ["simulate", tmp_path / "p.json", "-t", "ring:n=4"]
    else:
        argv = ["simulate", what, "-t", spec, "--collective", "allreduce"]
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 1000)
    added = _no_build(monkeypatch)
    code, out, err = cli(*argv, "--size", "1TiB")
    assert (code, err) == (2, f"forestcoll: error: {MESSAGE}\n") and added == [], (code, err, len(added))
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 1 << 22)
    assert cli(*argv, "--size", "1MiB")[0] == 0


def test_the_builder_keeps_its_own_guard(monkeypatch):
    """A builder that does not count first (a program built by hand) still stops at the limit, same message."""
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 1000)
    prog = engine.ProgramBuilder()
    for _ in range(1000):
        prog.transfer((0,), 1.0)
    with pytest.raises(SimulationTooLarge) as exc:  # a UsageError: one line, exit 2 (and a race counts it a loss)
        prog.transfer((0,), 1.0)
    assert str(exc.value) == MESSAGE and isinstance(exc.value, UsageError)
