"""Static checks: every rule of the runtimes' parser and limits is caught with a message naming the line."""

from __future__ import annotations

import pytest
from conftest import SHARED, real_msccl_files
from msccl_files import algo, allgather2, broadcast3, gpu, mismatched_counts, step, tb

from forestcoll.msccl.ir import parse_algo
from forestcoll.msccl.lint import lint

REAL = sorted((SHARED / "data" / "msccl-xml").glob("*.xml")) if (SHARED / "data" / "msccl-xml").is_dir() else []


def errors(text: str, runtime: str = "msccl-executor-nccl") -> list[str]:
    return [f.format("f.xml") for f in lint(parse_algo(text), text, runtime) if f.severity == "error"]


def warnings(text: str) -> list[str]:
    return [f.format("f.xml") for f in lint(parse_algo(text), text) if f.severity == "warning"]


def test_valid_files_are_clean():
    for text in (allgather2(), broadcast3()):
        assert lint(parse_algo(text), text) == []


@pytest.mark.parametrize("path", real_msccl_files())
def test_real_files_pass_lint(path):
    text = path.read_text()
    for runtime in ("msccl-executor-nccl", "rccl"):
        assert errors(text, runtime) == []


def test_real_files_present_or_skipped():
    if not REAL:
        pytest.skip("../shared/data/msccl-xml not available")
    assert len(REAL) >= 20


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda t: '<?xml version="1.0"?>\n' + t, "no <?xml"),
        (lambda t: t.replace("  ", "\t", 1).replace("<tb", "\t<tb", 1), "tabs are not allowed"),
        (lambda t: t.replace('send="1" recv="-1"', 'send="1"\n recv="-1"', 1), "attributes must be on the element's first line"),
        (lambda t: t.replace('proto="Simple"', "proto='Simple'"), "double quotes"),
        (lambda t: t.replace('proto="Simple"', 'proto="LL64"'), "proto 'LL64'"),
        (lambda t: t.replace('coll="allgather"', 'coll="allgatherv"'), "coll 'allgatherv'"),
        (lambda t: t.replace('nchannels="1"', 'nchannels="0"'), "nchannels=0"),
        (lambda t: t.replace('inplace="1"', 'inplace="0"'), "at least one of them 1"),
        (lambda t: t.replace('<gpu id="1"', '<gpu id="3"'), "gpu id 3 is outside 0..1"),
        (lambda t: t.replace('<tb id="1"', '<tb id="2"', 1), "tb ids must be contiguous"),
        (lambda t: t.replace('chan="0"', 'chan="5"', 1), "chan 5 is outside"),
        (lambda t: t.replace('type="s"', 'type="send"', 1), "unknown type 'send'"),
        (lambda t: t.replace('hasdep="0"', 'hasdep="2"', 1), "hasdep must be 0 or 1"),
        (lambda t: t.replace('step s="0" type="r"', 'step s="1" type="r"', 1), "step numbers must run"),
        (lambda t: t.replace('send="1" recv="-1"', 'send="-1" recv="-1"', 1), "sends but the tb has send=-1"),
        (lambda t: t.replace('srcbuf="i" srcoff="0"', 'srcbuf="x" srcoff="0"', 1), "srcbuf 'x'"),
    ],
)
def test_parser_rules(mutate, needle):
    found = errors(mutate(allgather2()))
    assert any(needle in e for e in found), found


def test_count_limit():
    text = allgather2().replace('cnt="1"', 'cnt="72"', 1)
    assert any("cnt 72 is outside 0..71" in e for e in errors(text))


def test_offsets_in_range():
    text = allgather2().replace('dstoff="1" cnt="1"', 'dstoff="2" cnt="1"', 1)
    found = errors(text)
    assert any("dstoff 2 is outside the 2 chunk(s) gpu 0 declares" in e for e in found), found
    # the runtime checks only the first chunk; the end of the range is ours to check
    text = allgather2().replace('type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="1"',
                                'type="r" srcbuf="o" srcoff="1" dstbuf="o" dstoff="1" cnt="2"', 1)
    assert any("dst chunks 1..2 are outside buffer o" in e for e in errors(text))


def test_mismatched_counts():
    found = errors(mismatched_counts())
    assert any("send(s) but" in e or "moves cnt 2" in e for e in found), found


