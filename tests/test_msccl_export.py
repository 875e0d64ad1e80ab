"""Lowering schedules to MSCCL: layout, options, limits, and every catalog schedule running correctly."""

from __future__ import annotations

from fractions import Fraction

import pytest
from conftest import fabrics, refused_for_imbalance
from hypothesis import given
from hypothesis import strategies as st

from forestcoll.errors import UsageError
from forestcoll.generate import generate
from forestcoll.msccl.export import ExportError, ExportOptions, export_msccl, fitting_msccl, self_check
from forestcoll.msccl.interpreter import run_algo, run_modes
from forestcoll.msccl.ir import parse_algo, write_algo
from forestcoll.msccl.lint import lint
from forestcoll.topology import load_topology

COLLECTIVES = ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce")
# the catalog at sizes that keep CI fast (mi250:nodes=2 is in benchmarks/interpreter.py)
CATALOG = ["dgx-a100:nodes=2", "dgx-h100", "dgx-b200", "hgx-h100", "hgx-h100:nics=4", "mi250", "mi300x", "dgx-1",
           "ndv2", "hetero", "ring:n=6", "torus:dims=3x3", "hypercube:dim=3", "fully-connected:n=5", "switch:n=4",
           "dgx-h100:nodes=2"]
SLOW = {"dgx-a100:nodes=2", "hgx-h100", "hgx-h100:nics=4", "mi250", "dgx-1", "ndv2", "hetero", "dgx-h100:nodes=2"}


@pytest.mark.parametrize("spec", [pytest.param(s, marks=[pytest.mark.slow] if s in SLOW else []) for s in CATALOG])
def test_catalog_schedules_export_and_run(spec):
    """Optimal k and k = 1, every collective: lint-clean for both runtimes, right results in both buffer
    modes with one slot per connection, no data race."""
    topo = load_topology(spec)
    for coll in COLLECTIVES:
        for k in (None, 1):
            sched = generate(topo, coll, k=k)
            result = export_msccl(sched, runtime="rccl")
            assert result.fits("rccl") and result.fits("msccl-executor-nccl")
            text = write_algo(result.algo)
            algo = parse_algo(text)
            for runtime in ("rccl", "msccl-executor-nccl"):
                assert [f for f in lint(algo, text, runtime) if f.severity == "error"] == []
            lines = self_check(result)
            assert len(lines) == 2 and all("OK" in line for line in lines)


def test_chunk_layout_allgather():
    sched = generate(load_topology("ring:n=4"), "allgather", k=2)
    algo = export_msccl(sched).algo
    assert algo.coll == "allgather" and algo.nchunksperloop == 8
    assert [(g.i_chunks, g.o_chunks) for g in algo.gpus] == [(2, 8)] * 4
    # rank 0 copies its input to its own output block first, then sends from there (out-of-place)
    local = [tb for tb in algo.gpus[0].tbs if tb.send == -1 and tb.recv == -1]
    assert len(local) == 1 and {st.type for st in local[0].steps} == {"cpy"}
    assert all(st.hasdep == 1 for st in local[0].steps)
    # receiving and copying blocks come first: dependency targets need small ids
    kinds = ["recv" if tb.recv >= 0 else "local" if tb.send < 0 else "send" for tb in algo.gpus[0].tbs]
    assert kinds == sorted(kinds, key=["recv", "local", "send"].index)


def test_in_place_only_sends_from_the_input():
    sched = generate(load_topology("ring:n=4"), "allgather", k=1)
    algo = export_msccl(sched, inplace=True, outofplace=False).algo
    assert (algo.inplace, algo.outofplace) == (1, 0)
    assert not any(tb.send == -1 and tb.recv == -1 for g in algo.gpus for tb in g.tbs)
    assert all(r.ok for r in run_modes(algo, slots=1))


def test_reduce_scatter_uses_scratch_for_partial_sums():
    sched = generate(load_topology("ring:n=5"), "reduce_scatter", k=1)
    algo = export_msccl(sched).algo
    assert algo.coll == "reducescatter" and algo.nchunksperloop == 5
    assert all((g.i_chunks, g.o_chunks) == (5, 1) for g in algo.gpus)
    assert any(g.s_chunks > 0 for g in algo.gpus)
    assert {st.type for g in algo.gpus for tb in g.tbs for st in tb.steps} == {"s", "rrc"}


