"""io19: ``-o -`` writes the command's one file to stdout and its report to stderr (cli/stdout.py); outputs that
are not one file (a directory, a picture) are refused in one line, before any work."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, SHARED, cli


@pytest.mark.parametrize("argv,name", [
    (["generate", "ring:n=4"], "s.json"),
    (["generate", "ring:n=4", "-c", "allgather", "--format", "msccl"], "a.xml"),
    (["generate", "ring:n=4", "--format", "mscclpp"], "p.json"),
    (["generate", "ring:n=4", "-c", "alltoall"], "t.json"),
    (["topo", "export", "dgx-a100"], "d.json"),
])
def test_stdout_holds_exactly_the_file(argv, name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*argv, "-o", name)
    assert code == 0, err
    code, out, err = cli(*argv, "-o", "-")
    assert code == 0, err
    assert out == (tmp_path / name).read_text(encoding="utf-8")
    assert sorted(os.listdir(tmp_path)) == [name]  # no file named "-"
    if argv[0] == "generate":
        assert "wrote" in err  # the report, on stderr


def test_export_and_import_to_stdout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli("generate", "ring:n=4", "--k", "1", "-o", "s.json")[0] == 0
    for fmt, name in (("mscclpp", "p.json"), ("msccl", "a.xml")):
        assert cli("export", "s.json", "--format", fmt, "-o", name)[0] == 0
        code, out, err = cli("export", "s.json", "--format", fmt, "-o", "-")
        assert code == 0 and out == (tmp_path / name).read_text(encoding="utf-8"), err
    dump = SHARED / "data" / "nccl-topo"
    dumps = sorted(dump.glob("*.xml")) if dump.is_dir() else []
    if dumps:
        assert cli("topo", "import", dumps[0], "-o", "i.json")[0] == 0
        code, out, err = cli("topo", "import", dumps[0], "-o", "-")
        assert code == 0 and out == (tmp_path / "i.json").read_text(encoding="utf-8"), err


@pytest.mark.parametrize("argv,words", [
    (["generate", "ring:n=4", "--sizes", "1MiB,1GiB"], "--sizes writes one file per size range"),
    (["topo", "draw", "ring:n=4"], "topo draw -o takes a picture file"),
    (["compare", "ring:n=4", "--sizes", "1MiB"], "compare -o takes a picture file"),
    (["generate", "ring:n=4", "--json"], "--json prints the report on stdout"),
    (["export", "s.json"], "cannot tell the format from '-'"),
])
def test_outputs_that_are_not_one_file_are_refused(argv, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli("generate", "ring:n=4", "-o", "s.json")[0] == 0
    code, out, err = cli(*argv, "-o", "-")
    assert code == 2 and out == "" and err.count("\n") == 1 and words in err, (code, out, err)
    assert sorted(os.listdir(tmp_path)) == ["s.json"]


def test_a_real_pipe(tmp_path):
    """In a real process: stdout carries the file alone, a reader can parse it, stderr the report."""
    proc = subprocess.run([sys.executable, "-m", "forestcoll", "generate", "ring:n=4", "-o", "-"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    import json

    assert proc.returncode == 0 and json.loads(proc.stdout)["collective"] == "allreduce"
    assert "wrote" in proc.stderr and os.listdir(tmp_path) == []


def test_a_file_named_dash_is_still_written_as_dot_slash_dash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("generate", "ring:n=4", "-o", "./-")
    assert code == 0 and (tmp_path / "-").is_file(), err
