"""Weighted shards (Schedule.shard_weights) in the MSCCL++ plan and the executor's plans: the buffer laid out by
shard_layout, results right, and a clear refusal for the collectives that cannot take them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROOT, cli
from test_weighted_shards import tiny_uneven

from forestcoll.bound.shards import box_shard_weights
from forestcoll.errors import UsageError
from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp
from forestcoll.mscclpp.floor import lowering_for
from forestcoll.runtime.plan import build_plans, phase_schedule
from forestcoll.runtime.reference import run_plans, run_plans_async
from forestcoll.schedule import schedule_to_dict, shard_layout
from forestcoll.shard_pieces import weighted_bound
from forestcoll.topology import load_topology

UNEVEN = str(ROOT / "docs" / "examples" / "uneven-boxes.yaml")


def rank_weights(topo) -> tuple[int, ...]:
    return tuple(w for w, c in zip(box_shard_weights(topo), topo.is_compute) if c)


@pytest.fixture(scope="module")
def uneven():
    topo = load_topology(UNEVEN)
    return topo, generate(topo, "allreduce", shard_weights=rank_weights(topo))


@pytest.fixture(scope="module")
def tiny():
    topo = tiny_uneven()
    return topo, generate(topo, "allreduce", shard_weights=(1, 1, 2))


def test_the_lowering_places_each_shard_by_the_layout(uneven):
    """Every root's reduction ends in its own shard's chunks (k*w_r from k*(w_0+..+w_{r-1})), not at r*k."""
    topo, s = uneven
    low = lowering_for(s, topo, ExportOptions())
    total, starts = shard_layout(s)
    assert low.shares == sum(s.weights) == 16 and low.starts == starts and low.k * low.shares == total
    acts = low.build()
    final = dict(low.final)
    assert final
    for (root, _start), act in final.items():
        lo, hi = starts[root], starts[root] + s.k * s.weights[root]
        assert lo <= act.partial.index and act.partial.index + act.cnt <= hi
    covered = sorted((low.starts[pc.root] + pc.start, pc.cnt) for pc in low.pieces)
    assert sum(c for _, c in covered) == total and all(a + c == b for (a, c), (b, _) in zip(covered, covered[1:]))
    assert acts


@pytest.mark.parametrize("protocol", ["Simple", "LL"])
def test_weighted_plans_pass_lint_and_the_interpreter(uneven, tiny, protocol):
    """The self-check (lint, interpreter: results right, inputs untouched, no race) on both fabrics and protocols
    (LL: every GPU's scratch as large, since a sender writes at its own double-buffer offset); every GPU's buffer is
    k*D chunks (times the LL lanes)."""
    for topo, s in (uneven, tiny):
        r = export_mscclpp(s, topo, ExportOptions(protocol=protocol))
        chunks = {(g.input_chunks, g.output_chunks) for g in r.plan.gpus}
        assert len(chunks) == 1 and len(set(*chunks)) == 1 and min(*chunks) % (s.k * sum(s.weights)) == 0
        assert r.checks and all("OK" in line for line in r.checks if "race detection" not in line)


def test_weighted_bound_is_the_schedules(uneven):
    topo, s = uneven
    assert weighted_bound(topo, s.shard_weights) == s.bound_algbw == s.algbw


def test_weighted_allgather_and_its_phases_are_refused(uneven, tiny, tmp_path):
    """An MSCCL++ allgather / reduce-scatter call gives every rank size/N: weighted shards are refused there, by the
    API (UsageError) and the CLI (one line, exit 2, no file)."""
    topo, s = tiny
    ag = generate(topo, "allgather", shard_weights=(1, 1, 2))
    with pytest.raises(UsageError, match="allreduce only"):
        export_mscclpp(ag, topo)
    for coll in ("allgather", "reduce_scatter"):
        with pytest.raises(UsageError, match="allreduce only"):
            build_plans(phase_schedule(s, coll), 64, 4)
    big = load_topology(UNEVEN)
    path, out = tmp_path / "ag.json", tmp_path / "ag.plan.json"
    path.write_text(json.dumps(schedule_to_dict(generate(big, "allgather", shard_weights=rank_weights(big)))))
    code, _out, err = cli("export", path, "--format", "mscclpp", "-t", UNEVEN, "-o", out)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "allreduce only" in err
    assert not out.exists()


@pytest.mark.parametrize("numel", [1, 7, 16, 1000, 4099])
def test_executor_plans_reduce_weighted_shards_right(uneven, tiny, numel):
    """The executor's plans (rounds and asynchronous) sum every rank's buffer, and the elements where rank r ends a
    reduction (received as partial sums, never sent on) are its weighted shard [numel S_r / D, numel S_{r+1} / D)."""
    for _topo, s in (uneven, tiny):
        n = len(s.ranks)
        plans = build_plans(s, numel, 4)
        rng = np.random.default_rng(numel)
        inputs = [rng.integers(-50, 50, numel).astype(np.float64) for _ in range(n)]
        want = np.sum(inputs, axis=0)
        works = [x.copy() for x in inputs]
        run_plans(plans, works)
        assert all(np.array_equal(w, want) for w in works)
        works = [x.copy() for x in inputs]
        run_plans_async(plans, works, seed=numel)
        assert all(np.array_equal(w, want) for w in works)
        d, acc = sum(s.weights), 0
        for p, w in zip(plans, s.weights):
            got, sent = np.zeros(numel, bool), np.zeros(numel, bool)
            for rnd in p.rounds:
                for m in rnd.recvs:
                    for seg in m.segments:
                        got[seg.start:seg.stop] |= seg.reduce
                for m in rnd.sends:
                    for seg in m.segments:
                        sent[seg.start:seg.stop] |= seg.reduce
            mine = np.zeros(numel, bool)
            mine[numel * acc // d:numel * (acc + w) // d] = True
            assert np.array_equal(got & ~sent, mine)
            acc += w



def test_the_fallback_keeps_the_weights(tmp_path):
    """generate --format mscclpp's fallback (the optimal k does not fit the thread blocks) generates the smaller k
    with the same shard weights."""
    from forestcoll.mscclpp.export import write_generated_plan

    topo = load_topology("torus:dims=2x2")
    s, r = write_generated_plan(topo, "allreduce", str(tmp_path / "plan.json"), shard_weights=(3, 1, 1, 1),
                                options=ExportOptions(max_threadblocks=4))
    assert s.k == 1 and s.shard_weights == (3, 1, 1, 1) and "the optimal k=2 does not fit" in r.notes[0]
    assert r.plan.gpus[0].input_chunks == 6 and r.checks


@pytest.mark.slow  # ~20 s: candidates' plans simulated at two sizes
def test_plans_per_size_range_keep_the_weights(tmp_path):
    """generate --sizes --format mscclpp with shard weights: the weighted candidates (beside the equal ones) win at
    16 MiB and 1 GiB, so each range's plan has k*D chunks."""
    from forestcoll.simulate.select import WEIGHTED, export_by_size

    topo = load_topology(UNEVEN)
    out = export_by_size(topo, "allreduce", [16 << 20, 1 << 30], str(tmp_path), format="mscclpp",
                         shard_weights=rank_weights(topo), workers=1)
    assert out.ranges and all(r.range.name.startswith(WEIGHTED) for r in out.ranges)
    assert all(r.range.schedule.shard_weights == rank_weights(topo) for r in out.ranges)
    assert all(r.result.plan.gpus[0].input_chunks % 16 == 0 for r in out.ranges)
