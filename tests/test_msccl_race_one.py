"""The interpreter's scalar race check for one-chunk steps (msccl/race_one.py) against its vector path: the same
races reported and the same shadow memory, on files with races (dependencies dropped at random) and without; and
the vector clocks' narrower integer type."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from msccl_files import broadcast3

import forestcoll.msccl.interpreter as interp
from forestcoll import generate, load_topology
from forestcoll.msccl.export import ExportOptions, export_msccl
from forestcoll.msccl.ir import parse_algo, write_algo
from forestcoll.msccl.race_one import clock_dtype


def _both(monkeypatch, algo, **kw):
    """(result, shadows) of the scalar path and of the vector path on ``algo``."""
    out = []
    for scalar in (True, False):
        machines = []
        run = interp._Machine.run

        def spy(self, *a, _run=run, _seen=machines, **k):
            _seen.append(self)
            return _run(self, *a, **k)
        monkeypatch.setattr(interp._Machine, "run", spy)
        monkeypatch.setattr(interp, "SCALAR", scalar)
        result = interp.run_algo(algo, **kw)
        shadows = {key: [getattr(sh, f).copy() for f in ("w_gid", "w_clk", "w_step", "r_gid", "r_clk", "r_step",
                                                          "r_next")]
                   for key, sh in machines[0].shadow.items()}
        out.append((result, shadows))
        monkeypatch.undo()
    return out


def _same(monkeypatch, algo, **kw):
    (fast, fast_sh), (slow, slow_sh) = _both(monkeypatch, algo, **kw)
    assert fast.errors == slow.errors
    assert fast.ok == slow.ok
    assert fast_sh.keys() == slow_sh.keys()
    for key in fast_sh:
        for a, b in zip(fast_sh[key], slow_sh[key]):
            assert np.array_equal(a, b), key
    return fast


def _split_file(spec: str, split: int = 2) -> str:
    sched = generate(load_topology(spec), "allreduce")
    return write_algo(export_msccl(sched, ExportOptions(split=split, max_cnt=1)).algo)


def test_a_missing_dependency_is_reported_alike(monkeypatch):
    r = _same(monkeypatch, parse_algo(broadcast3(missing_dependency=True)))
    assert any("data race on gpu 1, buffer o chunk 0" in e for e in r.errors)


@pytest.mark.parametrize("seed", range(4))
def test_dropped_dependencies_report_the_same_races(monkeypatch, seed):
    text = _split_file("ring:n=4")
    deps = [m.start() for m in re.finditer(r'depid="\d+" deps="\d+"', text)]
    rng = random.Random(seed)
    for at in sorted(rng.sample(deps, max(1, len(deps) // 4)), reverse=True):
        end = text.index('"', text.index('deps="', at) + 6)
        text = text[:at] + 'depid="-1" deps="-1' + text[end:]
    r = _same(monkeypatch, parse_algo(text), slots=1, nbytes=None)
    assert any("data race" in e for e in r.errors)


def test_a_correct_file_is_clean_on_both_paths(monkeypatch):
    assert _same(monkeypatch, parse_algo(_split_file("dgx-a100:nodes=1")), slots=1, nbytes=None).ok


def test_many_readers_wrap_alike(monkeypatch):
    # 20 sends of one chunk before it is written again: more readers than the shadow keeps (16)
    steps = "".join(f'<step s="{i}" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" '
                    f'deps="-1" hasdep="0"/>' for i in range(20))
    recvs = "".join(f'<step s="{i}" type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1" depid="-1" '
                    f'deps="-1" hasdep="0"/>' for i in range(20))
    text = (f'<algo name="w" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="1" '
            f'outofplace="0" minBytes="0" maxBytes="0">'
            f'<gpu id="0" i_chunks="1" o_chunks="2" s_chunks="0"><tb id="0" send="1" recv="-1" chan="0">{steps}</tb>'
            f'<tb id="1" send="-1" recv="1" chan="0">{recvs}</tb></gpu>'
            f'<gpu id="1" i_chunks="1" o_chunks="2" s_chunks="0"><tb id="0" send="0" recv="-1" chan="0">{steps}</tb>'
            f'<tb id="1" send="-1" recv="0" chan="0">{recvs}</tb></gpu></algo>')
    text = text.replace('type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"', 'type="s" srcbuf="o" srcoff="0" '
                        'dstbuf="o" dstoff="1"').replace('type="r" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0"',
                                                         'type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1"')
    r = _same(monkeypatch, parse_algo(text), slots=1, nbytes=None)
    assert r.errors  # wrong by design (chunk 1 written 20 times): what matters is that both paths say the same


def test_clock_type():
    assert clock_dtype(0) is np.uint8 and clock_dtype(254) is np.uint8 and clock_dtype(255) is np.int16
    assert clock_dtype(32766) is np.int16
    assert clock_dtype(32767) is np.int32 and clock_dtype(10**6) is np.int32


def _with_clock(monkeypatch, algo, dtype, **kw):
    """(errors, shadows, the clocks' type) of a run whose vector clocks have type ``dtype`` (None: the chosen one)."""
    machines = []
    run = interp._Machine.run

    def spy(self, *a, _run=run, **k):
        machines.append(self)
        return _run(self, *a, **k)
    monkeypatch.setattr(interp._Machine, "run", spy)
    if dtype is not None:
        monkeypatch.setattr(interp, "clock_dtype", lambda ticks: dtype)
    result = interp.run_algo(algo, **kw)
    m = machines[0]
    shadows = {key: [getattr(sh, f).copy() for f in ("w_gid", "w_clk", "r_gid", "r_clk")] for key, sh in m.shadow.items()}
    kind = m.blocks[0].vc.dtype
    monkeypatch.undo()
    return result.errors, shadows, kind, max(int(b.vc.max()) for b in m.blocks)


@pytest.mark.parametrize("steps", [20, 127])
def test_narrow_clocks_find_what_wide_ones_find(monkeypatch, steps):
    # blocks of 127 transmissions in 2 iterations reach clock 254: still uint8, and the same races and shadow state
    # as with int32 clocks (chunk 1 sent and received again and again with no dependency: races by design)
    one = ('<step s="{i}" type="{k}" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1" depid="-1" deps="-1" '
           'hasdep="0"/>')
    sends = "".join(one.format(i=i, k="s") for i in range(steps))
    recvs = "".join(one.format(i=i, k="r") for i in range(steps))
    gpu = ('<gpu id="{g}" i_chunks="1" o_chunks="2" s_chunks="0"><tb id="0" send="{p}" recv="-1" chan="0">{s}</tb>'
           '<tb id="1" send="-1" recv="{p}" chan="0">{r}</tb></gpu>')
    text = ('<algo name="w" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="1" '
            'outofplace="0" minBytes="0" maxBytes="0">' + gpu.format(g=0, p=1, s=sends, r=recvs)
            + gpu.format(g=1, p=0, s=sends, r=recvs) + "</algo>")
    algo = parse_algo(text)
    narrow = _with_clock(monkeypatch, algo, None, slots=1, nbytes=None)
    wide = _with_clock(monkeypatch, algo, np.int32, slots=1, nbytes=None)
    assert narrow[2] == np.uint8 and wide[2] == np.int32
    assert narrow[0] and narrow[0] == wide[0] and narrow[3] == wide[3]
    assert narrow[3] == 2 * steps
    for a, b in zip(narrow[1].values(), wide[1].values()):
        for x, y in zip(a, b):
            assert np.array_equal(x, y)
