"""The interpreter: runtime semantics (parser rewriting, flags, FIFOs, regimes), results, deadlocks, races."""

from __future__ import annotations

import pytest
from conftest import SHARED, real_msccl_files
from msccl_files import algo, allgather2, broadcast3, deadlock2, gpu, mismatched_counts, step, tb

from forestcoll.errors import UsageError
from forestcoll.msccl.interpreter import DTYPES, OPS, run_algo, run_modes
from forestcoll.msccl.ir import MscclError, parse_algo
from forestcoll.msccl.semantics import compile_tb, regime

REAL_DIR = SHARED / "data" / "msccl-xml"


def run(text: str, **kw):
    return run_algo(parse_algo(text), **kw)


# ----- the parser's rewriting -------------------------------------------------------------------


def _tb(steps):
    return parse_algo(algo("allreduce", 2, 4, [gpu(0, 4, 4, 4, [tb(0, -1, -1, steps)]),
                                                gpu(1, 4, 4, 4, [tb(0, -1, -1, [step(0, "cpy")])])])).gpus[0].tbs[0]


def test_nops_fold_into_the_next_step():
    t = compile_tb(_tb([step(0, "nop", cnt=0, depid=1, deps=0), step(1, "nop", cnt=0, depid=2, deps=3),
                        step(2, "cpy", depid=3, deps=1, hasdep=1)]), 0)
    assert len(t) == 1
    assert t[0].deps == ((1, 0), (2, 3), (3, 1))
    assert t[0].step == 2  # the kernel's step counter skips the folded nops


def test_nop_chain_without_own_dependency_is_refused():
    with pytest.raises(MscclError, match="follows nop dependencies but has none of its own"):
        compile_tb(_tb([step(0, "nop", cnt=0, depid=1, deps=0), step(1, "cpy")]), 0)


def test_reductions_into_one_chunk_fuse():
    steps = [step(0, "re", "s", 0, "o", 0), step(1, "re", "s", 1, "o", 0), step(2, "re", "s", 2, "o", 0, hasdep=1),
             step(3, "re", "s", 3, "o", 0)]
    t = compile_tb(_tb(steps), 0)
    assert [x.srcoffs for x in t] == [(0, 1, 2), (3,)]  # a step that publishes a flag ends the fusion
    assert t[0].hasdep and t[0].step == 2 and t[1].step == 3


def test_unknown_step_type_is_refused():
    with pytest.raises(MscclError, match="unknown step type 'copy'"):
        compile_tb(_tb([step(0, "copy")]), 0)


def test_regimes():
    a = parse_algo(allgather2())
    assert regime(a, None) == regime(a, None, 2)
    assert regime(a, None).max_count == 1
    small = regime(a, 1024)
    assert small.max_count == 71 and small.iterations == 1
    big = regime(a, 1 << 30)
    assert big.max_count == 1 and big.iterations == 2


# ----- results -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", list(OPS))
def test_correct_file_in_every_dtype_and_op(dtype, op):
    r = run(broadcast3(), dtype=dtype, op=op)
    assert r.ok, r.errors
    assert r.checked and r.root == 0


def test_every_declared_mode_runs():
    a = parse_algo(allgather2().replace('outofplace="0"', 'outofplace="1"'))
    inplace, outofplace = run_modes(a)
    assert (inplace.mode, outofplace.mode) == ("in-place", "out-of-place")
    assert inplace.ok
    # out of place a GPU's own block of the output needs a copy of its input, which this file lacks
    assert "gpu 0 output chunk 0 element 0: got nan" in outofplace.errors[0]
    assert "(never written)" in outofplace.errors[0]


def test_deadlock_names_ranks_tbs_and_steps():
    r = run(deadlock2())
    assert r.deadlocked and not r.ok
    lines = [s.format() for s in r.stuck]
    assert lines == [
        "gpu 0 tb 0 step 0 (r, line 4, iteration 0): waits to receive from gpu 1 on channel 0; "
        "gpu 1 tb 0 is at step 0 (r) of iteration 0",
        "gpu 1 tb 0 step 0 (r, line 10, iteration 0): waits to receive from gpu 0 on channel 0; "
        "gpu 0 tb 0 is at step 0 (r) of iteration 0",
    ]


def test_missing_dependency_is_a_data_race():
    r = run(broadcast3(missing_dependency=True))
    assert not r.ok
    assert any("data race on gpu 1, buffer o chunk 0" in e and "tb 1 step 0 (s, line 12) reads it" in e
               and "tb 0 step 0 (r, line 9) writes it" in e for e in r.errors), r.errors
    # without the detector the same file happens to produce the right numbers here
    assert run(broadcast3(missing_dependency=True), race_check=False).ok


def test_mismatched_counts():
    r = run(mismatched_counts())
    assert any("connection gpu 0 -> gpu 1 channel 0: tb 0 step 0 on gpu 0 sends cnt 2 but tb 1 step 0 (line 15) "
               "receives cnt 1" in e for e in r.errors), r.errors


