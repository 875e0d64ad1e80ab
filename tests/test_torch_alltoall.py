"""forestcoll.torch.all_to_all_single on real gloo process groups (CPU, spawned processes): results equal a
numpy reference and torch.distributed.all_to_all_single, for relaying schedules, odd sizes and every dtype."""

from __future__ import annotations

import importlib.util
import json

import pytest
from torch_ranks import RankPool, run_ranks

from forestcoll import generate, load_topology
from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.schedule import schedule_to_dict

pytestmark = [pytest.mark.slow,  # spawned processes, each importing torch
              pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")]

DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8"]
COUNTS = [0, 1, 2, 13, 97, 4099]  # elements per pair: none, fewer than the chunks, primes


@pytest.fixture(scope="module")
def programs():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch without gloo")
    import torch_programs

    return torch_programs


def write(tmp_path, spec: str, chunks=None) -> str:
    gen = generate_alltoall(load_topology(spec), chunks=chunks)
    assert gen.ok and gen.schedule.optimal, gen.message
    path = tmp_path / f"{spec.replace(':', '_').replace('=', '')}-alltoall-{chunks}.json"
    path.write_text(json.dumps(gen.schedule.to_dict()))
    return str(path)


def assert_all_ok(results: dict):
    for rank, (status, value) in sorted(results.items()):
        assert status == "ok", f"rank {rank}: {value}"
        assert value == [], f"rank {rank}: {value[:3]}"


def test_four_ranks_relaying_ring_every_dtype_and_odd_sizes(tmp_path, programs):
    ring = write(tmp_path, "ring:n=4")  # pairs two hops apart relay through a rank (2 rounds)
    star = write(tmp_path, "switch:n=4")
    cases = [{"path": ring, "dtype": d, "count": c, "native": d in ("float32", "int64")} for d in DTYPES for c in COUNTS]
    cases += [{"path": star, "dtype": "float32", "count": 13, "native": True},
              {"path": ring, "dtype": "float16", "count": 5, "shape": (4, 5)},
              {"path": ring, "dtype": "int64", "count": 7, "noncontig": True}]
    pool = RankPool(4)
    try:
        assert_all_ok(pool.run(programs.check_alltoall, cases))
        paths = {"a2a": ring, "three": write(tmp_path, "ring:n=3"),
                 "tree": str(tmp_path / "tree.json")}
        (tmp_path / "tree.json").write_text(json.dumps(schedule_to_dict(generate(load_topology("ring:n=4"), "allreduce"))))
        assert_all_ok(pool.run(programs.check_alltoall_errors, paths))
    finally:
        pool.close()


def test_eight_ranks_relays_chunks_and_switches(tmp_path, programs):
    dgx1 = write(tmp_path, "dgx-1")  # hybrid cube-mesh: pairs without NVLink relay, several paths per pair
    torus = write(tmp_path, "torus:dims=2x4")  # k=3, relays through ranks
    nvs = write(tmp_path, "dgx-a100")
    cases = [{"path": p, "dtype": d, "count": c, "native": d == "float32"}
             for p in (dgx1, torus, nvs) for d in ("float32", "bfloat16", "int8") for c in (1, 3, 997)]
    assert_all_ok(run_ranks(8, programs.check_alltoall, cases, timeout=240))
