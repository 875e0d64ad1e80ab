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


@pytest.mark.parametrize("argv", [
    ["generate", "ring:n=4"],
    ["generate", "ring:n=4", "-c", "allgather", "--format", "msccl"],
    ["generate", "ring:n=4", "--format", "mscclpp"],
    ["generate", "ring:n=4", "-c", "alltoall"],
    ["topo", "import", "dgx-a100"],
])
def test_the_report_says_where_the_file_went(argv, tmp_path, monkeypatch):
    """polish20: the report's ``wrote`` line says "to standard output", not the ``-`` the user typed."""
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*argv, "-o", "-")
    assert code == 0, err
    wrote = [line for line in err.splitlines() if line.startswith("wrote")]
    assert len(wrote) == 1 and wrote[0].split(None, 1)[1] == "to standard output", err
    code, out, err = cli(*argv, "-o", "./-")  # a file named "-" is named as a file
    assert code == 0 and [line.split(None, 1)[1] for line in out.splitlines() if line.startswith("wrote")] == ["./-"]


def test_writers_take_a_stream_as_their_path():
    """polish20: ``-o -`` reaches the writers as an explicit fileio.Stream (no module-level state in fileio): each
    writer puts the same bytes into the stream it is given as into a file, and nothing on sys.stdout."""
    import contextlib
    import io

    from forestcoll import fileio
    from forestcoll.topology import load_topology, write_topology

    assert not hasattr(fileio, "files_to") and not hasattr(fileio, "_STDOUT")
    topo = load_topology("ring:n=4")
    into, seen = io.BytesIO(), io.StringIO()
    wrapper = io.TextIOWrapper(into, encoding="utf-8", write_through=True)  # as sys.stdout: text over a byte buffer
    with contextlib.redirect_stdout(seen):
        text = write_topology(topo, fileio.Stream(wrapper))
    assert into.getvalue().decode("utf-8") == text and seen.getvalue() == ""
    plain = io.StringIO()  # a text stream without a byte buffer gets the text
    fileio.atomic_write_text(fileio.Stream(plain), "é\n")
    assert plain.getvalue() == "é\n" and str(fileio.Stream(plain)) == "-"
    assert fileio.check_output(fileio.Stream(plain)).name == "-"
