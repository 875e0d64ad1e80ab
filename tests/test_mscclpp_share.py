"""The ``shared`` layout: an allreduce's reduce-scatter and allgather blocks share thread blocks (mscclpp/share.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportError, export_mscclpp
from forestcoll.mscclpp.lint import lint_plan
from forestcoll.mscclpp.machine import Machine
from forestcoll.mscclpp.plan import Plan
from forestcoll.mscclpp.run_result import RunResult
from forestcoll.mscclpp.semantics import buffer_sizes
from forestcoll.topology import load_topology


def _outputs(plan: Plan, size: int) -> list[np.ndarray]:
    """Every GPU's output after one in-place call on the interpreter's integer data (seed 0)."""
    ins, outs = buffer_sizes(plan, size)
    result = RunResult("plan", plan.collective, "in-place", size, ins, outs, "float32", 1, len(plan.gpus))
    m = Machine(plan, size, "in-place", "float32", 1, False, "LL16", 0, "plan", result)
    m.run()
    assert all(b.done for b in m.tbs)
    return [np.array(x, copy=True) for x in m.outputs[0]]


def _put_targets(gp, tb, op) -> set[str]:
    """The buffer types (``o``, ``s``, ...) a put writes into on its peers."""
    refs = {r.access_channel_type: r.remote_buffer_ids for r in tb.remote_buffer_refs or ()}
    return {gp.remote_buffers[refs[op.channel_type][r.buffer_id]].type for r in op.dst or ()}


def _phase_violations(plan: Plan) -> list[str]:
    """Blocks in which an out-tree operation (a put into a peer's output) comes before an in-tree one (a reduction,
    or a put of a partial sum into a peer's scratch): in program order, which a block runs in."""
    bad = []
    for g, gp in enumerate(plan.gpus):
        for tb in gp.threadblocks:
            flat = [x for op in tb.ops for x in (op.ops or (op,))]
            puts = {i: _put_targets(gp, tb, op) for i, op in enumerate(flat) if op.name == "put"}
            ins = [i for i, op in enumerate(flat) if op.name in ("re", "rre") or "s" in puts.get(i, ())]
            outs = [i for i in puts if "o" in puts[i]]
            if ins and outs and min(outs) < max(ins):
                bad.append(f"gpu {g} tb {tb.id}")
    return bad


@pytest.fixture(scope="module")
def mi250_k2():
    topo = load_topology("mi250")
    return topo, generate(topo, "allreduce", k=2)


def test_shared_plan_checks_itself_and_computes_what_the_unshared_one_does(mi250_k2):
    topo, sched = mi250_k2
    edge = export_mscclpp(sched, topo, layout="edge", check=False)
    n_edge = edge.stats.threadblocks_per_gpu
    limit = n_edge // 2 + 2
    shared = export_mscclpp(sched, topo, layout="shared", max_threadblocks=limit)  # self-checked: lint + interpreter
    assert shared.layout == "shared" and len(shared.checks) == 2
    assert shared.stats.threadblocks_per_gpu <= limit < n_edge
    assert lint_plan(shared.plan).findings == []
    # some blocks really run two phases: an in-tree pipeline, then an out-tree one
    assert any(sum(op.name == "pipeline" for op in tb.ops) >= 2 for g in shared.plan.gpus for tb in g.threadblocks)
    size = 2 * 16 * shared.plan.gpus[0].input_chunks
    for a, b in zip(_outputs(edge.plan, size), _outputs(shared.plan, size), strict=True):
        assert a.tobytes() == b.tobytes()
    assert _phase_violations(shared.plan) == []


def test_out_tree_parts_never_run_before_in_tree_parts(mi250_k2):
    topo, sched = mi250_k2
    plan = export_mscclpp(sched, topo, layout="shared", check=False,
                          max_threadblocks=export_mscclpp(sched, topo, layout="edge", check=False)
                          .stats.threadblocks_per_gpu // 2 + 2).plan
    assert _phase_violations(plan) == []
    # the check can fail: the same plan with every shared block's out-tree pipeline moved first
    def swapped(tb):
        pipes = [i for i, op in enumerate(tb.ops) if op.name == "pipeline"]
        down = [i for i in pipes if any(x.name == "put" for x in tb.ops[i].ops)]
        if len(pipes) < 2 or not down or down[0] == pipes[0]:
            return tb
        ops = list(tb.ops)
        ops.insert(pipes[0], ops.pop(down[0]))
        return replace(tb, ops=tuple(ops))

    bad = replace(plan, gpus=tuple(replace(g, threadblocks=tuple(swapped(tb) for tb in g.threadblocks))
                                   for g in plan.gpus))
    assert _phase_violations(bad)


def test_auto_takes_shared_only_where_edge_does_not_fit(mi250_k2):
    topo, sched = mi250_k2
    edge = export_mscclpp(sched, topo, layout="edge", check=False)
    n_edge = edge.stats.threadblocks_per_gpu
    # edge fits: the same plan as before
    assert export_mscclpp(sched, topo, check=False, max_threadblocks=n_edge).plan == edge.plan
    auto = export_mscclpp(sched, topo, check=False, max_threadblocks=n_edge - 1)
    assert auto.layout == "shared" and auto.stats.threadblocks_per_gpu <= n_edge - 1
    # shared with room for every block is the edge plan
    assert export_mscclpp(sched, topo, layout="shared", check=False, max_threadblocks=n_edge).plan == edge.plan
    # other collectives have one phase: refused by name
    with pytest.raises(Exception, match="layout 'shared' pairs an allreduce"):
        export_mscclpp(generate(topo, "allgather", k=1), topo, layout="shared", check=False)
    with pytest.raises(ExportError, match="thread blocks per GPU"):
        export_mscclpp(sched, topo, check=False, max_threadblocks=3)


def test_fit_counted_from_parts_is_the_built_blocks_fit(mi250_k2):
    """The pairing decides merges from each part's counts (share.fits_shared); the verdict is fits() of the block
    shared_block builds, on random groups of a real plan's blocks (both verdicts occur)."""
    import random

    from forestcoll.mscclpp.share import counts, fits, fits_shared, shared_block

    topo, _sched = mi250_k2
    plan = export_mscclpp(generate(topo, "allreduce", k=4), topo, layout="edge", check=False).plan
    rng = random.Random(13)
    seen = set()
    for _ in range(400):
        gp = rng.choice(plan.gpus)
        parts = rng.sample(gp.threadblocks, rng.randint(2, 9))
        verdict = fits(shared_block(parts, 0))
        assert fits_shared([counts(tb) for tb in parts]) == verdict
        seen.add(verdict)
    assert seen == {True, False}


def test_shared_plan_is_byte_for_byte_the_one_main_wrote():
    """Golden: mi250 allreduce k=4 in the shared layout at 30 and 44 blocks per GPU (sha256 of the plan's JSON).  The
    digests changed once on purpose (mpp14): leaves and sinks now join blocks that hold a tree part before blocks of
    leaves alone (main left 2 and 5 blocks per GPU of leaves and sinks only here); the grouping decisions are
    otherwise the counted ones of cheap13, byte for byte."""
    import hashlib

    from forestcoll.mscclpp.plan import write_plan

    topo = load_topology("mi250")
    sched = generate(topo, "allreduce", k=4)
    golden = {30: "7a37cd69e9e5b266c40445fbdca645fd6572932d97598907a372635b314cc5ec",
              44: "4cff01b227dc85f109cf279d10f905feeba3ef73abda0ad599af8e712df120e2"}
    for limit, digest in golden.items():
        plan = export_mscclpp(sched, topo, layout="shared", check=False, max_threadblocks=limit).plan
        assert hashlib.sha256(write_plan(plan).encode()).hexdigest() == digest


def _mixing_blocks(plan: Plan) -> list[int]:
    """Per GPU, the blocks that run both in-tree work (a reduction, or a put into a peer's scratch) and out-tree work
    (a put into a peer's output)."""
    out = []
    for gp in plan.gpus:
        n = 0
        for tb in gp.threadblocks:
            flat = [x for op in tb.ops for x in (op.ops or (op,))]
            puts = [_put_targets(gp, tb, op) for op in flat if op.name == "put"]
            if any(op.name in ("re", "rre") for op in flat) or any("s" in p for p in puts):
                n += any("o" in p for p in puts)
        out.append(n)
    return out


@pytest.fixture(scope="module")
def mi250_k4():
    topo = load_topology("mi250")
    sched = generate(topo, "allreduce", k=4)
    return topo, sched, export_mscclpp(sched, topo, layout="edge", check=False).stats.threadblocks_per_gpu


def test_out_tree_starts_pair_on_every_gpu_or_none(mi250_k4):
    """Where leaves and sinks joining other blocks suffice no in-tree part precedes an out-tree one (every allgather
    runs right behind its reduce-scatter, as in the edge plan); where they do not, every GPU pairs its out-tree
    starts (all of them: a mix leaves the late trees alone at the end)."""
    topo, sched, n_edge = mi250_k4
    few = export_mscclpp(sched, topo, layout="shared", check=False, max_threadblocks=n_edge - 14).plan
    assert max(len(g.threadblocks) for g in few.gpus) <= n_edge - 14 and _mixing_blocks(few) == [0] * len(few.gpus)
    many = export_mscclpp(sched, topo, layout="shared", check=False, max_threadblocks=60).plan
    roots = [sum(1 for t in sched.trees if t.root == r) for r in sched.ranks]
    assert min(_mixing_blocks(many)) >= min(roots) > 0


@pytest.mark.slow
def test_partly_shared_plan_keeps_the_edge_plans_rate(mi250_k4):
    """mi250 allreduce k=4 at 1 GiB: in 60 blocks per GPU (some pairs needed) 156.0 GB/s (156.1 before leaves stopped
    taking blocks of their own) against the edge plan's 157.4 (117.6 when only some out-tree starts paired); in 70
    (leaves and sinks suffice) the edge plan's rate."""
    from forestcoll.simulate.mscclpp import simulate_plan
    from forestcoll.simulate.network import build_network

    topo, sched, n_edge = mi250_k4
    net = build_network(topo)
    rate = {lim: simulate_plan(net, export_mscclpp(sched, topo, layout="shared", check=False,
                                                   max_threadblocks=lim).plan).algbw_gbps for lim in (n_edge, 70, 60)}
    assert rate[70] == pytest.approx(rate[n_edge], rel=1e-9)
    assert rate[60] >= 0.99 * rate[n_edge]


def test_leaves_and_sinks_never_hold_a_block_alone(mi250_k4, monkeypatch):
    """Every shared block that holds an in-tree leaf or a sink also holds an in-tree or a forwarding out-tree part: a
    block of leaves alone takes a thread block a forwarder could have had (main left up to 5 per GPU at 44 and 60
    blocks here, and 2 or 3 blocks of 15 leaves per GPU on mi250:nodes=2 k=16, which then needed more lockstep)."""
    from forestcoll.mscclpp import share

    topo, sched, _n_edge = mi250_k4
    seen: list[tuple[list[list[int]], list]] = []
    real = share.group_blocks

    def spy(gp, info, limit, pair=True):
        groups = real(gp, info, limit, pair)
        seen.append((groups, info))
        return groups

    monkeypatch.setattr(share, "group_blocks", spy)
    for limit in (44, 60):
        seen.clear()
        plan = export_mscclpp(sched, topo, layout="shared", check=False, max_threadblocks=limit).plan
        assert max(len(g.threadblocks) for g in plan.gpus) <= limit and seen
        alone = [grp for groups, info in seen for grp in groups
                 if len(grp) > 1 and all(share._kind(info[t]) in (0, 3) for t in grp)]
        assert alone == []
