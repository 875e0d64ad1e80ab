"""All-to-all schedules: generated ones verify at the bound, dict round trip, the verifier catches every defect."""

from __future__ import annotations

import copy
from fractions import Fraction

import numpy as np
import pytest
from conftest import fabrics, symmetric_fabrics
from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.alltoall.plan import plan_alltoall, run_plan
from forestcoll.alltoall.schedule import schedule_from_dict
from forestcoll.alltoall.verify import verify_alltoall
from forestcoll.errors import ScheduleError
from forestcoll.topology import load_topology


@settings(max_examples=40, deadline=None)
@given(st.one_of(fabrics(max_compute=5, max_switches=3), symmetric_fabrics()))
def test_generated_schedules_verify_at_the_bound(topo):
    gen = generate_alltoall(topo)
    assert gen.ok, gen.message
    sched = gen.schedule
    check = verify_alltoall(sched, topo)
    assert check.ok, check.errors
    assert check.algbw == sched.algbw
    if gen.bound.certified:
        assert sched.optimal and check.optimal and check.algbw == gen.bound.algbw
    assert schedule_from_dict(sched.to_dict()) == sched


@settings(max_examples=25, deadline=None)
@given(fabrics(max_compute=4, max_switches=2), st.integers(1, 6))
def test_rounded_schedules_verify_below_the_bound(topo, chunks):
    gen = generate_alltoall(topo, chunks=chunks)
    assert gen.ok, gen.message
    assert chunks % gen.schedule.k == 0
    check = verify_alltoall(gen.schedule, topo)
    assert check.ok, check.errors
    if gen.bound.certified:
        assert check.algbw <= gen.bound.algbw


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "mi250:nodes=2", "ring:n=6", "hypercube:dim=3", "torus:dims=3x3"])
def test_catalog_schedules_are_optimal(spec):
    topo = load_topology(spec)
    gen = generate_alltoall(topo)
    assert gen.ok and gen.schedule.optimal, gen.message
    check = verify_alltoall(gen.schedule.to_dict(), topo)
    assert check.ok and check.optimal and check.pairs == topo.num_compute * (topo.num_compute - 1)


def test_symmetric_fabric_at_scale_is_fast_enough_to_test():
    topo = load_topology("dgx-a100:nodes=8")
    gen = generate_alltoall(topo)
    assert gen.ok and gen.schedule.optimal and gen.schedule.algbw == Fraction(200 * 64, 8 * 56)
    assert verify_alltoall(gen.schedule, topo).ok


@pytest.fixture(scope="module")
def ring():
    topo = load_topology("ring:n=4")
    return topo, generate_alltoall(topo).schedule.to_dict()


def _broken(data, change):
    d = copy.deepcopy(data)
    change(d)
    return d


@pytest.mark.parametrize("change, expect", [
    (lambda d: d["flows"].pop(0), "fractions sum to"),
    (lambda d: d["flows"][0].update(fraction="1/3"), "fractions sum to 1/3"),
    (lambda d: d["flows"][0].update(path=["r0", "r2", "r1"]), "no link"),
    (lambda d: d["flows"][0].update(path=["r3", "r0"]), "must start at"),
    (lambda d: d["flows"][0].update(dst=d["flows"][0]["src"]), "two different ranks"),
    (lambda d: d["flows"][0].update(path=["r0", "r1", "r0", "r1"]), "visits a node twice"),
    (lambda d: d["flows"][0].update(path=["r0", "zz", "r1"]), "not a node"),
    (lambda d: d.update(algbw_gbps="1000"), "claims algbw"),
    (lambda d: d.update(ranks=d["ranks"][:-1]), "compute nodes"),
    (lambda d: d["flows"][0].update(fraction="0"), "must be a number"),
])
def test_verifier_catches(ring, change, expect):
    topo, data = ring
    check = verify_alltoall(_broken(data, change), topo)
    assert not check.ok
    assert any(expect in e for e in check.errors), check.errors


def test_verifier_refuses_switch_endpoints():
    topo = load_topology("switch:n=3")
    data = generate_alltoall(topo).schedule.to_dict()
    data["flows"][0]["dst"] = "switch"
    check = verify_alltoall(data, topo)
    assert not check.ok and "two different ranks" in check.errors[0]