def test_allreduce_waits_for_reduction_before_broadcasting():
    sched = generate(load_topology("fully-connected:n=4"), "allreduce", k=1)
    algo = export_msccl(sched).algo
    assert algo.gpus[0].s_chunks == 0  # partial sums live in the output buffer
    for g in algo.gpus:
        for tb in g.tbs:
            for x in tb.steps:
                if x.type == "s" and x.srcbuf == "o" and x.srcoff // sched.k == g.id:
                    target = g.tbs[x.depid].steps[x.deps]
                    assert target.type == "rrc" and target.hasdep == 1


def test_multiplicity_and_count_split():
    """Trees carrying more than 71 chunks are cut into steps of at most 71."""
    sched = generate(load_topology("ring:n=3"), "broadcast", k=150)
    result = export_msccl(sched)
    counts = [st.cnt for g in result.algo.gpus for tb in g.tbs for st in tb.steps]
    assert max(counts) <= 71 and sum(c for c in counts) >= 150
    assert all(r.ok for r in run_modes(result.algo, slots=1))


def test_instances_and_channels():
    sched = generate(load_topology("ring:n=4"), "allreduce", k=1)
    one = export_msccl(sched)
    two = export_msccl(sched, instances=2, channels=2, proto="LL128", min_bytes=1024, max_bytes=1 << 20, name="ar")
    a = two.algo
    assert (a.name, a.proto, a.min_bytes, a.max_bytes) == ("ar", "LL128", 1024, 1 << 20)
    assert a.nchannels == 4 and a.nchunksperloop == 2 * one.algo.nchunksperloop
    assert {tb.chan for g in a.gpus for tb in g.tbs} <= {0, 1, 2, 3}
    assert all(r.ok for r in run_modes(a, slots=1))


def test_bad_options():
    sched = generate(load_topology("ring:n=4"), "allgather", k=1)
    for kw in ({"proto": "LL64"}, {"instances": 0}, {"runtime": "mpich"}, {"inplace": False, "outofplace": False},
               {"min_bytes": 10, "max_bytes": 5}, {"channels": 0}, {"max_cnt": 72}):
        with pytest.raises(Exception, match=r"."):
            export_msccl(sched, **kw)
    with pytest.raises(ExportError, match="exceed the 32 channels"):
        export_msccl(sched, ExportOptions(instances=8, channels=5))


def test_limit_steps_per_thread_block():
    """One channel cannot hold mi250 x2's optimal allreduce (it needs three): say so and what to do."""
    topo = load_topology("mi250:nodes=2")
    sched = generate(topo, "allreduce")
    with pytest.raises(ExportError, match=r"needs \d+ steps; msccl-executor-nccl allows 64.*--k 1"):
        export_msccl(sched, channels=1, max_cnt=71)
    assert export_msccl(sched, layout="tree", max_cnt=71).channels == 3
    # a channel per pipeline stage, folded until the limits hold (the optimal allreduce, 163 trees per phase since
    # in-box pairs stay off the network switch, no longer fits 64 steps per block: generate writes a smaller k)
    stage = export_msccl(generate(topo, "allgather"))
    assert stage.steps_per_tb <= 64 and stage.channels <= 32


def test_limit_thread_blocks_per_gpu():
    """RCCL runs at most 64 thread blocks per GPU; 40 fully connected GPUs need 79 at k = 1 (39 + 39 + a copier)."""
    sched = generate(load_topology("fully-connected:n=40"), "allgather", k=1)
    with pytest.raises(ExportError, match=r"79 thread blocks on one GPU with 1 channel\(s\); rccl allows 64: "
                                          r"use --runtime msccl-executor-nccl"):
        export_msccl(sched, runtime="rccl")
    # msccl-executor-nccl takes them, spread over two channels: at most 32 send and 32 receive tbs per channel
    result = export_msccl(sched)
    assert result.fits("msccl-executor-nccl") and result.channels == 2
    text = write_algo(result.algo)
    assert [f for f in lint(parse_algo(text), text) if f.severity == "error"] == []


