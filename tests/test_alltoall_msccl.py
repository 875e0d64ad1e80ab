"""All-to-all MSCCL export: the XML lints clean and runs right in the interpreter."""

from __future__ import annotations

import pytest
from conftest import fabrics
from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll.alltoall.msccl import check_alltoall_msccl, export_alltoall_msccl
from forestcoll.alltoall.schedule import generate_alltoall
from forestcoll.msccl.interpreter import run_algo
from forestcoll.msccl.ir import parse_algo
from forestcoll.msccl.lint import lint
from forestcoll.topology import load_topology


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "mi250:nodes=2", "ring:n=5", "switch:n=4", "hypercube:dim=3",
                                  "dgx-1", "torus:dims=3x3"])
def test_catalog_exports_run_right(spec):
    sched = generate_alltoall(load_topology(spec)).schedule
    out = export_alltoall_msccl(sched)
    assert out.ok, out.message
    algo = parse_algo(out.text, spec)
    assert algo.coll == "alltoall" and algo.nchunksperloop == len(sched.ranks) * sched.k
    for runtime in ("msccl-executor-nccl", "rccl"):
        if out.tbs_per_gpu <= 64:
            assert not [f for f in lint(algo, out.text, runtime) if f.severity == "error"]
    for slots, dtype in ((1, "float32"), (2, "int32"), (8, "float16")):
        run = run_algo(algo, mode="out-of-place", slots=slots, dtype=dtype, nbytes=None)
        assert run.ok, (run.errors, run.stuck)


@settings(max_examples=25, deadline=None)
@given(fabrics(max_compute=5, max_switches=2), st.sampled_from([None, 1, 2, 3]))
def test_random_fabrics_export_and_run(topo, chunks):
    sched = generate_alltoall(topo, chunks=chunks).schedule
    out = export_alltoall_msccl(sched)
    if sched.k > 64:
        assert not out.ok and "chunks" in out.message
        return
    assert out.ok, out.message
    assert out.checks and "OK" in out.checks[0]


def test_many_chunks_and_pieces_over_71():
    sched = generate_alltoall(load_topology("ring:n=4"), chunks=149).schedule
    out = export_alltoall_msccl(sched, max_k=200)
    assert out.ok, out.message


def test_refuses_huge_k_with_advice():
    sched = generate_alltoall(load_topology("ring:n=4"), chunks=149).schedule
    out = export_alltoall_msccl(sched)
    assert not out.ok and "chunks=" in out.message


def test_broken_file_is_caught_by_the_check():
    sched = generate_alltoall(load_topology("ring:n=4")).schedule
    out = export_alltoall_msccl(sched, check=False)
    text = out.text.replace('type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"', 'type="cpy" srcbuf="i" srcoff="1" dstbuf="o" dstoff="0"', 1)
    problems, _ = check_alltoall_msccl(text)
    assert problems


def test_bad_options():
    sched = generate_alltoall(load_topology("ring:n=4")).schedule
    assert not export_alltoall_msccl(sched, proto="XX").ok
    assert not export_alltoall_msccl(sched, runtime="nope").ok


def test_h100_dump_exports_with_auto_chunks_and_a_channel_per_nic_route():
    from conftest import shared_file

    topo = load_topology(str(shared_file("data", "nccl-topo", "H100-topology.xml")), {"nodes": "4", "fabric": "rail"})
    sched = generate_alltoall(topo, chunks="auto").schedule
    out = export_alltoall_msccl(sched)
    assert out.ok, out.message
    assert sched.k <= 16 and out.channels == 2  # a GPU pair's two NIC-port routes on two channels
