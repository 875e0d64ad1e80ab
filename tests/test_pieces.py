"""The runtimes' slicing rules (forestcoll.pieces.slices_for / tree_chunk) against NCCL's figures."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forestcoll.pieces import slices_for, tree_chunk

KiB, MiB = 1 << 10, 1 << 20
SLICE = MiB  # NCCL_BUFFSIZE 4 MiB / NCCL_STEPS 8 = a 512 KiB step; a ring slice is 2 steps


def nccl_tree_chunk(nbytes: int, depth: int) -> int:
    """NCCL 2.19 enqueue.cc (computeColl, tree + Simple), written out with integers as there."""
    chunk = 512 * KiB
    while nbytes // chunk < depth * 8 and chunk > 131072:
        chunk //= 2
    while nbytes // chunk < depth * 4 and chunk > 65536:
        chunk //= 2
    while nbytes // chunk < depth and chunk > 32768:
        chunk //= 2
    return chunk


@pytest.mark.parametrize(("nbytes", "depth", "chunk"), [
    (64 * MiB, 12, 512 * KiB),  # 128 chunks >= 96: a full step
    (32 * MiB, 12, 256 * KiB),  # 64 < 96 -> 256 KiB: 128 chunks
    (8 * MiB, 5, 128 * KiB),  # 16, 32 < 40 -> 128 KiB (the first loop stops there)
    (4 * MiB - 1, 1, 256 * KiB),  # 7 < 8 -> 256 KiB: 15 chunks
    (4 * MiB, 1, 512 * KiB),  # 8 chunks: no halving
    (1 * MiB, 12, 64 * KiB),  # 128 KiB: 8 < 48 -> 64 KiB: 16 >= 12
    (256 * KiB, 12, 32 * KiB),  # 64 KiB: 4 < 12 -> 32 KiB (the floor)
    (16 * KiB, 3, 32 * KiB),  # never below 32 KiB
    (1 * MiB, 0, 512 * KiB),  # depth 0: nothing to pipeline over
])
def test_tree_chunk_is_nccls_halving_sequence(nbytes, depth, chunk):
    assert tree_chunk(nbytes, depth, SLICE) == chunk == nccl_tree_chunk(nbytes, depth)
    assert slices_for(nbytes, SLICE, None, rule="tree", depth=depth) == max(1, math.ceil(nbytes / chunk))


@given(st.integers(1, 1 << 31), st.integers(0, 40))
def test_tree_rule_matches_nccl_everywhere(nbytes, depth):
    assert tree_chunk(nbytes, depth, SLICE) == nccl_tree_chunk(nbytes, depth)


@given(st.integers(1, 1 << 31), st.integers(1, 1 << 31), st.integers(0, 40))
def test_a_smaller_piece_never_gets_a_larger_chunk(a, b, depth):
    small, big = sorted((a, b))
    assert tree_chunk(small, depth, SLICE) <= tree_chunk(big, depth, SLICE)


@given(st.integers(1, 1 << 31), st.integers(0, 40))
def test_a_deeper_tree_never_gets_a_larger_chunk_or_fewer_slices(nbytes, depth):
    assert tree_chunk(nbytes, depth + 1, SLICE) <= tree_chunk(nbytes, depth, SLICE)
    assert (slices_for(nbytes, SLICE, None, rule="tree", depth=depth + 1)
            >= slices_for(nbytes, SLICE, None, rule="tree", depth=depth))


@given(st.integers(1, 1 << 31), st.integers(1, 1 << 31), st.integers(0, 40))
def test_a_much_smaller_piece_gets_more_slices_only_from_nccls_halving(a, b, depth):
    """The count is not monotone at the halving thresholds (NCCL's own rule: 4 MiB - 1 byte on a 1-deep tree
    is 15 chunks of 256 KiB, 4 MiB is 8 of 512 KiB; 38 MiB on a 27-deep tree is 304 chunks of 128 KiB, 114 MiB is
    229 of 512 KiB).  What holds: a piece half the size or less never gets a larger chunk, and more chunks than the
    larger piece (plus its partial last chunk) only when NCCL halved it, which stops below 16 x depth chunks (plus
    the partial one)."""
    small, big = sorted((a, b))
    if 2 * small <= big:
        assert tree_chunk(small, depth, SLICE) <= tree_chunk(big, depth, SLICE)
        assert (slices_for(small, SLICE, None, rule="tree", depth=depth)
                <= max(slices_for(big, SLICE, None, rule="tree", depth=depth) + 1, 16 * depth + 1))
    # and within a factor 2 never more than twice as many
    assert slices_for(small, SLICE, None, rule="tree", depth=depth) <= 2 * slices_for(big, SLICE, None, rule="tree",
                                                                                     depth=depth)


def test_the_non_monotone_step_is_nccls():
    assert slices_for(2 * MiB + 1, SLICE, None, rule="tree", depth=2) == 17
    assert slices_for(8 * MiB, SLICE, None, rule="tree", depth=2) == 16
    assert slices_for(4 * MiB - 1, SLICE, None, rule="tree", depth=1) == 16
    assert slices_for(4 * MiB, SLICE, None, rule="tree", depth=1) == 8


@pytest.mark.parametrize(("nbytes", "count"), [
    (16 * KiB, 1),  # one slice: at most 32 KiB (slice / 32)
    (40 * KiB, 2),  # the loop's chunk in two slices of at least 32 KiB
    (1 * MiB, 2),
    (2 * MiB, 2),  # one 2 MiB chunk (CHUNKSTEPS 4 x 512 KiB) in two 1 MiB slices (SLICESTEPS 2)
    (3 * MiB, 4),
    (64 * MiB, 64),  # no cap: NCCL loops over the data
])
def test_ring_rule(nbytes, count):
    assert slices_for(nbytes, SLICE, None, rule="ring") == count


@given(st.integers(1, 1 << 31), st.integers(1, 1 << 31))
def test_ring_and_step_rules_are_monotone(a, b):
    small, big = sorted((a, b))
    for rule in ("ring", "step"):
        assert slices_for(small, SLICE, None, rule=rule) <= slices_for(big, SLICE, None, rule=rule)


def test_step_rule_and_cap():
    assert slices_for(64 * MiB, SLICE, None, rule="step") == 128  # 512 KiB steps (BROADCAST_CHUNKSTEPS = 1)
    assert slices_for(64 * MiB, SLICE, 16, rule="step") == 16
    assert slices_for(64 * MiB, SLICE, 16, rule="tree", depth=3) == 16


def test_fixed_rule_is_the_earlier_one():
    assert slices_for(64 * MiB, SLICE, 16) == 16
    assert slices_for(1 * MiB, SLICE, 16) == 8  # at least 8 down to 64 KiB
    assert slices_for(1 * MiB, SLICE, 16, min_slices=1) == 1
    assert slices_for(100 * KiB, SLICE, 16) == 1


def test_unknown_rule():
    with pytest.raises(ValueError, match="unknown slicing rule"):
        slices_for(MiB, SLICE, None, rule="bogus")