def test_notes_about_sizes_the_runtime_accepts():
    sched = generate(load_topology("dgx-a100:nodes=2"), "allgather")  # k = 13
    notes = export_msccl(sched).notes
    assert any("count a multiple of 13" in n for n in notes)
    assert export_msccl(generate(load_topology("ring:n=4"), "allgather", k=2)).notes == []


@given(fabrics(max_compute=5, max_switches=2), st.sampled_from(COLLECTIVES), st.sampled_from([None, 1, 3]))
def test_random_fabrics_export_and_run(topo_or_error, coll, k):
    topo = topo_or_error
    try:
        sched = generate(topo, coll, k=k)
    except Exception as exc:  # the only refusal random fabrics earn
        assert refused_for_imbalance(exc), exc
        return
    try:
        result = export_msccl(sched)
    except ExportError as exc:  # a deep optimum can exceed the runtime's steps per block: then a smaller k must fit
        assert "steps" in str(exc) and sched.k > 1, exc
        found = fitting_msccl(topo, coll, sched)
        assert found is not None, exc
        result = export_msccl(found[0])
    for r in run_modes(result.algo, slots=1, op="max", dtype="int32"):
        assert r.ok, (r.mode, r.errors[:2], [s.format() for s in r.stuck[:2]])


def test_exports_are_deterministic():
    sched = generate(load_topology("dgx-1"), "allreduce")
    assert write_algo(export_msccl(sched).algo) == write_algo(export_msccl(sched).algo)


def test_run_in_small_message_regime():
    sched = generate(load_topology("hypercube:dim=3"), "allreduce", k=2)
    algo = export_msccl(sched, proto="LL", max_bytes=65536).algo
    r = run_algo(algo)
    assert r.ok and r.max_count > 1 and r.iterations == 1


def test_fitting_msccl_takes_the_fastest_k_that_fits(tmp_path):
    """dgx-1 allreduce: the optimal k=162 in one channel of single-chunk steps needs 868 steps per thread block
    (> 64); the fallback exports a power of two below it whose file fits, the fastest by the given rate."""
    from forestcoll.generate import generate
    from forestcoll.msccl.export import ExportError, ExportOptions, export_msccl, fitting_msccl, write_generated_msccl
    from forestcoll.topology import load_topology

    topo = load_topology("dgx-1")
    sched = generate(topo, "allreduce")
    opts = ExportOptions(channels=1, max_cnt=1)
    with pytest.raises(ExportError, match="steps"):
        export_msccl(sched, opts)
    seen = {}

    def rate(s, size):
        seen[s.k] = float(s.algbw)
        return float(s.algbw) - s.k / 1000  # exact rate, ties broken towards the smaller k
    found = fitting_msccl(topo, "allreduce", sched, opts, rate)
    assert found is not None
    fallback, how = found
    assert fallback.k < sched.k and fallback.k in seen and "fastest" in how
    assert rate(fallback, 0) == max(a - k / 1000 for k, a in seen.items())
    assert export_msccl(fallback, opts).steps_per_tb <= 64
    top, how = fitting_msccl(topo, "allreduce", sched, opts)  # no rate: the highest exact rate that fits
    assert float(top.algbw) == max(seen.values()) and "exact rate" in how
    files = {}

    def file_rate(algo, size):
        files[algo.nchunksperloop] = algo
        return -algo.nchunksperloop  # the file with the fewest chunks per loop wins
    by_file, how = fitting_msccl(topo, "allreduce", sched, opts, file_rate=file_rate)
    assert by_file.k == min(seen) and "files simulated" in how and len(files) == len(seen)
    out, result = write_generated_msccl(topo, sched, str(tmp_path / "a.xml"), opts, check=True, rate=rate)
    assert out.k == fallback.k and (tmp_path / "a.xml").exists()
    assert result.notes[0].startswith(f"the optimal k={sched.k} does not fit")


