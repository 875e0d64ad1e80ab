"""``forestcoll compare`` on boxes that differ: forestcoll's candidates have the shards ``generate`` chooses."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

from forestcoll.cli import main
from forestcoll.cli.shards import choose_shard_weights
from forestcoll.simulate.compare import compare_topology
from forestcoll.topology import load_topology

UNEVEN = str(Path(__file__).resolve().parents[1] / "docs" / "examples" / "uneven-boxes.yaml")


def test_compare_builds_the_shards_generate_chooses():
    comp = compare_topology(UNEVEN, "allreduce", [16 << 20], algorithms=["forestcoll", "double-binary-tree"], workers=1)
    assert comp.shard_weights == choose_shard_weights(load_topology(UNEVEN), "allreduce", None, "sizes")
    assert comp.shard_weights is not None and len(comp.shard_weights) == comp.ranks
    assert comp.bound_algbw == Fraction(25, 2)  # the weighted bound (equal shards: 75/8)
    ours, dbt = comp.get("forestcoll", 16 << 20), comp.get("double-binary-tree", 16 << 20)
    assert ours.algbw_gbps > 75 / 8  # above what equal shards can reach
    assert ours.algbw_gbps > dbt.algbw_gbps
    assert "equal shards' bound 75/8" in comp.shards_note


def test_compare_json_keeps_its_contract_with_weights(capsys):
    assert main(["compare", UNEVEN, "-c", "allreduce", "--sizes", "16MiB", "--algorithms",
                 "forestcoll,forestcoll-best,ring", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bound_algbw_gbps"] == 12.5 and len(out["shard_weights"]) == 12
    assert {r["algorithm"] for r in out["rows"]} == {"forestcoll", "forestcoll-best", "ring"}
    assert all({"algorithm", "size_bytes", "algbw_gbps"} <= r.keys() for r in out["rows"])


def test_compare_on_equal_boxes_keeps_equal_shards(capsys):
    comp = compare_topology("dgx-a100:nodes=2", "allreduce", [1 << 20], algorithms=["forestcoll", "ring"], workers=1)
    assert comp.shard_weights is None and comp.shards_note == "" and "shard_weights" not in comp.to_dict()
    assert main(["compare", UNEVEN, "-c", "allgather", "--sizes", "1MiB", "--algorithms", "forestcoll"]) == 0
    assert "forestcoll's shards" not in capsys.readouterr().out


def test_the_best_row_also_races_equal_shards():
    from forestcoll.simulate.compare import EQUAL, _candidates
    from forestcoll.simulate.network import load_network

    net = load_network(UNEVEN)
    cands, weights = _candidates(net.topology, net, "allreduce", None, equal=True, ks=[1], height=False)
    assert weights is not None and cands["forestcoll"].shard_weights == weights
    equal = {name: sched for name, sched in cands.items() if name.startswith(EQUAL)}
    assert EQUAL in equal and all(sched.shard_weights is None for sched in equal.values())
    assert all(sched.shard_weights == weights for name, sched in cands.items() if name not in equal and "ring" not in name)
    comp = compare_topology(UNEVEN, "allreduce", [16 << 20], workers=1, exhaustive=True)
    best = comp.get("forestcoll-best", 16 << 20)
    assert best.extra["chosen"] in {"forestcoll", "forestcoll-k1", "forestcoll-offcpu"} or best.extra["chosen"].startswith(
        ("forestcoll-h", "forestcoll-equal"))
    assert best.algbw_gbps >= comp.get("forestcoll", 16 << 20).algbw_gbps
