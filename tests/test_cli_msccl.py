"""The MSCCL commands: export, generate --format msccl, msccl run / lint; one-line errors, exit 2, no partial files."""

from __future__ import annotations

import json

import pytest
from conftest import cli
from msccl_files import broadcast3, deadlock2, mismatched_counts

from forestcoll.cli import main

run = cli  # in-process; test_cli.py's test_real_processes starts real ones


def test_generate_then_export(tmp_path, capsys):
    sched = tmp_path / "sched.json"
    xml = tmp_path / "algo.xml"
    assert main(["generate", "dgx-a100:nodes=2", "-c", "allreduce", "-o", str(sched)]) == 0
    capsys.readouterr()
    assert main(["export", str(sched), "--format", "msccl", "-o", str(xml), "--runtime", "rccl"]) == 0
    out = capsys.readouterr().out
    # the stage layout: one channel per pipeline stage (reduce-scatter height 2, then allgather depth 2)
    assert "layout     4 channel(s), 52 thread blocks per GPU (most), 14 steps per thread block (most)" in out
    assert "rccl: fits" in out and "msccl-executor-nccl: fits" in out
    assert "checked    in-place: OK" in out and "checked    out-of-place: OK" in out
    assert "count a multiple of 208" in out
    text = xml.read_text()
    assert text.startswith("<!-- forestcoll: allreduce for dgx-a100:nodes=2")
    assert main(["msccl", "run", str(xml)]) == 0
    assert "OK: outputs equal the reference allreduce, no data race" in capsys.readouterr().out
    assert main(["msccl", "lint", str(xml), "--runtime", "rccl"]) == 0
    assert "0 error(s), 0 warning(s) for rccl" in capsys.readouterr().out


def test_generate_format_msccl_json(tmp_path, capsys):
    xml = tmp_path / "ag.xml"
    args = ["generate", "ring:n=4", "-c", "allgather", "--k", "2", "--format", "msccl", "-o", str(xml), "--proto", "LL", "--instances", "2",
            "--mode", "in-place", "--max-bytes", "65536", "--json", "--name", "ring_ag"]
    assert main(args) == 0
    out = capsys.readouterr().out
    data = json.loads(out[out.index("{"):])
    assert data["channels"] == 8 and data["fits"] == {"msccl-executor-nccl": True, "rccl": True}
    head = xml.read_text().splitlines()[2]
    for attr in ('name="ring_ag"', 'proto="LL"', 'inplace="1"', 'outofplace="0"', 'maxBytes="65536"', 'nchannels="8"'):
        assert attr in head
    assert main([*args, "--layout", "tree"]) == 0  # trees round robin: the fewest channels (one per instance)
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"):])["channels"] == 2


def test_run_json_and_options(tmp_path, capsys):
    xml = tmp_path / "b.xml"
    xml.write_text(broadcast3())
    assert main(["msccl", "run", str(xml), "--json", "--dtype", "int8", "--op", "max", "--slots", "1",
                 "--count", "6", "--iterations", "3", "--bytes", "unbounded"]) == 0
    data = json.loads(capsys.readouterr().out)
    (r,) = data["runs"]
    assert data["ok"] and r["root"] == 0 and r["chunk_elems"] == 6 and r["iterations"] == 3 and r["slots"] == 1


def test_deadlock_is_one_line_exit_2(tmp_path):
    xml = tmp_path / "d.xml"
    xml.write_text(deadlock2())
    code, out, err = run("msccl", "run", str(xml))
    assert code == 2
    assert "result     DEADLOCK: 2 thread block(s) stuck" in out
    assert "stuck      gpu 0 tb 0 step 0 (r, line 4, iteration 0): waits to receive from gpu 1" in out
    assert err.count("\n") == 1 and err.startswith("forestcoll: error: ") and "deadlock: gpu 0 tb 0 step 0" in err


def test_race_and_mismatch_exit_2(tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text(broadcast3(missing_dependency=True))
    code, out, err = run("msccl", "run", str(xml))
    assert code == 2 and "data race on gpu 1" in err and err.count("\n") == 1
    xml.write_text(mismatched_counts())
    code, out, err = run("msccl", "lint", str(xml))
    assert code == 2 and "1 send(s) but 2 receive(s)" in err and err.count("\n") == 1
    assert "send #0 moves cnt 2 (line 4) but receive #0 expects cnt 1" in out
    assert "2 error(s)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["msccl", "run", "nosuch.xml"], "nosuch.xml: no such MSCCL file"),
        (["msccl", "run", "{bad}", "--dtype", "bfloat17"], "unknown dtype 'bfloat17'"),
        (["msccl", "run", "{bad}", "--bytes", "-5"], "--bytes must be >= 1"),
        (["msccl", "run", "{bad}", "--bytes", "lots"], "--bytes expects a positive integer or 'unbounded'"),
        (["msccl", "lint", "{bad}", "--runtime", "mpich"], "invalid choice: 'mpich'"),
        (["export", "nosuch.json", "-o", "{out}"], "nosuch.json"),
        (["generate", "ring:n=4", "--format", "msccl"], "--format msccl needs -o FILE.xml"),
        (["generate", "ring:n=4", "--format", "msccl", "-o", "{out}", "--instances", "0"], "--instances must be >= 1"),
        (["generate", "fully-connected:n=40", "-c", "allgather", "--k", "1", "--format", "msccl", "-o", "{out}", "--runtime", "rccl"],
         "79 thread blocks on one GPU"),
    ],
)
def test_bad_input(tmp_path, args, message):
    bad = tmp_path / "bad.xml"
    bad.write_text(broadcast3())
    out = tmp_path / "out.xml"
    args = [a.replace("{bad}", str(bad)).replace("{out}", str(out)) for a in args]
    code, _stdout, err = run(*args)
    assert code == 2, err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists()


def test_malformed_xml_one_line(tmp_path):
    bad = tmp_path / "m.xml"
    bad.write_text(broadcast3().replace("</algo>", ""))
    code, _out, err = run("msccl", "lint", str(bad))
    assert code == 2 and "malformed XML" in err and err.count("\n") == 1