def test_steps_go_in_the_trees_progress_order():
    """Each piece's progress is how far into its trees it starts: 0 for a tree's first piece, increasing along a
    tree's pieces, one value per piece in both phases; the two orders give different files, both deadlock-free
    with one slot per connection."""
    from forestcoll.msccl.export import _progress
    from forestcoll.pieces import cut_pieces, shape_trees

    gather = generate(load_topology("hypercube:dim=3"), "allgather")
    _k, pieces = cut_pieces(gather, shape_trees(gather), 1)
    prog = _progress(pieces)
    for t in {id(pc.trees[0]): pc.trees[0] for pc in pieces}.values():
        mine = sorted((pc for pc in pieces if pc.trees[0] is t), key=lambda pc: pc.start)
        assert [prog[id(pc)] for pc in mine] == [Fraction(i, len(mine)) for i in range(len(mine))]
    sched = generate(load_topology("hypercube:dim=3"), "allreduce")
    by_progress, by_tree = export_msccl(sched), export_msccl(sched, order="tree")
    assert write_algo(by_progress.algo) != write_algo(by_tree.algo)
    for res in (by_progress, by_tree):
        assert len(self_check(res)) == 2
    with pytest.raises(UsageError, match="step order"):
        export_msccl(sched, order="sideways")


@pytest.mark.parametrize(("spec", "collective", "k"), [("dgx-a100:nodes=2", "allreduce", None),
                                                      ("mi250:nodes=2", "allgather", 2),
                                                      ("mi250:nodes=2", "allreduce", 1)])
def test_latency_order_moves_steps_only(spec, collective, k):
    """The latency order (levels counted in physical links, :func:`_hop_levels`) keeps every thread block's steps and
    reorders them only; each edge's level grows along its tree by the links of its path; the file stays deadlock-free
    with one slot per connection."""
    from forestcoll.msccl.export import _hop_levels
    from forestcoll.pieces import shape_trees

    sched = generate(load_topology(spec), collective, k=k)
    trees = shape_trees(sched)
    levels = _hop_levels(sched, trees)
    index = {r: i for i, r in enumerate(sched.ranks)}
    for shape, tree in zip(trees, sched.trees):
        for e in tree.edges:
            x, y = index[e.src], index[e.dst]
            if shape.direction == "out":
                assert levels[(id(shape), y)] == levels[(id(shape), x)] + len(e.path) - 1
            else:  # an in-tree node's level is when its data reaches its parent: after all its children's
                assert levels[(id(shape), x)] >= len(e.path) - 1
                assert y == shape.root or levels[(id(shape), y)] > levels[(id(shape), x)]
    plain, hops = export_msccl(sched), export_msccl(sched, order="latency")

    def blocks(res):
        return {(g.id, tb.id, tb.send, tb.recv, tb.chan): sorted((st.type, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff,
                                                                   st.cnt) for st in tb.steps)
                for g in res.algo.gpus for tb in g.tbs}

    assert blocks(plain) == blocks(hops)
    assert len(self_check(hops)) == 2


def test_edges_on_two_ports_go_on_channels_of_their_ports_residue():
    """When the trees route one pair over two paths (a dual-port NIC), the edge on the first path (by names) goes
    on an even channel and the other on an odd one, as the runtime picks a pair's port by channel mod 2; the file
    still runs right with one slot per connection."""
    from dataclasses import replace

    from forestcoll.msccl.export import _build_ops, edge_ports, stages
    from forestcoll.pieces import cut_pieces, shape_trees

    sched = generate(load_topology("dgx-a100:nodes=2"), "allgather")
    pairs: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for i, t in enumerate(sched.trees):
        for j, e in enumerate(t.edges):
            if len(e.path) > 2:
                pairs.setdefault((e.src, e.dst), []).append((i, j))
    (src, dst), uses = next((p, u) for p, u in sorted(pairs.items()) if len(u) >= 2)
    i, j = uses[1]
    edges = list(sched.trees[i].edges)
    edges[j] = replace(edges[j], path=(edges[j].path[0], *(v + "~port1" for v in edges[j].path[1:-1]),
                                        edges[j].path[-1]))
    trees = list(sched.trees)
    trees[i] = replace(trees[i], edges=tuple(edges))
    two = replace(sched, trees=tuple(trees))
    shapes = shape_trees(two)  # edge_ports names trees by id: the same shapes for the pieces
    ports = edge_ports(two, shapes)
    assert sorted(ports.values()) == [(0, 2)] * (len(uses) - 1) + [(1, 2)]
    x, y = two.ranks.index(src), two.ranks.index(dst)
    k, pieces = cut_pieces(two, shapes, 71)
    n_stages = stages(pieces)[0]
    for channels in (n_stages, 2 * n_stages):  # one channel per stage (the nearest), a band of two (inside it)
        ops, _scratch = _build_ops(two, pieces, k, len(two.ranks), 1, channels, True, ports=ports)
        sends = [op for op in ops if op.kind == "send" and op.gpu == x and op.peer == y]
        assert sends and all(op.chan % 2 == (op.key[5] == i) for op in sends)  # key[5]: the tree's order
    res = export_msccl(two)
    assert len(self_check(res)) == 2


