"""The collective vocabulary: one entry per collective, and what every other module reads from it."""

import json
from fractions import Fraction

import pytest
from conftest import SHARED

from forestcoll import collectives
from forestcoll.collectives import ALLGATHER, ALLREDUCE, ALLTOALL, BROADCAST, COLLECTIVES, REDUCE, REDUCE_SCATTER
from forestcoll.errors import UsageError
from forestcoll.msccl.ir import COLLECTIVES as MSCCL_COLLS


def test_names_and_aliases():
    assert collectives.names() == ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce", "alltoall")
    for alias, name in [("all-to-all", "alltoall"), ("All_To_All", "alltoall"), ("AllGather", "allgather"), ("all-gather", "allgather"), ("reducescatter", "reduce_scatter"),
                        ("reduce-scatter", "reduce_scatter"), ("all_reduce", "allreduce"), (" broadcast ", "broadcast")]:
        assert collectives.canonical(alias) == name
    assert collectives.get(ALLREDUCE) is ALLREDUCE
    with pytest.raises(UsageError, match="unknown collective 'gather'; choose one of allgather, reduce_scatter"):
        collectives.get("gather")


def test_phases_and_directions():
    assert ALLREDUCE.phase_names == ("reduce_scatter", "allgather")
    assert [p.direction for p in ALLREDUCE.phases] == ["in", "out"]
    assert collectives.phase("reduce").reversed and not collectives.phase("broadcast").reversed
    assert ALLREDUCE.mirror_of(ALLREDUCE.phases[0]) == ALLGATHER.phases[0]
    assert ALLREDUCE.mirror_of(ALLREDUCE.phases[1]) is None
    assert REDUCE.mirror_of(REDUCE.phases[0]) is None  # no out-tree phase to read backwards


@pytest.mark.parametrize("n", [2, 8, 16])
def test_bus_factor_and_chunks_follow_nccl_tests(n):
    assert ALLREDUCE.bus_factor(n) == Fraction(2 * (n - 1), n)
    assert ALLGATHER.bus_factor(n) == REDUCE_SCATTER.bus_factor(n) == Fraction(n - 1, n)
    assert BROADCAST.bus_factor(n) == REDUCE.bus_factor(n) == 1
    assert collectives.bus_factor("allreduce", n) == ALLREDUCE.bus_factor(n)
    for c in (ALLGATHER, REDUCE_SCATTER, ALLREDUCE):
        assert c.chunks_per_loop(n, 3) == 3 * n and c.shard_bytes(1024, n) == 1024 / n and not c.rooted
    for c in (BROADCAST, REDUCE):
        assert c.chunks_per_loop(n, 3) == 3 and c.shard_bytes(1024, n) == 1024 and c.rooted
    # all-to-all: size/N to every rank, a buffer of N blocks of k chunks, busbw (N-1)/N of algbw (nccl-tests)
    assert ALLTOALL.bus_factor(n) == Fraction(n - 1, n) and ALLTOALL.chunks_per_loop(n, 3) == 3 * n
    assert ALLTOALL.shard_bytes(1024, n) == 1024 / n and not ALLTOALL.tree_based and not ALLTOALL.phases


def test_runtime_names():
    for c in COLLECTIVES.values():
        assert c.msccl in MSCCL_COLLS and collectives.from_msccl(c.msccl) is c
        assert c.tree_based == bool(c.phases)
    assert collectives.from_msccl("alltoall") is ALLTOALL and collectives.from_msccl("gather") is None
    assert REDUCE.mscclpp == "reduce"  # not in MSCCL++'s DSL or NCCL shim; its executor runs it
    plans = sorted((SHARED / "data" / "mscclpp-plans").glob("*.json")) if SHARED.exists() else []
    known = {c.mscclpp for c in COLLECTIVES.values()}
    for path in plans:
        assert json.loads(path.read_text())["collective"] in known, path.name


def test_a_collective_without_trees_is_refused_by_the_tree_machinery(monkeypatch):
    """All-to-all-like entries (tree_based=False, no phases) get a clear error, not a division by zero."""
    from dataclasses import replace

    from forestcoll import fixed_k_algbw, generate, load_topology, optimal_bound

    flows = replace(ALLGATHER, name="flows", aliases=(), phases=(), tree_based=False, msccl=None, mscclpp=None)
    monkeypatch.setitem(COLLECTIVES, "flows", flows)
    monkeypatch.setitem(collectives._BY_ALIAS, "flows", flows)
    topo = load_topology("ring:n=4")
    for call in (lambda: optimal_bound(topo, "flows"), lambda: generate(topo, "flows"),
                 lambda: fixed_k_algbw(topo, "flows", 1)):
        with pytest.raises(UsageError, match="flows is not built from spanning trees"):
            call()
