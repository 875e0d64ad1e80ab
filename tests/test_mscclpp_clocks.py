"""The race detector's shared clocks (clk20) compute what its dense clocks (the reference) compute: the same values
under every operation, and on plans with injected races the same verdicts and the same first race reported."""

from __future__ import annotations

import copy
import json
import random

import numpy as np
import pytest
from test_mscclpp_plan import REAL

from forestcoll.generate import generate
from forestcoll.mscclpp import clocks as clocks_mod
from forestcoll.mscclpp.clocks import Backend, DenseClock, SharedClock, part_size
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.mscclpp.plan import plan_from_json, plan_to_json
from forestcoll.topology import load_topology


def test_part_size_is_a_power_of_two_near_the_square_root():
    assert part_size(1) == 64 and part_size(4096) == 64 and part_size(4097) == 128
    assert part_size(21_120) == 256 and part_size(1_300_000) == 2048


def test_shared_parts_are_copied_on_write_and_frozen_clocks_never_change():
    zero = np.zeros(4, np.int32)
    zero.flags.writeable = False
    a = SharedClock.zeros(10, zero)
    a.set(5, 7)
    snap = a.snapshot()
    a.set(5, 9)
    a.set(6, 1)
    assert snap.get(5) == 7 and snap.get(6) == 0 and a.get(5) == 9
    b = SharedClock.zeros(10, zero)
    b.join(a)  # a dominates b everywhere: b shares a's parts
    assert all(p is q for p, q in zip(b.parts, a.parts)) and not b.mine.any() and not a.mine.any()
    a.set(5, 11)
    assert b.get(5) == 9 and a.get(5) == 11
    with pytest.raises(ValueError):
        snap.set(0, 1)
    with pytest.raises(ValueError):
        snap.join(a)
    assert a.gather(np.array([[5, 6], [0, 9]])).tolist() == [[11, 1], [0, 0]]


@pytest.mark.parametrize("seed", range(6))
def test_shared_clocks_hold_the_dense_values_under_random_operations(seed):
    rng = random.Random(seed)
    n = rng.choice([1, 5, 17, 64])
    zero = np.zeros(4, np.int32)
    zero.flags.writeable = False
    shared = [SharedClock.zeros(n, zero) for _ in range(5)]
    dense = [DenseClock(np.zeros(n, np.int32)) for _ in range(5)]
    for _ in range(400):
        i, j = rng.randrange(5), rng.randrange(5)
        what = rng.random()
        if what < 0.35:
            k = rng.randrange(n)
            v = max(shared[i].get(k), dense[i].get(k)) + rng.randrange(3)
            shared[i].set(k, v)
            dense[i].set(k, v)
        elif what < 0.7 and i != j:
            shared[i].join(shared[j])
            dense[i].join(dense[j])
        elif what < 0.8:
            shared[i] = shared[j].snapshot().joined(shared[i])
            dense[i] = dense[j].joined(dense[i])
        elif what < 0.9:
            shared[i] = shared[j].copy()
            dense[i] = dense[j].copy()
        else:
            idx = np.array([rng.randrange(n) for _ in range(7)])
            assert shared[i].gather(idx).tolist() == dense[i].gather(idx).tolist()
        for s, d in zip(shared, dense):
            assert s.values().tolist() == d.values().tolist()


def _verdict(r):
    return (r.ok, r.races, r.relaxed, r.errors, [str(s) for s in r.stuck], r.message)


def _both(plan, monkeypatch, **kw):
    """The run with the dense clocks and with shared clocks cut in parts of 4 entries (many parts, much sharing)."""
    ref = run_plan(plan, clocks="dense", **kw)
    monkeypatch.setattr(clocks_mod, "part_size", lambda agents: 4)
    got = run_plan(plan, clocks="shared", **kw)
    monkeypatch.undo()
    return ref, got