def test_split_cuts_every_chunk_into_s_msccl_chunks():
    """``split=s`` (one MSCCL chunk per step with ``max_cnt=1``): s times the chunks per loop and s times the steps,
    the same thread blocks; the file lints and runs right with one slot per connection; bad values are refused."""
    sched = generate(load_topology("dgx-a100:nodes=2"), "allreduce", k=1)
    one, four = export_msccl(sched, max_cnt=1), export_msccl(sched, split=4, max_cnt=1)
    assert four.algo.nchunksperloop == 4 * one.algo.nchunksperloop
    assert four.total_steps == 4 * one.total_steps and four.tbs_per_gpu == one.tbs_per_gpu
    assert four.algo.name.endswith("_s4")
    assert len(self_check(four)) == 2
    for bad in (0, 65):
        with pytest.raises(UsageError, match="split"):
            ExportOptions(split=bad).check()


def test_split_file_keeps_its_trees_rate_at_16MiB():
    """At 16 MiB each MSCCL chunk of the dgx-a100:nodes=2 k=1 allreduce file is 1 MiB, one kernel iteration of two
    slices: each tree crosses its hops in two transfers and the file reaches 0.79 of its trees; split into 8 chunks a
    tree moves in 16 transfers and the file keeps its trees' rate (default model)."""
    from forestcoll.simulate.core import simulate
    from forestcoll.simulate.msccl import simulate_msccl
    from forestcoll.simulate.network import build_network

    topo = load_topology("dgx-a100:nodes=2")
    net = build_network(topo)
    sched = generate(topo, "allreduce", k=1)
    size = 16 << 20
    trees = simulate(net, sched, size=size).algbw_gbps
    plain = simulate_msccl(export_msccl(sched).algo, net, size).algbw_gbps
    split = simulate_msccl(export_msccl(sched, split=8, max_cnt=1).algo, net, size).algbw_gbps
    assert plain < 0.85 * trees
    assert split >= 0.98 * trees


def test_even_pieces_cut_every_tree_range_into_as_many_pieces():
    """``per_tree=P`` (:func:`_even_pieces`): every range of chunks that lies in one tree per phase becomes min(its
    chunks, P) consecutive pieces whose sizes differ by at most one, covering the range; with ``split=s`` the range
    is s times longer; the file lints and runs right with one slot per connection; bad values are refused."""
    from collections import defaultdict

    from forestcoll.msccl.export import _even_pieces
    from forestcoll.pieces import cut_pieces, shape_trees

    sched = generate(load_topology("dgx-a100:nodes=2"), "allreduce", k=8)
    shapes = shape_trees(sched)
    for per, split in ((4, 1), (8, 8)):
        _k, whole = cut_pieces(sched, shapes, 1 << 40, split)
        k, pieces = _even_pieces(sched, shapes, per, split)
        assert k == 8 * split
        ranges = defaultdict(list)
        for pc in pieces:
            ranges[(pc.root, tuple(id(t) for t in pc.trees))].append(pc)
        for rng in whole:
            mine = [pc for pc in ranges[(rng.root, tuple(id(t) for t in rng.trees))]
                    if rng.start <= pc.start < rng.start + rng.cnt]
            assert len(mine) == min(rng.cnt, per)
            assert sum(pc.cnt for pc in mine) == rng.cnt and max(pc.cnt for pc in mine) - min(pc.cnt for pc in mine) <= 1
            assert [pc.start for pc in mine] == [rng.start + sum(p.cnt for p in mine[:i]) for i in range(len(mine))]
    res = export_msccl(sched, per_tree=8, split=8)
    assert res.algo.nchunksperloop == 8 * export_msccl(sched, per_tree=0).algo.nchunksperloop
    assert len(self_check(res)) == 2
    for bad in (-1, 72):
        with pytest.raises(UsageError, match="per_tree"):
            ExportOptions(per_tree=bad).check()


