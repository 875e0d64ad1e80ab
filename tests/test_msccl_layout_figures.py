"""The exporter's layout figures (steps per thread block, thread blocks per GPU, ...) are counted per tree edge
before any operation is built: they must equal the figures of the operations built, and a layout that does not
fit builds none (the even-pieces attempts on the MI300 / H100 allreduce files cost 6-25 s building them)."""

from __future__ import annotations

import pytest
from conftest import shared_file

import forestcoll.msccl.export as export
from forestcoll.generate import generate
from forestcoll.msccl.export import ExportOptions, _build_ops, export_msccl
from forestcoll.msccl.ordering import (
    _channel_figures,
    _channel_of,
    _edges,
    _even_pieces,
    _heavy_offsets,
    _predicted_figures,
    _stage,
    _tree_loads,
    edge_ports,
)
from forestcoll.pieces import cut_pieces, shape_trees
from forestcoll.topology import load_topology


@pytest.mark.parametrize("spec, collective, k", [
    ("hypercube:dim=3", "allreduce", 4),
    ("hypercube:dim=3", "allgather", 4),
    ("dgx-a100:nodes=2", "allreduce", 2),
    ("dgx-a100:nodes=2", "allgather", 2),
    ("dgx-a100:nodes=2", "reduce_scatter", 1),
    ("dgx-a100:nodes=2", "broadcast", 2),
    ("dgx-a100:nodes=2", "reduce", 2),
])
def test_predicted_figures_are_the_built_ones(spec, collective, k):
    sched = generate(load_topology(spec), collective, k=k)
    trees = shape_trees(sched)
    n = len(sched.ranks)
    ports = edge_ports(sched, trees)
    from forestcoll import collectives
    coll = collectives.get(collective)
    for kk, pieces in (cut_pieces(sched, trees, 1), cut_pieces(sched, trees, 71), _even_pieces(sched, trees, 4, 4)):
        for layout, spread, widths in (("stage", True, None), ("stage", False, None), ("tree", True, None),
                                       ("stage", True, "bands")):
            for channels in (1, 3, 8, 16):
                for inst, outofplace in ((1, True), (2, False)):
                    wide = None
                    if widths == "bands":
                        stages = export.stages(pieces)[0]
                        if channels < stages:
                            continue
                        wide = [1] * stages
                        wide[0] += channels - stages
                    chan_of = _channel_of(pieces, channels, layout, ports, spread, wide)
                    two_phase = len(coll.phases) > 1
                    predicted = _predicted_figures(pieces, n, inst, chan_of, outofplace and not coll.reduces, two_phase)
                    ops, _scratch = _build_ops(sched, pieces, kk, n, inst, channels, outofplace, layout, "progress",
                                               ports, spread, None, wide)
                    assert predicted == _channel_figures(ops, n), (layout, spread, widths, channels, inst)


def test_layouts_that_do_not_fit_build_no_operations(monkeypatch):
    sched = generate(load_topology("hypercube:dim=3"), "allreduce", k=16)
    calls: list[int] = []
    layouts: list[int] = []
    real_build, real_layout = export._build_ops, export._layout

    def build(*args, **kwargs):
        calls.append(1)
        return real_build(*args, **kwargs)

    def layout(*args, **kwargs):
        found = real_layout(*args, **kwargs)
        layouts.append(found[0])
        return found
    monkeypatch.setattr(export, "_build_ops", build)
    monkeypatch.setattr(export, "_layout", layout)
    export_msccl(sched, ExportOptions(per_tree=None, runtime="rccl"))
    assert len(calls) == len(layouts)  # one build per layout that fits, none for the candidates that do not


def test_heavy_offsets_spread_only_the_blocks_over_the_limit():
    sched = generate(load_topology("hypercube:dim=3"), "allreduce", k=16)
    trees = shape_trees(sched)
    _k, pieces = _even_pieces(sched, trees, 4, 4)
    stages = export.stages(pieces)[0]
    load, shapes = _tree_loads(pieces)
    limit = 24
    offsets = _heavy_offsets(pieces, 4 * stages, None, limit)
    assert offsets and max(offsets.values()) <= 3
    groups: dict = {}
    for tid, t in shapes.items():
        for x, y in _edges(t):
            groups.setdefault((x, y, _stage(t, x, y, export.stages(pieces)[1])), []).append(tid)
    for (x, y, _st), tids in groups.items():
        total = sum(load[tid] for tid in tids)
        moved = [(tid, x, y) in offsets for tid in tids]
        assert all(moved) if total > limit else not any(moved)
        if total > limit:  # each channel of the pair's stage within the limit where the trees allow it
            bins: dict[int, int] = {}
            for tid in tids:
                bins[offsets[(tid, x, y)]] = bins.get(offsets[(tid, x, y)], 0) + load[tid]
            assert len(bins) == min(4, -(-total // limit))
            assert max(bins.values()) <= max(limit, -(-total // 4) + max(load[tid] for tid in tids))


def test_even_pieces_spread_heavy_blocks_when_nothing_else_fits():
    """MI300 x4 rail allreduce k=8, every range in 4 pieces of 4 chunks: with one channel per stage a block holds 76
    steps; a full band of 16 channels would need 164 thread blocks (over the 108 kept resident).  Spreading only
    the blocks over 64 steps fits: 32 channels, 107 thread blocks, 64 steps (189.0 GB/s at 1 GiB, 0.954 of the
    bound, where k=4's file written before reached 180.9)."""
    topo = load_topology(str(shared_file("data", "nccl-topo", "topo_8p_940.xml")), {"nodes": "4", "fabric": "rail"})
    sched = generate(topo, "allreduce", k=8)
    result = export_msccl(sched, ExportOptions(split=4, per_tree=4))
    assert (result.channels, result.tbs_per_gpu, result.steps_per_tb) == (32, 107, 64)
    assert result.algo.nchunksperloop == 1024
    # the classic pieces are untouched: the new layout is tried only for even pieces, after every other
    plain = export_msccl(sched)
    assert (plain.channels, plain.tbs_per_gpu, plain.steps_per_tb) == (16, 97, 33)
