"""generate --sizes with weighted shards (simulate/select.py export_by_size, cli/shards.py): on uneven boxes the
per-size candidates include the forestcoll schedules with the shards ``--shards auto`` takes, beside the equal ones,
and each range says which shards it uses; the off-CPU rival of a weighted optimum (msccl/detours.py optimum_on)."""

from __future__ import annotations

import re

import pytest
from conftest import benchmark, cli

from forestcoll.bound.shards import box_shard_weights
from forestcoll.generate import generate
from forestcoll.topology import load_topology

UNEVEN = "docs/examples/uneven-boxes.yaml"
BOX = (1,) * 8 + (2,) * 4  # the example's box weights, rank by rank


@pytest.mark.slow  # ~10-20 s: the files simulated at three sizes, each run by the interpreter
def test_uneven_sizes_msccl_take_the_weighted_files(tmp_path):
    """Before, --sizes 1MiB,16MiB,1GiB failed here: 12 equal shards never divide a power-of-two size (exit 2, "no
    candidate schedule can run a 1MiB call"); the weighted files have k x 16 chunks per loop, and they win."""
    out = tmp_path / "d"
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "--sizes", "1MiB,16MiB,1GiB", "--format", "msccl",
                          "-o", out)
    assert code == 0, err
    assert "weighted-forestcoll" in text.splitlines()[0] and "note       shards: the weighted-* candidates" in text
    ranges = [line for line in text.splitlines() if line.startswith("range ")]
    assert ranges and all("weighted-forestcoll" in line and "weighted shards;" in line for line in ranges)
    files = sorted(out.iterdir())
    assert len(files) == len(ranges)
    for path in files:
        xml = path.read_text()
        loop = int(re.search(r'nchunksperloop="(\d+)"', xml).group(1))
        assert loop % 16 == 0 and "weighted shards: rank i reduces w_i/16" in xml
        code, ran, err = cli("msccl", "run", path)
        assert code == 0 and "result     OK" in ran, err


@pytest.mark.slow  # ~3-10 s
def test_equal_shards_per_size_stay_as_before(tmp_path):
    """--shards equal: the candidates and range lines of before (no weighted candidate, no shards words)."""
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "--sizes", "3MiB", "--format", "msccl", "--shards",
                          "equal", "-o", tmp_path / "d")
    assert code == 0, err
    said = [line for line in text.splitlines() if not line.startswith("wrote ")]
    assert not any("weighted" in line or "shards" in line for line in said)


def test_box_shards_per_size_offer_only_weighted_forestcoll(tmp_path):
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "--sizes", "1MiB", "--format", "msccl", "--shards",
                          "box", "-o", tmp_path / "d")
    assert code == 0, err
    names = text.splitlines()[0].split("candidates: ")[1].split(", ")
    assert all(n.startswith("weighted-") or n == "ring" for n in names) and "the others equal" not in text


@pytest.mark.slow  # ~15 s: the candidates' MSCCL++ plans simulated at three sizes
def test_uneven_sizes_mscclpp_take_the_weighted_plans(tmp_path):
    out = tmp_path / "d"
    code, text, err = cli("generate", UNEVEN, "-c", "allreduce", "--sizes", "1MiB,16MiB,1GiB", "--format", "mscclpp",
                          "-o", out)
    assert code == 0, err
    ranges = [line for line in text.splitlines() if line.startswith("range ")]
    assert ranges and all("weighted shards;" in line for line in ranges)
    for path in sorted(out.iterdir()):
        code, ran, err = cli("mscclpp", "run", path)
        assert code == 0 and "right on 12 GPUs" in ran and "no data race" in ran, err


@pytest.mark.slow  # ~4-12 s: both candidate sets' files simulated
def test_export_by_size_api_both_shards(tmp_path):
    """export_by_size(shard_weights=w): the equal candidates and the weighted ones (WEIGHTED + name), the ring once;
    the result says the weights."""
    from forestcoll.simulate.select import WEIGHTED, export_by_size

    topo = load_topology(UNEVEN)
    out = export_by_size(topo, "allreduce", [3 << 20], str(tmp_path), shard_weights=BOX, workers=1)
    assert "forestcoll" in out.candidates and WEIGHTED + "forestcoll" in out.candidates
    assert out.candidates.count("ring") == 1 and out.to_dict()["shard_weights"] == list(BOX)
    named = {r.range.name: r.range.schedule for r in out.ranges}
    assert all((s.shard_weights == BOX) == n.startswith(WEIGHTED) for n, s in named.items())


def _sweep(seed: int):
    fs = benchmark("fabric_sweep")
    return fs.load_fabric(fs.random_fabric(seed))


def test_a_weighted_optimum_gets_its_off_cpu_rival():
    """Sweep seed 10 (8 + 2 GPUs, CPU sockets): the weighted optimum crosses between boxes through a CPU; packed
    again without the CPUs with the same weights it keeps the exact weighted rate (before: compared with the
    equal-shard bound, no rival)."""
    from forestcoll.msccl.detours import cpu_crossings, optimum_on, without_cpus

    topo = _sweep(10)
    weights = tuple(w for w, c in zip(box_shard_weights(topo), topo.is_compute) if c)
    sched = generate(topo, "allreduce", shard_weights=weights)
    assert cpu_crossings(topo, sched) > 0
    bare = optimum_on(topo, sched, without_cpus)
    assert bare is not None and bare.shard_weights == weights and bare.algbw == sched.algbw
    assert cpu_crossings(topo, bare) == 0
    assert optimum_on(topo, sched, without_cpus, shard_weights=weights).algbw == sched.algbw  # given twice: the same
