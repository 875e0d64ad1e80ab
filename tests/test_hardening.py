"""Hardening (issue 14): each class of bad input an adversarial pass found gets one clear line and exit 2."""

from __future__ import annotations

import os

import pytest
from conftest import ROOT, cli


def refused(code: int, out: str, err: str, *words: str) -> None:
    """Exit 2, exactly one line on stderr naming ``words``, no traceback, no internal error."""
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("forestcoll: error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    for w in words:
        assert w in err, (w, err)


# ----- writers ---------------------------------------------------------------------------------------


@pytest.fixture
def schedule(tmp_path):
    path = tmp_path / "s.json"
    assert cli("generate", "ring:n=4", "-o", path)[0] == 0
    return path


def test_every_writer_refuses_a_bad_output_and_leaves_files_alone(tmp_path, schedule):
    """-o onto a directory, under a file, into a missing directory, onto its own input: one line, nothing
    written, an existing file untouched."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "afile").write_text("keep\n")
    topo = tmp_path / "t.json"
    assert cli("topo", "export", "ring:n=4", "-o", topo)[0] == 0
    before = topo.read_bytes(), schedule.read_bytes()
    writers = [
        ("generate", "ring:n=4", "-o"), ("generate", "ring:n=4", "--format", "msccl", "-o"),
        ("export", schedule, "-o"), ("topo", "export", "ring:n=4", "-o"), ("topo", "import", "ring:n=4", "-o"),
        ("topo", "draw", "ring:n=4", "-o"), ("compare", "ring:n=4", "--sizes", "1MiB", "-o"),
    ]
    for cmd in writers:
        for bad, words in ((tmp_path / "dir", ("is a directory",)), (tmp_path / "afile" / "x.json", ("not a directory",)),
                           (tmp_path / "no" / "x.json", ("does not exist",))):
            refused(*cli(*cmd, bad), *words)
    refused(*cli("generate", topo, "-o", topo), "also an input")
    refused(*cli("export", schedule, "-o", schedule), "also an input")
    refused(*cli("generate", "ring:n=4", "--sizes", "1MiB", "-o", tmp_path / "afile"), "not a directory")
    assert (topo.read_bytes(), schedule.read_bytes()) == before
    assert (tmp_path / "afile").read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "dir", "s.json", "t.json"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        refused(*cli("generate", "ring:n=4", "-o", ro / "x.json"), "permission denied")
    finally:
        ro.chmod(0o755)


def test_atomic_writer_turns_os_errors_into_one_line(tmp_path, monkeypatch):
    """A write that fails half-way (disk full) leaves neither a partial nor a temporary file."""
    from forestcoll.errors import ForestCollError
    from forestcoll.fileio import atomic_write_text

    target = tmp_path / "x.txt"
    target.write_text("old")

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(ForestCollError, match="No space left"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_usage_errors_have_one_prefix():
    code, out, err = cli("bound", "ring:n=4", "--bogus")
    refused(code, out, err, "unrecognized arguments")
    assert err.count("forestcoll:") == 1
    code, out, err = cli("msccl", "run")
    refused(code, out, err, "msccl run:")
    assert ROOT.is_dir()
