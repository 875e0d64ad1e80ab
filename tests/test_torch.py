"""forestcoll.torch on real gloo process groups (CPU, spawned processes): results equal torch.distributed's.

The rank programs are in torch_programs.py; this module imports torch only when its tests run.
"""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
from torch_ranks import RankPool, run_ranks

from forestcoll import generate, load_topology
from forestcoll.schedule import schedule_to_dict

pytestmark = [pytest.mark.slow,  # spawned processes, each importing torch
              pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")]

DTYPES = ["float32", "float16", "bfloat16", "int64"]
SIZES = [1, 2, 13, 97, 1031, 65537]  # 1 element, primes, and more than a pipeline slice


@pytest.fixture(scope="module")
def programs():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch without gloo")
    import torch_programs

    return torch_programs


@pytest.fixture(scope="module")
def ranks4(programs):
    """Four gloo ranks shared by the tests whose collectives leave the group usable."""
    pool = RankPool(4)
    yield pool
    pool.close()


def write(tmp_path, spec: str, coll: str, k=None, name=None, root=None) -> str:
    path = tmp_path / (name or f"{spec.replace(':', '_')}-{coll}-{k}.json")
    path.write_text(json.dumps(schedule_to_dict(generate(load_topology(spec), coll, k=k, root=root))))
    return str(path)


# ----- tests -----------------------------------------------------------------------------

def assert_all_ok(results: dict):
    for rank, (status, value) in sorted(results.items()):
        assert status == "ok", f"rank {rank}: {value}"
        assert value == [], f"rank {rank}: {value[:3]}"



def test_all_reduce_every_dtype_size_and_op_on_4_ranks(tmp_path, programs, ranks4):
    opt = write(tmp_path, "ring:n=4", "allreduce")
    k1 = write(tmp_path, "ring:n=4", "allreduce", k=1)
    star = write(tmp_path, "switch:n=4", "allreduce")
    cases = [{"coll": "all_reduce", "path": p, "dtype": d, "numel": n, "native": d in ("float32", "int64")}
             for p in (opt, k1) for d in DTYPES for n in SIZES]
    cases += [{"coll": "all_reduce", "path": star, "dtype": "float32", "numel": 1001, "op": op, "native": True}
              for op in ("sum", "avg", "product", "max", "min")]
    cases += [{"coll": "all_reduce", "path": opt, "dtype": "bfloat16", "numel": 77, "op": op} for op in ("max", "min", "product")]
    cases.append({"coll": "all_reduce", "path": opt, "dtype": "float32", "numel": 500, "noncontig": True})
    assert_all_ok(ranks4.run(programs.check_collectives, cases))


def test_all_gather_and_reduce_scatter_in_and_out_of_place(tmp_path, programs, ranks4):
    ag = write(tmp_path, "hypercube:dim=2", "allgather")
    rs = write(tmp_path, "hypercube:dim=2", "reduce_scatter", k=1)
    ar = write(tmp_path, "hypercube:dim=2", "allreduce")  # its phases run all_gather / reduce_scatter too
    cases = []
    for d in DTYPES:
        for n in (1, 13, 4099):
            cases.append({"coll": "all_gather", "path": ag, "dtype": d, "numel": n, "native": d in ("float32", "int64")})
            cases.append({"coll": "all_gather", "path": ar, "dtype": d, "numel": n, "inplace": True})
            cases.append({"coll": "reduce_scatter", "path": rs, "dtype": d, "numel": n})
            cases.append({"coll": "reduce_scatter", "path": ar, "dtype": d, "numel": n, "op": "max"})
    assert_all_ok(ranks4.run(programs.check_collectives, cases))


def test_eight_ranks_optimal_k_deep_trees_and_switch_fabrics(tmp_path, programs):
    cases = []
    for spec in ("dgx-1", "hypercube:dim=3", "dgx-a100"):  # k=162 (deep trees), k=3, NVSwitch
        p = write(tmp_path, spec, "allreduce")
        cases += [{"coll": "all_reduce", "path": p, "dtype": d, "numel": n, "native": d == "float32"}
                  for d in ("float32", "bfloat16") for n in (1, 3, 997, 70001)]
    bc = write(tmp_path, "dgx-1", "broadcast", root="n0.gpu5")
    rd = write(tmp_path, "dgx-1", "reduce", root="n0.gpu3")
    cases += [{"coll": "broadcast", "path": bc, "dtype": "float16", "numel": n, "root": 5, "native": False}
              for n in (1, 4097)]
    cases += [{"coll": "reduce", "path": rd, "dtype": "int64", "numel": n, "root": 3, "op": "max"} for n in (1, 4097)]
    assert_all_ok(run_ranks(8, programs.check_collectives, cases, timeout=240))


def test_async_executor_equals_the_rounds_bit_for_bit(tmp_path, programs):
    """Early receives and per-message dependencies (the default mode) against the synchronous rounds, on 8
    ranks with deep trees (dgx-1, k=162), a switch fabric and a torus: equal bit for bit, integers and floats
    (the same additions in the same order per element), and no deadlock (the run finishes)."""
    cases = []
    for spec in ("dgx-1", "dgx-a100", "torus:dims=2x4"):
        ar = write(tmp_path, spec, "allreduce")
        ag = write(tmp_path, spec, "allgather")
        cases += [{"coll": "all_reduce", "path": ar, "dtype": d, "numel": n, "op": op}
                  for d in ("int64", "float32") for n in (1, 997, 70001) for op in ("sum", "max")]
        cases += [{"coll": "all_gather", "path": ag, "dtype": "int64", "numel": n} for n in (1, 4099)]
    assert_all_ok(run_ranks(8, programs.async_equals_rounds, cases, timeout=300))


def test_clear_errors_rank_maps_and_subgroups(tmp_path, programs, ranks4):
    paths = {"three": write(tmp_path, "ring:n=3", "allreduce"), "four": write(tmp_path, "ring:n=4", "allreduce"),
             "two": write(tmp_path, "ring:n=2", "allreduce"), "ag": write(tmp_path, "ring:n=4", "allgather")}
    assert_all_ok(ranks4.run(programs.check_errors, paths))


@pytest.mark.parametrize("mode", ["die", "stall"])
def test_a_dead_or_stalled_rank_does_not_hang_the_others(tmp_path, programs, mode):
    path = write(tmp_path, "ring:n=4", "allreduce")
    start = time.monotonic()
    results = run_ranks(4, programs.dies_or_stalls, path, mode, timeout=60, expect_exit={2})
    for rank in (0, 1, 3):
        status, value = results[rank]
        assert status == "ok" and value.startswith("error after"), (rank, value)
        assert "compute node" in value
    assert time.monotonic() - start < 60


def test_matmul_overlap_equals_compute_then_communicate(tmp_path, programs, ranks4):
    assert_all_ok(ranks4.run(programs.matmuls, write(tmp_path, "torus:dims=2x2", "allreduce")))
