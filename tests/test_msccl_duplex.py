"""Duplex thread blocks (msccl/duplex.py): a send and a receive stream of one GPU and channel share a <tb> when the
blocks would exceed the runtime's limit; the steps follow the global key, so the file cannot deadlock."""

from __future__ import annotations

from dataclasses import replace

import pytest

from forestcoll.generate import generate
from forestcoll.msccl import duplex
from forestcoll.msccl.export import ExportError, ExportOptions, export_msccl, self_check
from forestcoll.msccl.interpreter import run_algo
from forestcoll.msccl.ir import parse_algo, write_algo
from forestcoll.msccl.lint import RUNTIMES, lint
from forestcoll.topology import load_topology


@pytest.fixture
def tiny(monkeypatch):
    """A runtime like RCCL that allows 8 thread blocks per GPU (dgx-a100's k=1 allreduce needs 14 unmerged)."""
    monkeypatch.setitem(RUNTIMES, "tiny", replace(RUNTIMES["rccl"], name="tiny", tbs_per_gpu=8))
    return "tiny"


@pytest.fixture(scope="module")
def allreduce():
    return generate(load_topology("dgx-a100"), "allreduce")


def test_pairs_as_many_as_fit_the_step_limit():
    steps = {(0, "send", 1, 0): 30, (0, "send", 2, 0): 10, (0, "recv", 1, 0): 40, (0, "recv", 2, 0): 60,
             (0, "send", 3, 1): 5, (0, "local", -1, 0): 2}
    got = duplex.pairs(steps, 64)
    # recv 2 (60) fits no send, recv 1 (40) takes the smallest send that fits; channel 1 has no receive block
    assert got == {(0, "send", 2, 0): (0, "recv", 1, 0)}
    assert duplex.figures(steps, 1, 64) == (60, 5, 2, 3)


def test_pairs_only_as_many_as_the_target_needs_forwarding_pairs_first():
    steps = {(0, "send", 1, 0): 4, (0, "send", 2, 0): 4, (0, "recv", 3, 0): 4, (0, "recv", 4, 0): 4}
    assert len(duplex.pairs(steps, 64)) == 2
    forward = {((0, "send", 2, 0), (0, "recv", 4, 0)): 4}
    assert duplex.pairs(steps, 64, forward, target=3) == {(0, "send", 2, 0): (0, "recv", 4, 0)}


def test_blocks_over_the_limit_share_and_the_file_runs(allreduce, tiny):
    with pytest.raises(ExportError, match="14 thread blocks on one GPU"):
        export_msccl(allreduce, ExportOptions(runtime=tiny))
    r = export_msccl(allreduce, ExportOptions(runtime=tiny, duplex=True))
    assert r.ok and r.tbs_per_gpu == 8 and r.algo.name.endswith("_duplex")
    assert any("share thread blocks" in note for note in r.notes)
    both = [tb for g in r.algo.gpus for tb in g.tbs if tb.send >= 0 and tb.recv >= 0]
    assert both and all(len(g.tbs) <= 8 for g in r.algo.gpus)
    text = write_algo(r.algo)
    assert not [f for f in lint(parse_algo(text), text, tiny) if f.severity == "error"]
    assert len(self_check(r)) == 2  # every mode, one slot per connection: no deadlock, no race, right result


def test_a_file_that_fits_is_unchanged(allreduce):
    plain = export_msccl(allreduce, ExportOptions(runtime="rccl"))
    assert write_algo(export_msccl(allreduce, ExportOptions(runtime="rccl", duplex=True)).algo) == write_algo(plain.algo)


def test_a_merge_against_the_key_deadlocks(allreduce, tiny, monkeypatch):
    """The same blocks with each merged block's receives first (not in the key order) hang with one slot."""
    monkeypatch.setattr(duplex, "step_key", lambda op: (op.kind != "recv", op.key))
    bad = export_msccl(allreduce, ExportOptions(runtime=tiny, duplex=True))
    run = run_algo(parse_algo(write_algo(bad.algo)), slots=1, race_check=False)
    assert run.deadlocked


def test_fabrics_do_not_merge_by_default():
    """Duplex blocks are a library option: merged files measured slower on every RCCL fabric (docs/msccl.md)."""
    from forestcoll.msccl.fabric import for_gpu
    from forestcoll.topology.device import GPUS

    assert not for_gpu(None, GPUS["MI300X"]).duplex
    assert not for_gpu(None, GPUS["A100"]).duplex


@pytest.mark.parametrize("spec, collective, k", [("hypercube:dim=3", "allreduce", 4),
                                                 ("dgx-a100:nodes=2", "allgather", 2)])
def test_predicted_pairs_are_the_built_ones(spec, collective, k):
    """The layout counts forwarding pairs from the trees; the blocks are merged by those counted from the built
    operations: they must agree, or a file predicted to fit could be built over the limit."""
    from forestcoll import collectives
    from forestcoll.msccl.export import _build_ops
    from forestcoll.msccl.ordering import _channel_of, _step_counts, edge_ports
    from forestcoll.pieces import cut_pieces, shape_trees

    sched = generate(load_topology(spec), collective, k=k)
    trees = shape_trees(sched)
    n, ports = len(sched.ranks), edge_ports(sched, trees)
    coll = collectives.get(collective)
    two_phase = len(coll.phases) > 1
    kk, pieces = cut_pieces(sched, trees, 2)
    for layout, channels, inst in (("stage", 1, 1), ("stage", 3, 2), ("tree", 2, 1)):
        chan_of = _channel_of(pieces, channels, layout, ports, True, None)
        ops, _scratch = _build_ops(sched, pieces, kk, n, inst, channels, True, layout, "progress", ports)
        assert duplex.affinities(pieces, inst, chan_of) == duplex.op_affinities(ops)
        counted = _step_counts(pieces, inst, chan_of, not coll.reduces, two_phase)
        target = max(sum(1 for key in counted if key[0] == g) for g in range(n)) * 2 // 3
        predicted = duplex.figures(counted, n, 64, duplex.affinities(pieces, inst, chan_of), target)
        layout_built, blocks = duplex.assign(ops, n, 64, duplex.op_affinities(ops), target)
        assert predicted[1] == max(len(x) for x in layout_built)
        assert predicted[0] == max(len(v) for v in blocks.values())


def test_even_pieces_that_fit_unmerged_are_unchanged(allreduce):
    opts = ExportOptions(runtime="rccl", per_tree=None, max_bytes=1 << 30)
    assert (write_algo(export_msccl(allreduce, replace(opts, duplex=True)).algo)
            == write_algo(export_msccl(allreduce, opts).algo))