def test_connection_without_partner():
    text = allgather2().replace('<tb id="0" send="0" recv="-1" chan="0">', '<tb id="0" send="-1" recv="-1" chan="0">', 1)
    text = text.replace('type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1"', 'type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="1"')
    found = errors(text)
    assert any("gpu 0 receives 1 time(s) from gpu 1 on channel 0, but gpu 1 has no tb sending to 0 there" in e
               for e in found), found


def test_duplicate_connection():
    g0 = gpu(0, 1, 2, 0, [tb(0, 1, -1, [step(0, "s")]), tb(1, 1, -1, [step(0, "s")])])
    g1 = gpu(1, 1, 2, 0, [tb(0, -1, 0, [step(0, "r", "o", 0, "o", 0), step(1, "r", "o", 0, "o", 0)])])
    found = errors(algo("allgather", 2, 2, [g0, g1]))
    assert any("a second tb with send=1 on channel 0" in e for e in found), found


def test_dependencies():
    ok = broadcast3()
    # the target step does not publish a flag and nothing later in its tb does
    found = errors(ok.replace('hasdep="1"', 'hasdep="0"'))
    assert any("waits forever" in e for e in found), found
    found = errors(ok.replace('depid="0" deps="0"', 'depid="7" deps="0"'))
    assert any("depends on tb 7, which does not exist" in e for e in found), found
    found = errors(ok.replace('depid="0" deps="0"', 'depid="0" deps="3"'))
    assert any("step 3, which does not exist" in e for e in found), found
    found = errors(ok.replace('depid="0" deps="0"', 'depid="200" deps="0"'))
    assert any("does not fit in int8" in e for e in found), found


def test_nop_chain_needs_its_own_dependency():
    g1 = gpu(1, 2, 2, 0, [
        tb(0, -1, 0, [step(0, "r", "o", 0, "o", 0, hasdep=1)]),
        tb(1, 2, -1, [step(0, "nop", cnt=0, depid=0, deps=0), step(1, "s", "o", 0, "o", 0)]),
    ])
    text = broadcast3().split("<gpu id=\"1\"")[0] + g1 + "\n" + "<gpu id=\"2\"" + broadcast3().split("<gpu id=\"2\"")[1]
    found = errors(text)
    assert any("follows nop dependencies but has no dependency of its own" in e for e in found), found


def test_warnings():
    # a nop without dependency is dropped by the parser and shifts step numbers
    g1 = gpu(1, 2, 2, 0, [
        tb(0, -1, 0, [step(0, "nop", cnt=0), step(1, "r", "o", 0, "o", 0, hasdep=1)]),
        tb(1, 2, -1, [step(0, "s", "o", 0, "o", 0, depid=0, deps=1)]),
    ])
    text = broadcast3().split("<gpu id=\"1\"")[0] + g1 + "\n" + "<gpu id=\"2\"" + broadcast3().split("<gpu id=\"2\"")[1]
    assert any("nop without a dependency is dropped" in w for w in warnings(text))


def test_runtime_limits_differ():
    steps = [step(i, "s", "i", 0, "o", 0) for i in range(65)]
    recvs = [step(i, "r", "o", 1, "o", 1) for i in range(65)]
    g0 = gpu(0, 1, 2, 0, [tb(0, 1, -1, steps)])
    g1 = gpu(1, 1, 2, 0, [tb(0, -1, 0, recvs)])
    found = errors(algo("allgather", 2, 2, [g0, g1]))
    assert any("65 steps (msccl-executor-nccl allows 64)" in e for e in found), found
    # 65 thread blocks: fine for msccl-executor-nccl, too many for RCCL
    tbs0 = [tb(i, 1, -1, [step(0, "s")], chan=i) for i in range(65)]
    tbs1 = [tb(i, -1, 0, [step(0, "r", "o", 0, "o", 0)], chan=i) for i in range(65)]
    text = algo("allgather", 2, 2, [gpu(0, 1, 2, 0, tbs0), gpu(1, 1, 2, 0, tbs1)], nchannels=65)
    assert any("nchannels=65" in e for e in errors(text, "msccl-executor-nccl"))
    assert any("65 thread blocks (rccl allows 64)" in e for e in errors(text, "rccl"))
