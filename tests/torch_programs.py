"""The programs the torch tests run on every rank (in spawned processes, see torch_ranks).

Kept apart from test_torch.py so that collecting the tests does not import torch.
"""

from __future__ import annotations

import time

import torch


def _data(rank: int, numel: int, dtype, seed: int, op: str):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if op == "product":
        x = torch.randint(0, 2, (numel,), generator=g) * 2 - 1  # +-1: products stay exact
    else:
        x = torch.randint(-4, 5, (numel,), generator=g)  # small integers: sums exact in every dtype
    return x.to(dtype)


def _expected(world: int, numel: int, dtype, seed: int, op: str):
    xs = [_data(r, numel, torch.float64, seed, op) for r in range(world)]
    out = xs[0].clone()
    for x in xs[1:]:
        out = {"sum": torch.add, "avg": torch.add, "product": torch.mul, "max": torch.maximum, "min": torch.minimum}[op](out, x)
    if op == "avg":
        out = out / world
    return out.to(dtype), xs


def check_collectives(rank: int, world: int, cases: list[dict]) -> list[str]:
    import torch.distributed as dist

    import forestcoll.torch as fct

    failures = []
    native = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}
    for i, c in enumerate(cases):
        dtype = getattr(torch, c["dtype"])
        op, numel, coll = c.get("op", "sum"), c["numel"], c["coll"]
        want, xs = _expected(world, numel if coll != "reduce_scatter" else numel * world, dtype, i, op)
        mine = _data(rank, want.numel(), dtype, i, op)
        if coll == "all_reduce":
            t = mine.clone()
            if c.get("noncontig"):
                t = torch.stack([t, t], 1)[:, 0]
                assert not t.is_contiguous()
            fct.all_reduce(t, c["path"], op=op)
            got = t
            if c.get("native") and op in native:
                ref = mine.clone()
                dist.all_reduce(ref, op=native[op])
                if not torch.equal(got, ref):
                    failures.append(f"{c}: differs from torch.distributed.all_reduce")
        elif coll == "all_gather":
            want = torch.cat([_data(r, numel, dtype, i, op) for r in range(world)])
            out = torch.zeros(world * numel, dtype=dtype)
            if c.get("inplace"):
                out[rank * numel:(rank + 1) * numel] = mine
                fct.all_gather(out, out[rank * numel:(rank + 1) * numel], c["path"])
            else:
                fct.all_gather(out, mine, c["path"])
            got = out
            if c.get("native"):
                parts = [torch.zeros(numel, dtype=dtype) for _ in range(world)]
                dist.all_gather(parts, mine)
                if not torch.equal(got, torch.cat(parts)):
                    failures.append(f"{c}: differs from torch.distributed.all_gather")
        elif coll == "reduce_scatter":
            before = mine.clone()
            out = torch.zeros(numel, dtype=dtype)
            fct.reduce_scatter(out, mine, c["path"], op=op)
            got, want = out, want[rank * numel:(rank + 1) * numel]
            if not torch.equal(mine, before):
                failures.append(f"{c}: reduce_scatter changed its input")
        elif coll == "broadcast":
            t = mine.clone()
            fct.broadcast(t, c["path"])
            got, want = t, _data(c["root"], numel, dtype, i, op)
            if c.get("native"):
                ref = mine.clone()
                dist.broadcast(ref, c["root"])
                if not torch.equal(got, ref):
                    failures.append(f"{c}: differs from torch.distributed.broadcast")
        elif coll == "reduce":
            t = mine.clone()
            fct.reduce(t, c["path"], op=op)
            got = t if rank == c["root"] else want
            if rank != c["root"] and not torch.equal(t, mine):
                failures.append(f"{c}: reduce changed a non-root tensor")
        if got.dtype != dtype or not torch.equal(got, want):
            bad = (got.to(torch.float64) - want.to(torch.float64)).abs().max().item() if got.numel() else 0
            failures.append(f"rank {rank}: {c} wrong (max error {bad})")
    return failures


