"""div21: `generate --sizes` at a size no candidate's chunks divide (20 ranks, 16 MiB) chooses at the nearest size
below that they divide and says so, where it refused before ("no candidate schedule can run a 16MiB call")."""

from __future__ import annotations

import pytest
from conftest import cli

from forestcoll import generate, load_topology
from forestcoll.errors import UsageError
from forestcoll.simulate.fit_sizes import MOVE_AT_MOST, loop_bytes, runnable_sizes
from forestcoll.simulate.select import usable

MIB = 1 << 20


@pytest.fixture(scope="module")
def five():
    """allgather on five ranks at k = 1 and k = 4: loops of 20 and 80 bytes (4-byte elements)."""
    topo = load_topology("switch:n=5")
    return {"k1": generate(topo, "allgather", k=1), "k4": generate(topo, "allgather", k=4)}


def test_loop_bytes_is_what_usable_divides_by(five):
    assert loop_bytes(five["k1"], 4) == 20 and loop_bytes(five["k4"], 4) == 80 and loop_bytes(five["k4"], 16) == 320
    for sched in five.values():
        for size in (MIB, 16 * MIB, 1048560, 1048400, 1 << 30):
            assert usable(sched, size) == (size % loop_bytes(sched, 4) == 0)


def test_a_size_no_candidate_runs_moves_down_to_one_they_all_run(five):
    sizes, notes = runnable_sizes([MIB, 16 * MIB, 1048400], five, 4)
    assert sizes == [1048560, 16777200, 1048400]  # the nearest multiples of 80 below; 1048400 runs as it is
    assert all(usable(s, size) for s in five.values() for size in sizes)
    assert not any(usable(s, size) for s in five.values() for size in (MIB, 16 * MIB))
    assert len(notes) == 2 and notes[0].startswith("1MiB: no candidate's file runs a call of that size")
    assert f"chosen at {sizes[0]} bytes" in notes[0] and "2 of the 2 candidates" in notes[0]


def test_a_coarse_loop_is_left_out_where_it_would_move_the_size_too_far(five):
    size = 1000  # 1000 % 20 == 0: runs at k = 1, unchanged
    assert runnable_sizes([size], five, 4) == ([1000], [])
    size = 1010  # k = 1 runs 1000 (10 fewer); k = 4 would need 960 (50 fewer, more than 1010 / 256 allows)
    assert size % 80 > size * MOVE_AT_MOST
    sizes, notes = runnable_sizes([size], five, 4)
    assert sizes == [1000] and "1 of the 2 candidates" in notes[0]


def test_moved_sizes_that_meet_are_chosen_for_once(five):
    assert runnable_sizes([1010, 1000, 1005], five, 4)[0] == [1000]


def test_a_size_below_one_loop_of_every_candidate_is_refused(five):
    with pytest.raises(UsageError, match="less than one loop of every candidate's chunks"):
        runnable_sizes([16], five, 4)


def test_generate_sizes_chooses_at_the_nearest_runnable_size(tmp_path):
    """Five ranks: no power-of-two size splits into 5 k chunks.  Before: exit 2, "no candidate schedule can run a
    1MiB call"; now: one file, its range and rate at 1,048,400 bytes, and a note."""
    code, out, err = cli("generate", "switch:n=5", "-c", "allgather", "--sizes", "1MiB,16MiB", "-o", tmp_path / "x")
    assert code == 0, err
    assert "note       1MiB: no candidate's file runs a call of that size" in out
    assert "chosen at 1048400 bytes (176 fewer)" in out and "16777200B" in out
    assert len(list((tmp_path / "x").iterdir())) == 1


def test_generate_sizes_refuses_a_size_below_every_loop(tmp_path):
    code, out, err = cli("generate", "switch:n=5", "-c", "allgather", "--sizes", "16", "-o", tmp_path / "y")
    assert code == 2 and err.count("\n") == 1 and "less than one loop" in err, err
    assert not (tmp_path / "y").exists()


def test_generate_sizes_mscclpp_chooses_at_the_nearest_runnable_size(tmp_path):
    """MSCCL++ plans count whole 16-byte units: 1 MiB on five ranks moves to a multiple of 5 k units (before: exit 2)."""
    code, out, err = cli("generate", "switch:n=5", "-c", "allreduce", "--sizes", "1MiB", "--format", "mscclpp",
                         "-o", tmp_path / "p")
    assert code == 0, err
    assert "note       1MiB: no candidate's file runs a call of that size" in out and "chosen at 1048000 bytes" in out
    assert len(list((tmp_path / "p").iterdir())) == 1