def test_wrong_destination_is_a_wrong_result():
    text = allgather2().replace('type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1"',
                                'type="r" srcbuf="o" srcoff="0" dstbuf="o" dstoff="0"', 1)
    r = run(text)
    assert not r.ok
    assert any(e.startswith("gpu 0 output chunk 0 element 0") for e in r.errors), r.errors
    # it also overwrites the chunk GPU 0 is sending, unordered with that send
    assert any("data race on gpu 0, buffer o chunk 0" in e for e in r.errors)


def test_out_of_place_input_must_stay():
    # GPU 0 receives into its input buffer: wrong for an out-of-place call
    g0 = gpu(0, 1, 2, 0, [tb(0, 1, -1, [step(0, "s", "i", 0, "o", 0)]), tb(1, -1, 1, [step(0, "r", "o", 1, "i", 0)]),
                          tb(2, -1, -1, [step(0, "cpy", "i", 0, "o", 0, depid=0, deps=0)])])
    g1 = gpu(1, 1, 2, 0, [tb(0, 0, -1, [step(0, "s", "i", 0, "o", 1)]), tb(1, -1, 0, [step(0, "r", "o", 0, "o", 0)]),
                          tb(2, -1, -1, [step(0, "cpy", "i", 0, "o", 1)])])
    text = algo("allgather", 2, 2, [g0, g1], inplace=0, outofplace=1).replace(
        '<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>',
        '<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="1"/>', 1)
    r = run(text, mode="out-of-place")
    assert any("gpu 0 overwrote its input buffer" in e for e in r.errors), r.errors


def test_flag_waits_for_the_next_published_step():
    # tb 1 on GPU 1 waits on step 0 of tb 0, which publishes nothing; step 1 does, so the wait ends there
    g1 = gpu(1, 2, 2, 0, [
        tb(0, -1, 0, [step(0, "r", "o", 0, "o", 0), step(1, "cpy", "o", 0, "o", 1, hasdep=1)]),
        tb(1, 2, -1, [step(0, "s", "o", 0, "o", 0, depid=0, deps=0)]),
    ])
    base = broadcast3()
    text = base.split('<gpu id="1"')[0] + g1 + "\n" + '<gpu id="2"' + base.split('<gpu id="2"')[1]
    text = text.replace('nchunksperloop="1"', 'nchunksperloop="2"')
    r = run(text, race_check=True)
    assert not r.deadlocked
    # with no later flag at all the last iteration waits forever
    r = run(text.replace('hasdep="1"', 'hasdep="0"'))
    assert r.deadlocked
    assert "waits for tb 0 to reach step 0 of iteration 0; tb 0 has published nothing yet" in r.stuck[0].reason


def test_count_must_split_into_chunks():
    # allgather: chunk = count x ngpus / nchunksperloop must be whole
    with pytest.raises(UsageError, match="does not split into 4 equal chunks"):
        run(mismatched_counts(), count=3)
    r = run(allgather2(), count=8)
    assert r.ok and r.chunk_elems == 8


def test_bad_arguments():
    for kw in ({"dtype": "bfloat17"}, {"op": "xor"}, {"iterations": 0}, {"slots": 0}, {"mode": "sideways"},
               {"max_count": 0}, {"nbytes": 0}):
        with pytest.raises(UsageError):
            run(allgather2(), **kw)


# ----- real files --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", real_msccl_files())
def test_real_files_run_to_the_right_result(path):
    a = parse_algo(path.read_text(), path.name)
    for r in run_modes(a, source=path.name):
        assert r.ok, (r.mode, r.errors[:3], [s.format() for s in r.stuck[:3]])
        assert r.checked


@pytest.mark.slow
def test_ring_needs_two_slots():
    """RCCL's ring allreduce relies on a connection buffering two calls; with one it deadlocks."""
    path = REAL_DIR / "all-reduce-ring-simple.xml"
    if not path.exists():
        pytest.skip("../shared/data/msccl-xml not available")
    a = parse_algo(path.read_text(), path.name)
    assert run_algo(a, slots=2, race_check=False).ok
    stuck = run_algo(a, slots=1, race_check=False)
    assert stuck.deadlocked
    assert "connection full: 1 of 1 slot(s)" in stuck.stuck[0].reason


def test_small_message_files_rely_on_their_size_range():
    """allreduce-allpairs-16n sends 15 chunks in one step: fine up to its 8 KB maxBytes, a deadlock when unbounded."""
    path = REAL_DIR / "allreduce-allpairs-16n-16tb.xml"
    if not path.exists():
        pytest.skip("../shared/data/msccl-xml not available")
    a = parse_algo(path.read_text(), path.name)
    assert run_algo(a, race_check=False).ok
    assert run_algo(a, nbytes=None, race_check=False).deadlocked
