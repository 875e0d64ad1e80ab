"""All-to-all MSCCL export: the XML lints clean, runs right in the interpreter and keeps to the runtime's limits."""

from __future__ import annotations

import pytest
from conftest import fabrics
from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.alltoall.msccl import export_alltoall_msccl
from forestcoll.msccl.export import ExportError, ExportOptions, export_msccl, self_check
from forestcoll.msccl.interpreter import run_algo
from forestcoll.msccl.ir import parse_algo, write_algo
from forestcoll.msccl.lint import lint
from forestcoll.topology import load_topology


def _text(result) -> str:
    return write_algo(result.algo)


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "mi250:nodes=2", "ring:n=5", "switch:n=4", "hypercube:dim=3",
                                  "dgx-1", "torus:dims=3x3"])
def test_catalog_exports_run_right(spec):
    sched = generate_alltoall(load_topology(spec)).schedule
    out = export_msccl(sched)  # the generic entry point dispatches on the collective
    assert out.ok, out.message
    text = _text(out)
    algo = parse_algo(text, spec)
    assert algo.coll == "alltoall" and algo.nchunksperloop == len(sched.ranks) * sched.k and not algo.inplace
    for runtime in ("msccl-executor-nccl", "rccl"):
        if out.fits(runtime):
            assert not [f for f in lint(algo, text, runtime) if f.severity == "error"]
    for slots, dtype in ((1, "float32"), (2, "int32"), (8, "float16")):
        run = run_algo(algo, mode="out-of-place", slots=slots, dtype=dtype, nbytes=None)
        assert run.ok, (run.errors, run.stuck)


@settings(max_examples=25, deadline=None)
@given(fabrics(max_compute=5, max_switches=2), st.sampled_from([None, 1, 2, 3]), st.booleans())
def test_random_fabrics_export_and_run(topo, chunks, rccl):
    sched = generate_alltoall(topo, chunks=chunks).schedule
    if sched.k > 64:
        with pytest.raises(ExportError, match="chunks"):
            export_alltoall_msccl(sched)
        return
    out = export_alltoall_msccl(sched, ExportOptions(runtime="rccl" if rccl else "msccl-executor-nccl"))
    assert out.ok, out.message
    lines = self_check(out)
    assert lines and "OK" in lines[0]


def test_many_chunks_and_pieces_over_71():
    sched = generate_alltoall(load_topology("ring:n=4"), chunks=149).schedule
    out = export_alltoall_msccl(sched, max_k=200)
    assert self_check(out)


def test_refuses_huge_k_with_advice():
    sched = generate_alltoall(load_topology("ring:n=4"), chunks=149).schedule
    with pytest.raises(ExportError, match="--k"):
        export_alltoall_msccl(sched)


def test_broken_file_is_caught_by_the_check():
    sched = generate_alltoall(load_topology("ring:n=4")).schedule
    out = export_alltoall_msccl(sched)
    step = next(s for tb in out.algo.gpus[0].tbs for s in tb.steps if s.type == "cpy")
    step.srcoff += 1  # copies the wrong block
    with pytest.raises(AssertionError, match="interpreter"):
        self_check(out)


def test_bad_options():
    sched = generate_alltoall(load_topology("ring:n=4")).schedule
    for bad, msg in ((ExportOptions(proto="XX"), "protocol"), (ExportOptions(runtime="nope"), "runtime"),
                     (ExportOptions(instances=2), "instances"),
                     (ExportOptions(inplace=True, outofplace=False), "out of place")):
        with pytest.raises(ExportError if msg in ("instances", "out of place") else Exception, match=msg):
            export_alltoall_msccl(sched, bad)
    more = export_alltoall_msccl(sched, ExportOptions(channels=3))
    assert more.channels >= 3 and self_check(more)


def test_h100_dump_exports_with_auto_chunks_and_a_channel_per_nic_route():
    from conftest import shared_file

    topo = load_topology(str(shared_file("data", "nccl-topo", "H100-topology.xml")), {"nodes": "4", "fabric": "rail"})
    sched = generate_alltoall(topo, chunks="auto").schedule
    out = export_alltoall_msccl(sched)
    assert out.ok, out.message
    assert sched.k <= 16 and out.channels == 2  # a GPU pair's two NIC-port routes on two channels


@pytest.mark.slow
def test_rccl_gets_shared_blocks_or_a_clear_refusal():
    """RCCL allows 64 thread blocks per GPU: sends and receives share blocks when that keeps within it, and a
    schedule that cannot fit is refused with the limit and the way out named."""
    sched = generate_alltoall(load_topology("dgx-a100:nodes=8")).schedule
    plain = export_alltoall_msccl(sched)
    shared = export_alltoall_msccl(sched, ExportOptions(runtime="rccl"))
    assert plain.tbs_per_gpu > 64 >= shared.tbs_per_gpu and shared.fits("rccl")
    assert any("share thread blocks" in n for n in shared.notes)
    assert not [f for f in lint(shared.algo, _text(shared), "rccl") if f.severity == "error"]
    assert self_check(shared)
    big = generate_alltoall(load_topology("dgx-a100:nodes=16")).schedule
    with pytest.raises(ExportError, match=r"rccl allows 64 per GPU: use --runtime msccl-executor-nccl"):
        export_alltoall_msccl(big, ExportOptions(runtime="rccl"))
    # msccl-executor-nccl allows 1,024 blocks, but a kernel's blocks must all be resident: 128 ranks take 135 blocks
    # one peer and direction each, more than an A100's 108 SMs, so sends and receives share blocks there too
    fits = export_alltoall_msccl(big)
    assert fits.tbs_per_gpu <= 108 and any("share thread blocks" in n for n in fits.notes)
    assert not [f for f in lint(fits.algo, _text(fits), "msccl-executor-nccl") if f.severity == "error"]
