"""The single RCCL file that misses 0.95 of the bound at the design size points to per-size files (--sizes)."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from forestcoll.generate import generate
from forestcoll.msccl.advice import TARGET, sizes_advice
from forestcoll.msccl.export import ExportOptions, write_generated_msccl
from forestcoll.topology import load_topology

GIB = 1 << 30


def test_the_advice_only_for_an_rccl_file_of_every_size_below_the_target():
    bound = Fraction(200)
    note = sizes_advice("rccl", 0, 0, 183.5, bound, GIB)
    assert note is not None and note.startswith("at 1GiB this file reaches 183.5 GB/s, 91.8% of the bound, and it "
                                                "serves every size")
    assert "the same command with `--sizes 64KiB..1GiB -o DIR`" in note and "MSCCL_ALGO_DIR=DIR" in note
    assert sizes_advice("rccl", 0, 0, float(TARGET * bound), bound, GIB) is None  # at the target: nothing to say
    assert sizes_advice("msccl-executor-nccl", 0, 0, 183.5, bound, GIB) is None  # NVIDIA: not this round's question
    assert sizes_advice("rccl", 0, 64 << 20, 183.5, bound, GIB) is None  # a file for a range already
    assert sizes_advice("rccl", 1 << 20, 0, 183.5, bound, GIB) is None
    assert sizes_advice("rccl", 0, 0, 183.5, 0, GIB) is None  # no bound known


@pytest.fixture(scope="module")
def cube():
    topo = load_topology("hypercube:dim=3")
    return topo, generate(topo, "allreduce")


@pytest.mark.parametrize("share, runtime, said", [(0.9, "rccl", True), (0.96, "rccl", False),
                                                  (0.9, "msccl-executor-nccl", False)])
def test_generate_says_so_in_the_written_files_notes(cube, tmp_path, share, runtime, said):
    topo, sched = cube
    bound = float(sched.bound_algbw)

    def file_rate(algo, size):  # every file the same: the optimal k's plain file is written
        return share * bound

    _s, result = write_generated_msccl(topo, sched, str(tmp_path / "a.xml"), ExportOptions(runtime=runtime),
                                       check=False, file_rate=file_rate)
    notes = [n for n in result.notes if "MSCCL_ALGO_DIR" in n]
    assert len(notes) == said
    if said:
        assert notes[0].startswith(f"at 1GiB this file reaches {share * bound:.1f} GB/s, 90.0% of the bound")
    _s, ranged = write_generated_msccl(topo, sched, str(tmp_path / "b.xml"),
                                       replace(ExportOptions(runtime=runtime), max_bytes=GIB), check=False,
                                       file_rate=file_rate)
    assert not any("MSCCL_ALGO_DIR" in n for n in ranged.notes)