def async_equals_rounds(rank: int, world: int, cases: list[dict]) -> list[str]:
    """The asynchronous executor gives the rounds' result bit for bit (integer and float data alike), with
    helper threads (the default) and without; a trace lists every operation of the call."""
    import forestcoll.torch as fct
    from forestcoll.torch import executor

    failures = []
    comms = {}
    for i, c in enumerate(cases):
        if c["path"] not in comms:
            comms[c["path"]] = (fct.Communicator(c["path"], mode="async"), fct.Communicator(c["path"], mode="rounds"),
                                fct.Communicator(c["path"], mode="async", threads=False))
        fast, slow, inorder = comms[c["path"]]
        dtype = getattr(torch, c["dtype"])
        g = torch.Generator().manual_seed(i * 1000 + rank)
        x = (torch.randint(-10**6, 10**6, (c["numel"],), generator=g) if not dtype.is_floating_point
             else torch.randn(c["numel"], generator=g)).to(dtype)
        a, b, d = x.clone(), x.clone(), x.clone()
        fast.trace = []
        if c["coll"] == "all_reduce":
            fast.all_reduce(a, c.get("op", "sum"))
            slow.all_reduce(b, c.get("op", "sum"))
            inorder.all_reduce(d, c.get("op", "sum"))
            ops = fast.async_plan_ops("allreduce", a.numel(), dtype)
        else:
            a, b, d = (torch.zeros(world * c["numel"], dtype=dtype) for _ in range(3))
            fast.all_gather(a, x)
            slow.all_gather(b, x)
            inorder.all_gather(d, x)
            ops = fast.async_plan_ops("allgather", x.numel(), dtype)
        if not torch.equal(a, b):
            failures.append(f"rank {rank}: {c}: async differs from rounds")
        if not torch.equal(d, b):
            failures.append(f"rank {rank}: {c}: async without threads differs from rounds")
        # again (the receive buffer is reused), receives posted 1-3 at a time (ranks differ): another interleaving
        e = x.clone() if c["coll"] == "all_reduce" else torch.zeros(world * c["numel"], dtype=dtype)
        saved, executor._POST_BATCH = executor._POST_BATCH, 1 + rank % 3
        try:
            fast.all_reduce(e, c.get("op", "sum")) if c["coll"] == "all_reduce" else fast.all_gather(e, x)
        finally:
            executor._POST_BATCH = saved
        if not torch.equal(e, b):
            failures.append(f"rank {rank}: {c}: async posting receives 1-3 at a time differs from rounds")
        seen = {(e, j) for _t, e, j in fast.trace}
        if not all((("send" if o.kind == "send" else "apply"), j) in seen for j, o in enumerate(ops)):
            failures.append(f"rank {rank}: {c}: the trace misses operations")
        fast.trace = None
    return failures


def check_errors(rank: int, world: int, paths: dict) -> list[str]:
    import torch.distributed as dist

    import forestcoll.torch as fct
    from forestcoll.errors import ForestCollError

    seen = []

    def expect(fn, text):
        try:
            fn()
        except ForestCollError as exc:
            if text not in str(exc):
                seen.append(f"message {exc!s} lacks {text!r}")
        else:
            seen.append(f"no error for {text}")

    t = torch.ones(8)
    expect(lambda: fct.all_reduce(t, paths["three"]), "group has 4 ranks but the schedule has 3")
    expect(lambda: fct.Communicator(paths["four"], rank_map=[0, 1, 1, 2]), "rank_map must list each group rank")
    expect(lambda: fct.all_reduce(torch.ones(3, dtype=torch.complex64), paths["four"]), "unsupported dtype")
    expect(lambda: fct.all_reduce(torch.ones(3, dtype=torch.int32), paths["four"], op="avg"), "floating-point")
    expect(lambda: fct.all_reduce(t, paths["four"], op="xor"), "unsupported reduction")
    expect(lambda: fct.all_reduce(t, paths["ag"]), "cannot run allreduce")
    expect(lambda: fct.all_gather(torch.zeros(5), t, paths["ag"]), "world size x input")
    # ranks that disagree on the size get an error, not a hang
    n = 10 if rank != 2 else 11
    expect(lambda: fct.all_reduce(torch.ones(n), paths["four"]), "did not make the same call")
    # a rank map: compute node i runs on group rank (i + 1) % 4
    comm = fct.Communicator(paths["four"], rank_map=[1, 2, 3, 0])
    x = torch.full((9,), float(rank))
    comm.all_reduce(x)
    if not torch.equal(x, torch.full((9,), 6.0)):
        seen.append(f"rank map: wrong result {x}")
    # the plan is cached per call shape
    comm.all_reduce(torch.ones(9))
    if len(comm._plans) != 1:
        seen.append(f"plans not cached: {list(comm._plans)}")
    # a subgroup: ranks 1 and 3 run a 2-rank schedule
    sub = dist.new_group([1, 3])
    if rank in (1, 3):
        y = torch.full((5,), float(rank))
        fct.all_reduce(y, paths["two"], group=sub)
        if not torch.equal(y, torch.full((5,), 4.0)):
            seen.append(f"subgroup: wrong result {y}")
    return seen



def dies_or_stalls(rank: int, world: int, path: str, mode: str) -> str:
    import os

    import forestcoll.torch as fct

    comm = fct.Communicator(path, timeout=3, check=False)
    comm.all_reduce(torch.ones(1000))  # everybody is alive for this one
    if rank == 2:
        if mode == "die":
            os._exit(1)
        time.sleep(15)  # stalls: never calls again (the parent kills it once the others have failed)
        return "stalled"
    start = time.monotonic()
    try:
        comm.all_reduce(torch.ones(100000))
    except RuntimeError as exc:
        return f"error after {time.monotonic() - start:.1f} s: {exc}"
    return "no error"



