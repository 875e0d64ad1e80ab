"""generate --shards auto|equal|box, and what generate / verify / simulate say about a schedule's shards."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import cli

UNEVEN = "docs/examples/uneven-boxes.yaml"


def test_auto_gives_the_box_weighted_schedule_on_uneven_boxes(tmp_path):
    out = tmp_path / "s.json"
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "-o", out)
    assert code == 0, err
    data = json.loads(out.read_text())
    assert data["shard_weights"] == [1] * 8 + [2] * 4
    assert "algbw      25/2 GB/s" in text
    assert "shards     weighted 1/(ranks in box)" in text and "equal shards' bound 75/8 GB/s" in text
    code, text, err = cli("verify", out)
    assert code == 0, err
    assert "shards     weighted 1/(ranks in box)" in text and "bound      25/2 GB/s  (100% reached)" in text
    code, text, err = cli("simulate", out, "--size", "16MiB")
    assert code == 0, err
    assert "note       weighted shards" in text and "25/2 GB/s" in text


def test_equal_shards_when_asked(tmp_path):
    out = tmp_path / "s.json"
    code, text, _err = cli("generate", UNEVEN, "-c", "allreduce", "--shards", "equal", "-o", out)
    assert code == 0
    assert "shard_weights" not in json.loads(out.read_text())
    assert "algbw      75/8 GB/s" in text and "shards     " not in text


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "ring:n=4"])
def test_auto_is_byte_identical_to_equal_where_boxes_are_equal(spec, tmp_path):
    files = []
    for mode in ("auto", "equal", None):
        out = tmp_path / f"{mode}.json"
        code, _text, _err = cli("generate", spec, "-c", "allreduce", "-o", out, *(("--shards", mode) if mode else ()))
        assert code == 0
        text = out.read_text()
        assert "shard_weights" not in text
        files.append(hashlib.sha256(json.dumps({k: v for k, v in json.loads(text).items() if k != "stats"},
                                               sort_keys=True).encode()).hexdigest())
    assert len(set(files)) == 1


@pytest.mark.parametrize("args, says", [
    (("generate", UNEVEN, "-c", "allgather", "--shards", "box"), "--shards applies to allreduce"),
    (("generate", UNEVEN, "-c", "allgather", "--shards", "equal"), "--shards applies to allreduce"),
    (("generate", "ring:n=4", "-c", "allreduce", "--shards", "box"), "is in no box"),
    (("generate", UNEVEN, "-c", "alltoall", "--shards", "box"), "--shards does not apply to alltoall"),
    (("generate", UNEVEN, "-c", "allreduce", "--shards", "boxes"), "--shards"),
])
def test_bad_shards_flags_are_one_line_exit_2(args, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import shutil
    from pathlib import Path

    (tmp_path / "docs/examples").mkdir(parents=True)
    shutil.copy(Path(__file__).resolve().parents[1] / UNEVEN, tmp_path / UNEVEN)
    code, text, err = cli(*args)
    assert code == 2 and text == ""
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert not (tmp_path / "X.json").exists() and not (tmp_path / "D").exists()


def test_box_weights_in_an_msccl_file(tmp_path):
    out = tmp_path / "s.xml"
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "--format", "msccl", "-o", out, "--k", "1")
    assert code == 0, err
    assert "shards     weighted 1/(ranks in box)" in text
    assert 'nchunksperloop="16"' in out.read_text()
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "--format", "msccl", "-o", out)  # k and variant raced
    assert code == 0, err
    assert "shards     weighted 1/(ranks in box)" in text


def test_auto_falls_back_to_equal_where_the_weighted_optimum_has_no_trees(tmp_path, monkeypatch):
    """Sweep seed 4: a switch that sends more than it receives leaves the weighted optimum without a tree schedule
    (generate raises TopologyError); auto then gives the equal-shard schedule, box says why."""
    import importlib

    from forestcoll.errors import TopologyError

    gen = importlib.import_module("forestcoll.generate")  # the module (the package's 'generate' is the function)

    real = gen.generate

    def refusing(topo, collective, *args, shard_weights=None, **kwargs):
        if shard_weights is not None:
            raise TopologyError("switch 's' can send more than it receives, and a switch cannot copy")
        return real(topo, collective, *args, **kwargs)

    monkeypatch.setattr(gen, "generate", refusing)
    out = tmp_path / "s.json"
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "-o", out)
    assert code == 0, err
    assert "algbw      75/8 GB/s" in text and "shard_weights" not in out.read_text()
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "--shards", "box", "-o", tmp_path / "b.json")
    assert code == 2 and "cannot copy" in err and not (tmp_path / "b.json").exists()


@pytest.mark.slow
def test_auto_shards_reach_the_mscclpp_plan(tmp_path):
    """`generate --format mscclpp` on uneven boxes writes a plan of the weighted schedule (auto) and says so."""
    out = tmp_path / "plan.json"
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "--format", "mscclpp", "-o", str(out))
    assert code == 0, err
    assert "shards     weighted 1/(ranks in box)" in text and "25/2" in text
    code, eq, err = cli("generate", UNEVEN, "-c", "allreduce", "--shards", "equal", "--format", "mscclpp",
                        "-o", str(tmp_path / "eq.json"))
    assert code == 0, err
    assert "shards " not in eq and out.read_bytes() != (tmp_path / "eq.json").read_bytes()