def test_automatic_pieces_give_small_trees_more_pipeline_units():
    """With ``per_tree=None`` (automatic) a file whose trees would move in fewer than AUTO_UNITS units at 1 GiB is cut
    into even pieces of split chunks when that gives every tree more units: dgx-a100:nodes=2 allgather k=8 has
    single-chunk trees (8 MiB per MSCCL chunk: 8 units); the automatic file is split, has more units, and runs right.
    A file whose trees already have enough (k=1 allreduce on mi250: 32 units) keeps the classic pieces."""
    from forestcoll.msccl.export import AUTO_UNITS, _units
    from forestcoll.pieces import cut_pieces, shape_trees

    sched = generate(load_topology("dgx-a100:nodes=2"), "allgather", k=8)
    classic, auto = export_msccl(sched), export_msccl(sched, per_tree=None)
    _k, pieces = cut_pieces(sched, shape_trees(sched), 71)
    assert _units(pieces, classic.algo.nchunksperloop, 1 << 30) < AUTO_UNITS
    assert auto.algo.nchunksperloop > classic.algo.nchunksperloop and "_s" in auto.algo.name
    assert len(self_check(auto)) == 2
    assert write_algo(auto.algo) == write_algo(export_msccl(sched, per_tree=None).algo)  # deterministic
    small = export_msccl(sched, per_tree=None, max_bytes=16 << 20)  # files for small calls: the selection splits
    assert small.algo.nchunksperloop == classic.algo.nchunksperloop
    plain = generate(load_topology("mi250:nodes=2"), "allreduce", k=1)
    assert write_algo(export_msccl(plain).algo) == write_algo(export_msccl(plain, per_tree=None).algo)


def test_uneven_bands_give_the_busiest_stages_more_channels():
    """``bands=True``: the channels one per stage leaves unused go to the stages whose blocks hold the most steps
    (mi250:nodes=2 allreduce k=4: 22 stages, 61 steps per block on 22 channels); fewer steps per block, every thread
    block still resident, and the file runs right."""
    from forestcoll.msccl.export import RESIDENT_TBS, _bands

    assert _bands([4, 1, 8, 2], 7) == [2, 1, 3, 1]
    sched = generate(load_topology("mi250:nodes=2"), "allreduce", k=4)
    one, wide = export_msccl(sched), export_msccl(sched, bands=True)
    assert wide.channels > one.channels and wide.steps_per_tb < one.steps_per_tb
    assert wide.tbs_per_gpu <= RESIDENT_TBS
    assert len(self_check(wide)) == 2


def test_tails_count_the_hops_a_piece_still_has_ahead():
    """:func:`_tails` (the critical-path-first tie-break of allreduce's step order): in an in-tree, one hop more than
    at the node's next hop, the root's being the height of the piece's out-tree; in an out-tree, one more than the
    deepest child, 0 at the leaves; the files in both orders run right with one slot per connection."""
    from forestcoll.msccl.export import _tails
    from forestcoll.pieces import cut_pieces, shape_trees

    sched = generate(load_topology("hypercube:dim=3"), "allreduce", k=2)
    _k, pieces = cut_pieces(sched, shape_trees(sched), 1)
    tails = _tails(pieces)
    for pc in pieces:
        in_tree, out_tree = sorted(pc.trees, key=lambda t: t.phase)
        height = max(out_tree.level.values())
        for v in in_tree.level:
            ahead = tails[(id(pc), id(in_tree), v)]
            assert ahead == (height if v == in_tree.root else tails[(id(pc), id(in_tree), in_tree.parent[v])] + 1)
        for v in out_tree.level:
            kids = out_tree.children.get(v, [])
            assert tails[(id(pc), id(out_tree), v)] == max((tails[(id(pc), id(out_tree), c)] + 1 for c in kids), default=0)
    for order in ("progress", "tail"):
        assert len(self_check(export_msccl(sched, order=order))) == 2
    gather = generate(load_topology("hypercube:dim=3"), "allgather", k=2)
    assert len(self_check(export_msccl(gather, order="tail"))) == 2