def matmuls(rank: int, world: int, path: str) -> list[str]:
    import forestcoll.torch as fct

    g = torch.Generator().manual_seed(rank)
    a = torch.randint(-3, 4, (24, 16), generator=g).float()
    b = torch.randint(-3, 4, (16, 10), generator=g).float()
    ref = a @ b
    torch.distributed.all_reduce(ref)
    bad = []
    for blocks in (1, 3, 5):
        got = fct.matmul_all_reduce(a, b, path, blocks=blocks)
        if not torch.equal(got, ref):
            bad.append(f"matmul_all_reduce blocks={blocks}")
        rs = fct.matmul_reduce_scatter(a, b, path, blocks=blocks)
        if not torch.equal(rs, ref[rank * 6:(rank + 1) * 6]):
            bad.append(f"matmul_reduce_scatter blocks={blocks}")
    return bad


def check_alltoall(rank: int, world: int, cases: list[dict]) -> list[str]:
    """Each case: forestcoll's all_to_all_single equals a numpy reference (and torch's own, when ``native``)."""
    import numpy as np
    import torch.distributed as dist

    import forestcoll.torch as fct

    failures = []
    for i, c in enumerate(cases):
        dtype, count = getattr(torch, c["dtype"]), c["count"]
        ins = [_data(r, world * count, torch.float64, i, "sum").numpy() + 100 * r for r in range(world)]
        want = np.concatenate([ins[s][rank * count:(rank + 1) * count] for s in range(world)])
        mine = torch.from_numpy(ins[rank]).to(dtype)
        before = mine.clone()
        if c.get("shape"):
            mine = mine.view(*c["shape"])
        out = torch.full_like(mine, -7)
        if c.get("noncontig"):
            out = torch.stack([out, out], -1)[..., 0]
            assert not out.is_contiguous()
        got = fct.all_to_all_single(out, mine, c["path"])
        if got is not out:
            failures.append(f"{c}: did not return output")
        if not np.array_equal(got.reshape(-1).to(torch.float64).numpy(), torch.from_numpy(want).to(dtype).to(torch.float64).numpy()):
            failures.append(f"rank {rank}: {c} differs from the numpy reference")
        if got.dtype != dtype or not torch.equal(mine.reshape(-1), before):
            failures.append(f"rank {rank}: {c} wrong dtype or changed its input")
        if c.get("native"):
            ref = torch.empty_like(before)
            dist.all_to_all_single(ref, before)
            if not torch.equal(ref, got.reshape(-1)):
                failures.append(f"rank {rank}: {c} differs from torch.distributed.all_to_all_single")
    return failures


def check_alltoall_errors(rank: int, world: int, paths: dict) -> list[str]:
    import forestcoll.torch as fct
    from forestcoll.errors import ForestCollError

    seen = []

    def expect(fn, text):
        try:
            fn()
        except ForestCollError as exc:
            if text not in str(exc):
                seen.append(f"message {exc!s} lacks {text!r}")
        else:
            seen.append(f"no error for {text}")

    a2a = paths["a2a"]
    expect(lambda: fct.all_to_all_single(torch.zeros(10), torch.zeros(10), a2a), "multiple of the world size")
    expect(lambda: fct.all_to_all_single(torch.zeros(8), torch.zeros(8, dtype=torch.int32), a2a), "same dtype")
    expect(lambda: fct.all_to_all_single(torch.zeros(8), torch.zeros(8), paths["tree"]), "cannot run alltoall")
    expect(lambda: fct.all_reduce(torch.zeros(8), a2a), "cannot run allreduce")
    expect(lambda: fct.AlltoallCommunicator(paths["three"]), "group has 4 ranks but the schedule has 3")
    # ranks that disagree on the size get an error, not a hang (sizes no earlier call used: a cached plan is
    # not agreed again)
    n = 44 if rank != 1 else 68
    expect(lambda: fct.all_to_all_single(torch.zeros(n), torch.zeros(n), a2a), "did not make the same call")
    # in place (output is input), and a rank map: compute node i runs on group rank (i + 1) % 4
    x = torch.arange(8, dtype=torch.float32) + 10 * rank
    fct.all_to_all_single(x, x, a2a)
    want = torch.tensor([float(10 * s + 2 * rank + j) for s in range(world) for j in range(2)])
    if not torch.equal(x, want):
        seen.append(f"in place: {x} != {want}")
    comm = fct.AlltoallCommunicator(a2a, rank_map=[1, 2, 3, 0])
    y = torch.arange(4, dtype=torch.int64) + 10 * rank
    comm.all_to_all_single(out := torch.zeros(4, dtype=torch.int64), y)
    # blocks are in compute-node order: block s comes from node s (group rank s + 1), whose input block for
    # this rank's node (rank - 1) it is
    if not torch.equal(out, torch.tensor([10 * ((s + 1) % world) + (rank - 1) % world for s in range(world)])):
        seen.append(f"rank map: {out}")
    return seen
