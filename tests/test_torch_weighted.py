"""forestcoll.torch with weighted shards on real gloo ranks (CPU, spawned processes): a weighted allreduce on a
fabric whose boxes differ gives the right sums, the bytes of torch.distributed.all_reduce, and its asynchronous run
equals the rounds bit for bit."""

from __future__ import annotations

import importlib.util
import json

import pytest
from test_weighted_shards import tiny_uneven
from torch_ranks import run_ranks

from forestcoll import generate
from forestcoll.schedule import schedule_to_dict

pytestmark = [pytest.mark.slow,  # spawned processes, each importing torch
              pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")]


def test_weighted_all_reduce_on_gloo(tmp_path):
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch without gloo")
    import torch_programs

    s = generate(tiny_uneven(), "allreduce", shard_weights=(1, 1, 2))
    assert s.shard_weights == (1, 1, 2)
    path = tmp_path / "weighted.json"
    path.write_text(json.dumps(schedule_to_dict(s)))
    cases = [{"coll": "all_reduce", "path": str(path), "dtype": d, "numel": n, "native": d in ("float32", "int64")}
             for d in ("float32", "bfloat16", "int64") for n in (1, 2, 13, 1031, 65537)]
    cases += [{"coll": "all_reduce", "path": str(path), "dtype": "float32", "numel": 1001, "op": op, "native": True}
              for op in ("max", "min", "product")]
    for rank, (status, value) in sorted(run_ranks(3, torch_programs.check_collectives, cases).items()):
        assert status == "ok" and value == [], (rank, value)
    cases = [{"coll": "all_reduce", "path": str(path), "dtype": d, "numel": n, "op": "sum"}
             for d in ("int64", "float32") for n in (1, 997, 70001)]
    for rank, (status, value) in sorted(run_ranks(3, torch_programs.async_equals_rounds, cases).items()):
        assert status == "ok" and value == [], (rank, value)


def test_weighted_all_reduce_from_32mib_on_gloo(tmp_path):
    """From 32 MiB each root broadcasts only once its whole shard is reduced (shard_pieces.root_waits): the
    asynchronous run (with helper threads and without) still equals the rounds bit for bit, and both equal
    torch.distributed.all_reduce on integer data; nothing deadlocks."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch without gloo")
    import torch_programs

    from forestcoll.shard_pieces import ROOT_WAITS_BYTES

    s = generate(tiny_uneven(), "allreduce", shard_weights=(1, 1, 2))
    path = tmp_path / "weighted.json"
    path.write_text(json.dumps(schedule_to_dict(s)))
    numel = ROOT_WAITS_BYTES // 8 + 3  # int64: just above the threshold
    cases = [{"coll": "all_reduce", "path": str(path), "dtype": "int64", "numel": numel, "native": True}]
    for rank, (status, value) in sorted(run_ranks(3, torch_programs.check_collectives, cases).items()):
        assert status == "ok" and value == [], (rank, value)
    cases = [{"coll": "all_reduce", "path": str(path), "dtype": "int64", "numel": numel, "op": "sum"}]
    for rank, (status, value) in sorted(run_ranks(3, torch_programs.async_equals_rounds, cases).items()):
        assert status == "ok" and value == [], (rank, value)
