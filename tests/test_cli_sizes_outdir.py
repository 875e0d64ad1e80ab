"""audit18: `generate --sizes -o DIR` writes all its range files or nothing new, and says when DIR holds an earlier
run's files (the runtime loads every file of the folder and picks by size, so stale ranges would overlap)."""

from __future__ import annotations

import pytest
from conftest import cli


def test_a_refused_run_leaves_no_directory(tmp_path):
    code, _, err = cli("generate", "ring:n=4", "--sizes", "3", "-o", tmp_path / "new" / "plans")
    assert code == 2 and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fails", [KeyboardInterrupt, RuntimeError])
def test_an_interrupted_run_removes_what_it_wrote(tmp_path, monkeypatch, fails):
    from forestcoll.simulate import select

    def half_done(topo, collective, sizes, outdir, **_kw):
        (tmp_path / "out" / "allreduce-00-ring-0-1048575.xml").write_text("<algo/>")
        raise fails("stopped")
    monkeypatch.setattr(select, "export_by_size", half_done)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("kept")
    code, _, err = cli("generate", "ring:n=4", "--sizes", "1MiB", "-o", tmp_path / "out")
    assert code in (1, 130), err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mine.txt"]
    monkeypatch.setattr(select, "export_by_size", half_done)
    code, _, err = cli("generate", "ring:n=4", "--sizes", "1MiB", "-o", tmp_path / "a" / "b")
    assert code in (1, 130) and not (tmp_path / "a").exists()


def test_files_of_an_earlier_run_are_named(tmp_path):
    out = tmp_path / "xml"
    assert cli("generate", "ring:n=4", "--sizes", "1MiB", "-o", out)[0] == 0
    assert cli("generate", "ring:n=4", "-c", "allgather", "--sizes", "1MiB", "-o", out)[0] == 0
    code, stdout, _ = cli("generate", "ring:n=4", "--sizes", "1MiB", "-o", out)
    assert code == 0 and "earlier run" not in stdout  # the allgather file is another collective's
    (out / "allreduce-01-ring-2097152-any.xml").write_text((out / "allreduce-00-ring-0-any.xml").read_text())
    code, stdout, _ = cli("generate", "ring:n=4", "--sizes", "1MiB", "-o", out)
    assert code == 0 and "1 file(s) of an earlier run for allreduce (allreduce-01-ring-2097152-any.xml)" in stdout
