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


# ----- numbers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("number", ["1e-300", "1" + "0" * 5000, "1e999999", "1/" + "3" * 50, "-1e400"])
def test_numbers_outside_the_limits_are_refused_in_user_terms(number):
    refused(*cli("bound", f"ring:n=4,bw={number}"), "outside the numbers forestcoll takes", "40 significant digits")


def test_number_parser_limits():
    from fractions import Fraction

    from forestcoll.errors import ForestCollError
    from forestcoll.rational import parse_rational

    assert parse_rational("1e30") == 10**30 and parse_rational("1e-30") == Fraction(1, 10**30)
    assert parse_rational("1." + "1" * 39) == Fraction(int("1" * 40), 10**39) and parse_rational(0) == 0
    for bad in ("1e31", "1e-31", "1." + "1" * 40, 10**41, 1e-300, float("nan")):
        with pytest.raises(ForestCollError):
            parse_rational(bad)


def test_many_digit_bandwidths_name_the_limit_not_int64():
    code, out, err = cli("bound", "ring:n=4,bw=3.1415926535897932384626433832795")
    refused(code, out, err, "2^62", "round them to fewer digits")
    assert "int64" not in err


@pytest.mark.parametrize(("flag", "words"), [("foo=1", "not a link class"), ("=5", "class before '=' is empty"),
                                             ("nvlink=1e400", "outside the numbers"), ("nvlink=-1", ">= 0")])
def test_latency_table_is_checked(flag, words):
    refused(*cli("simulate", "ring", "-t", "dgx-a100", "--size", "1MiB", "--latency", flag), words)


def test_yaml_nan_and_huge_numbers(tmp_path):
    base = "name: x\nbox:\n  compute: {count: 2, prefix: g}\n  links:\n    - {between: [g0, g1], bandwidth: %s}\n"
    for value, words in ((".nan", "not a finite number"), ("-.inf", "not a finite number"),
                         ("1e999999", "outside the numbers"), ("0x1p3", "not a")):
        path = tmp_path / "t.yaml"
        path.write_text(base % value)
        refused(*cli("topo", "show", path), words)
