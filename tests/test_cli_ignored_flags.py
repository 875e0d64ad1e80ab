"""audit18: flags a run would have ignored are refused, one line, exit 2, nothing written.

Before, ``generate --max-height 2 --format mscclpp`` wrote a plan of deeper trees, ``--proto LL`` with a schedule
JSON wrote the schedule as without it, ``--root`` with allreduce was dropped, ``--sizes ''`` wrote a schedule JSON
instead of files per size, and all-to-all ignored ``--max-height`` / ``--max-k`` / ``--candidates`` /
``--schedule-format``."""

from __future__ import annotations

import pytest
from conftest import cli


def one_line(code: int, out: str, err: str, *texts: str) -> None:
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("forestcoll: error: ") and "Traceback" not in err, err
    for text in texts:
        assert text in err, (text, err)


@pytest.mark.parametrize("args, words", [
    (["generate", "ring:n=6", "--max-height", "3", "--format", "mscclpp", "-o", "{o}.json"],
     ["--max-height", "--format mscclpp", "export"]),
    (["generate", "ring:n=4", "--max-height", "2", "--sizes", "1MiB", "-o", "{o}"], ["--max-height", "--sizes"]),
    (["generate", "ring:n=4", "--proto", "LL", "-o", "{o}.json"], ["--proto", "export flag"]),
    (["generate", "ring:n=4", "--layout", "tree", "-o", "{o}.json"], ["--layout", "export flag"]),
    (["generate", "ring:n=4", "--min-bytes", "0", "-o", "{o}.json"], ["--min-bytes"]),
    (["generate", "ring:n=4", "--runtime", "rccl", "-o", "{o}.json"], ["--runtime"]),
    (["generate", "ring:n=4", "--no-check", "-o", "{o}.json"], ["--no-check"]),
    (["generate", "ring:n=4", "--schedule-format", "v2", "--format", "msccl", "-o", "{o}.xml"], ["--schedule-format"]),
    (["generate", "ring:n=4", "--root", "r1", "-o", "{o}.json"], ["--root", "allreduce has no root"]),
    (["bound", "ring:n=4", "-c", "allgather", "--root", "r1"], ["--root", "allgather has no root"]),
    (["compare", "ring:n=4", "--root", "r1", "--sizes", "1MiB", "--algorithms", "ring"], ["--root"]),
    (["generate", "ring:n=4", "--sizes", "", "-o", "{o}"], ["--sizes is empty"]),
    (["generate", "ring:n=4", "-c", "alltoall", "--max-height", "2", "-o", "{o}.json"], ["--max-height", "alltoall"]),
    (["generate", "ring:n=4", "-c", "alltoall", "--max-k", "3", "-o", "{o}.json"], ["--max-k", "alltoall"]),
    (["generate", "ring:n=4", "-c", "alltoall", "--candidates", "all", "-o", "{o}.json"], ["--candidates"]),
    (["generate", "ring:n=4", "-c", "alltoall", "--schedule-format", "v2", "-o", "{o}.json"], ["--schedule-format"]),
    (["generate", "ring:n=4", "-c", "alltoall", "--proto", "LL", "-o", "{o}.json"], ["--proto"]),
])
def test_a_flag_the_run_would_ignore_is_refused(tmp_path, args, words):
    out = tmp_path / "out"
    one_line(*cli(*[a.format(o=out) for a in args]), *words)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [
    ["generate", "ring:n=6", "--max-height", "3", "--format", "msccl", "-o", "{o}.xml"],
    ["generate", "ring:n=4", "-c", "reduce", "--root", "r1", "-o", "{o}.json"],
    ["bound", "ring:n=4", "-c", "broadcast", "--root", "r2"],
    ["generate", "ring:n=4", "--max-k", "3", "-o", "{o}.json"],
    ["generate", "ring:n=4", "--schedule-format", "v2", "-o", "{o}.json"],
    ["generate", "ring:n=4", "-c", "alltoall", "--format", "msccl", "--proto", "LL", "-o", "{o}.xml"],
    ["export", "{s}", "--proto", "LL", "-o", "{o}.json"],
])
def test_the_flags_where_they_apply_still_run(tmp_path, args):
    sched = tmp_path / "s.json"
    assert cli("generate", "ring:n=4", "-o", sched)[0] == 0
    code, out, err = cli(*[a.format(o=tmp_path / "out", s=sched) for a in args])
    assert code == 0, err


def test_export_defaults_are_unchanged(tmp_path):
    """--proto and --min-bytes default to None in the parser now; the files are what they were (Simple, from 0)."""
    sched = tmp_path / "s.json"
    assert cli("generate", "ring:n=4", "-o", sched)[0] == 0
    for name, flags in (("a.xml", []), ("b.xml", ["--proto", "Simple", "--min-bytes", "0"]),
                        ("a.json", []), ("b.json", ["--proto", "Simple", "--min-bytes", "0"])):
        assert cli("export", sched, "-o", tmp_path / name, *flags)[0] == 0
    assert (tmp_path / "a.xml").read_text() == (tmp_path / "b.xml").read_text()
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    assert 'proto="Simple"' in (tmp_path / "a.xml").read_text()