def _injected(d, rng, count):
    """Plans with one synchronisation operation (top level or in a pipeline's body) dropped or misplaced: a wait
    moved to the end of its operations, a signal to their start (the data they guarded is raced)."""
    sites = []
    for gi, g in enumerate(d["gpus"]):
        for ti, t in enumerate(g["threadblocks"]):
            for oi, o in enumerate(t["ops"]):
                for pi, x in [(None, o), *enumerate(o.get("ops", []))]:
                    if x["name"] in ("nop", "wait", "signal", "rlxwait", "rlxsignal"):
                        sites.append((gi, ti, oi, pi))
    for gi, ti, oi, pi in rng.sample(sites, min(count, len(sites))):
        m = copy.deepcopy(d)
        ops = m["gpus"][gi]["threadblocks"][ti]["ops"]
        if pi is not None:  # inside a pipeline: misplaced within its body
            ops, oi = ops[oi]["ops"], pi
        o = ops.pop(oi)
        if rng.random() < 0.3:
            pass  # dropped
        elif o["name"] in ("wait", "rlxwait"):
            ops.append(o)
        elif o["name"] != "nop":
            ops.insert(0, o)
        yield m


@pytest.fixture(scope="module")
def ring_plan():
    topo = load_topology("ring:n=4")
    return export_mscclpp(generate(topo, "allreduce", k=1), topo, ExportOptions(check=False)).plan


def test_shared_and_dense_agree_on_injected_races(ring_plan, monkeypatch):
    base = plan_to_json(ring_plan)
    rng = random.Random(20)
    seen_race = 0
    for m in [base, *_injected(base, rng, 16)]:
        plan = plan_from_json(json.loads(json.dumps(m)), "ring")
        for launches in (1, 2):
            ref, got = _both(plan, monkeypatch, launches=launches)
            assert _verdict(got) == _verdict(ref)
            seen_race += bool(ref.races)
    assert seen_race  # the injections do make races


@pytest.mark.slow
@pytest.mark.skipif(not REAL, reason="../shared/data/mscclpp-plans not available")
def test_shared_and_dense_agree_on_real_plans_and_their_mutants(monkeypatch):
    rng = random.Random(7)
    for path in REAL:
        base = json.loads(path.read_text())
        for m in [base, *_injected(base, rng, 3)]:
            plan = plan_from_json(m, path.name)
            ref, got = _both(plan, monkeypatch, launches=2)
            assert _verdict(got) == _verdict(ref), path.name


@pytest.mark.slow
def test_shared_and_dense_agree_on_a_two_box_plan(monkeypatch):
    topo = load_topology("dgx-a100:nodes=2")
    plan = export_mscclpp(generate(topo, "allreduce", k=1), topo, ExportOptions(check=False)).plan
    base = plan_to_json(plan)
    for m in [base, *_injected(base, random.Random(3), 2)]:
        ref, got = _both(plan_from_json(m, "p2"), monkeypatch, launches=2)
        assert _verdict(got) == _verdict(ref)


def test_backend_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="unknown clock representation"):
        Backend("sparse", 4)


def test_auto_holds_clocks_dense_under_the_dense_limit_and_shared_above(ring_plan, monkeypatch):
    from forestcoll.errors import UsageError
    from forestcoll.mscclpp import interpreter as interp_mod
    from forestcoll.mscclpp import machine as machine_mod

    kinds = []
    init = machine_mod.Machine.__init__

    def spy(self, *args, **kwargs):
        init(self, *args, **kwargs)
        kinds.append(self.knowledge.kind)

    monkeypatch.setattr(machine_mod.Machine, "__init__", spy)
    assert interp_mod.race_clock_kind(ring_plan) == "dense"
    ref = run_plan(ring_plan, launches=2)
    monkeypatch.setattr(interp_mod, "DENSE_RACE_CLOCK_BYTES", 1000)  # the plan's clocks are above it now
    assert interp_mod.race_clock_kind(ring_plan) == "shared" and interp_mod.race_clocks_refused(ring_plan) is None
    got = run_plan(ring_plan, launches=2)
    assert kinds == ["dense", "shared"] and _verdict(got) == _verdict(ref) and got.ok
    with pytest.raises(UsageError, match="unknown clock representation 'sparse'"):
        run_plan(ring_plan, clocks="sparse")