def test_verifier_rejects_a_false_optimality_claim(ring):
    topo, data = ring
    d = _broken(data, lambda d: d.update(bound_algbw_gbps="1000"))
    assert not verify_alltoall(d, topo).ok


@pytest.mark.parametrize("bad, msg", [
    ({"collective": "allgather"}, "not 'alltoall'"),
    ({"flows": "x"}, "wrong type"),
    ({"version": 9}, "not supported"),
    ({"algbw_gbps": "abc"}, "not a number"),
])
def test_schedule_from_dict_errors(ring, bad, msg):
    _, data = ring
    with pytest.raises(ScheduleError, match=msg):
        schedule_from_dict({**data, **bad})


# ----- the executor's plan on numpy buffers ---------------------------------------------------------


def _reference(inputs, count):
    n = len(inputs)
    return [np.concatenate([inputs[s][t * count:(t + 1) * count] for s in range(n)]) for t in range(n)]


@pytest.mark.parametrize("spec, chunks", [("mi250:nodes=2", None), ("ring:n=5", None), ("ring:n=4", 3), ("dgx-1", None),
                                          ("dgx-a100:nodes=2", 2)])
@pytest.mark.parametrize("count, dtype", [(0, "float32"), (1, "int64"), (7, "float16"), (97, "float64"), (1009, "int32")])
def test_plan_moves_every_block(spec, chunks, count, dtype):
    sched = generate_alltoall(load_topology(spec), chunks=chunks).schedule
    plan = plan_alltoall(sched, count)
    assert plan.ok, plan.message
    n = len(sched.ranks)
    rng = np.random.default_rng(count)
    inputs = [rng.integers(0, 100, n * count).astype(dtype) for _ in range(n)]
    for got, want in zip(run_plan(plan, inputs), _reference(inputs, count)):
        assert np.array_equal(got, want)


@settings(max_examples=20, deadline=None)
@given(fabrics(max_compute=5, max_switches=2), st.integers(0, 40), st.sampled_from([None, 2, 5]))
def test_plan_on_random_fabrics(topo, count, chunks):
    sched = generate_alltoall(topo, chunks=chunks).schedule
    plan = plan_alltoall(sched, count)
    assert plan.ok, plan.message
    n = len(sched.ranks)
    inputs = [np.arange(n * count, dtype=np.int64) + 1000 * r for r in range(n)]
    for got, want in zip(run_plan(plan, inputs), _reference(inputs, count)):
        assert np.array_equal(got, want)


def test_best_chunks_picks_the_fewest_that_keep_the_rate():
    from forestcoll.alltoall.bound import solve_alltoall
    from forestcoll.alltoall.generate import best_chunks

    s = solve_alltoall(load_topology("ring:n=4"))  # antipodal pairs split in halves: k=2 is exact, k=1 is not
    k, lam = best_chunks(s, within=Fraction(0))
    assert k == 2 and lam == s.lower
    k1, lam1 = best_chunks(s, max_chunks=1)
    assert k1 == 1 and lam1 < s.lower


def test_auto_chunks_keeps_the_optimum_with_few_chunks():
    topo = load_topology("torus:dims=4x4")  # the exact vertex needs k=12 here: kept
    gen = generate_alltoall(topo, chunks="auto")
    assert gen.schedule.k == generate_alltoall(topo).schedule.k and gen.schedule.optimal
    bad = generate_alltoall(topo, chunks="many")
    assert not bad.ok and "auto" in bad.message


def test_auto_chunks_on_the_h100_dump():
    from conftest import shared_file

    path = shared_file("data", "nccl-topo", "H100-topology.xml")
    topo = load_topology(str(path), {"nodes": "4", "fabric": "rail"})
    exact = generate_alltoall(topo).schedule
    auto = generate_alltoall(topo, chunks="auto").schedule
    assert exact.k > 16 and auto.k <= 16 and auto.algbw == exact.algbw == 60
    assert verify_alltoall(auto, topo).ok
