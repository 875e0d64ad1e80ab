"""One function per shard rule: per-rank weights as node weights (bound/shards.py node_weights, for generate and
shard_pieces.weighted_bound), the executor's element offsets (runtime/plan.py, one rule for equal and weighted
shards), and one computation of the shard bounds per generate (cli/shards.py ShardRates)."""

from __future__ import annotations

import pytest
from conftest import cli

from forestcoll.bound.shards import box_shard_weights
from forestcoll.errors import UsageError
from forestcoll.generate import generate
from forestcoll.runtime.plan import build_plans, shard_bounds, work_layout
from forestcoll.topology import load_topology

UNEVEN = "docs/examples/uneven-boxes.yaml"
BOX = (1,) * 8 + (2,) * 4  # the example's box weights, rank by rank


def test_node_weights_is_the_one_rule():
    from forestcoll.shard_pieces import weighted_bound

    topo = load_topology(UNEVEN)
    from forestcoll.bound.shards import node_weights

    nodes = node_weights(topo, BOX)
    assert nodes == box_shard_weights(topo)
    with pytest.raises(UsageError, match="12 positive integers"):
        weighted_bound(topo, (1, 2))
    with pytest.raises(UsageError, match="12 positive integers"):
        generate(topo, "allreduce", shard_weights=(1, 2))


@pytest.mark.parametrize("numel", [0, 7, 16, 1000, 4099])
def test_executor_offsets_one_rule(numel):
    """Weighted shards: rank r's elements are [n S_r / D, n S_{r+1} / D) (work_layout), every weight 1 gives the equal
    shards, and the plans of the weighted schedule reduce each rank's shard there."""
    assert shard_bounds(numel, 4, (1, 1, 1, 1)) == shard_bounds(numel, 4)
    work, shards = work_layout("allreduce", 12, numel, 0, BOX)
    assert work == numel and shards == [(numel * s // 16, numel * (s + w) // 16)
                                        for s, w in zip((0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14), BOX)]
    topo = load_topology(UNEVEN)
    sched = generate(topo, "allreduce", shard_weights=BOX)
    plans = build_plans(sched, numel, 4)
    for r, (lo, hi) in enumerate(shards):  # rank r's allgather brings it every element but its own shard's
        got = {e for rnd in plans[r].rounds for m in rnd.recvs for seg in m.segments if not seg.reduce
               for e in range(seg.start, seg.stop)}
        assert set(range(numel)) - got == set(range(lo, hi))


def test_generate_computes_the_equal_bound_once(tmp_path, monkeypatch):
    """generate on uneven boxes: the equal-shard bound for the choice and for the shards line, once (was twice)."""
    import forestcoll.bound.optimal as optimal

    calls = []
    real = optimal.optimal_bound
    monkeypatch.setattr(optimal, "optimal_bound", lambda *a, **k: calls.append(a[1:]) or real(*a, **k))
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "-o", tmp_path / "s.json")
    assert code == 0, err
    assert "equal shards' bound 75/8 GB/s" in text and calls == [("allreduce",)]
