"""simulate / compare / generate --sizes from the command line: JSON contracts, plots, one-line errors."""

from __future__ import annotations

import json

import pytest
from conftest import cli

from forestcoll.cli import main

run = cli  # in-process; test_cli.py's test_real_processes starts real ones


def test_simulate_schedule_json(tmp_path, capsys):
    sched = tmp_path / "s.json"
    assert main(["generate", "ring:n=4", "-c", "allreduce", "-o", str(sched)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(sched), "--size", "64MiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"time_s", "algbw_gbps", "busbw_gbps"} <= set(data)
    assert data["algbw_gbps"] == pytest.approx(data["size_bytes"] / data["time_s"] / 1e9)
    assert data["busbw_gbps"] == pytest.approx(data["algbw_gbps"] * 2 * 3 / 4)


def test_simulate_baseline_and_msccl_file(tmp_path, capsys):
    assert main(["simulate", "ring", "-t", "ring:n=4", "-c", "allgather", "--size", "16MiB"]) == 0
    out = capsys.readouterr().out
    assert "algorithm  ring: allgather on ring:n=4 (4 ranks)" in out and "algbw" in out
    xml = tmp_path / "a.xml"
    assert main(["generate", "ring:n=4", "-c", "allgather", "--format", "msccl", "-o", str(xml)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(xml), "-t", "ring:n=4", "--json", "--latency", "link=0.5"]) == 0
    assert json.loads(capsys.readouterr().out)["collective"] == "allgather"


def test_compare_json_and_plot(tmp_path, capsys):
    plot = tmp_path / "cmp.png"
    assert main(["compare", "ring:n=4", "-c", "allreduce", "--sizes", "1MiB..4MiB", "-o", str(plot), "--json",
                 "--jobs", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {r["algorithm"] for r in data["rows"]}
    assert {"forestcoll", "ring", "double-binary-tree", "direct"} <= names
    assert all({"algorithm", "size_bytes", "algbw_gbps"} <= set(r) for r in data["rows"])
    assert sorted({r["size_bytes"] for r in data["rows"]}) == [1 << 20, 2 << 20, 4 << 20]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_table(capsys):
    assert main(["compare", "fully-connected:n=4", "-c", "allgather", "--sizes", "1MiB,64MiB",
                 "--algorithms", "forestcoll,ring", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "forestcoll vs ring at 64MiB" in out and "exact bound 400.0 GB/s" in out


def test_generate_by_size(tmp_path, capsys):
    out_dir = tmp_path / "xml"
    assert main(["generate", "ring:n=4", "-c", "allgather", "--sizes", "1MiB..16MiB", "-o", str(out_dir)]) == 0
    text = capsys.readouterr().out
    files = sorted(out_dir.iterdir())
    assert files and "range      0.." in text
    bounds = []
    from forestcoll.msccl.ir import parse_algo
    from forestcoll.msccl.lint import lint

    for f in files:
        algo = parse_algo(f.read_text(), f.name)
        bounds.append((algo.min_bytes, algo.max_bytes))
        assert not [x for x in lint(algo, f.read_text()) if x.severity == "error"]
    # the ranges tile the sizes: start at 0, each starts right after the previous one, the last is open
    assert bounds[0][0] == 0 and bounds[-1][1] == 0
    assert all(b[0] == a[1] + 1 for a, b in zip(bounds, bounds[1:]))


def test_generate_by_size_loads_the_topology_once(tmp_path, capsys, monkeypatch):
    """generate --sizes builds the fabric once: its GPU sets the options and the selection runs on that same one."""
    import forestcoll.topology.builtins as builtins

    built = []
    real = builtins.build_builtin
    monkeypatch.setattr(builtins, "build_builtin", lambda *a, **kw: built.append(a[0]) or real(*a, **kw))
    assert main(["generate", "ring:n=4", "-c", "allgather", "--sizes", "1MiB", "-o", str(tmp_path / "xml")]) == 0
    assert built == ["ring"]

def test_generate_by_size_candidates(tmp_path, capsys):
    """--candidates reaches the selection (the sets themselves: tests/test_select.py)."""
    assert main(["generate", "ring:n=4", "-c", "allreduce", "--sizes", "1MiB", "--candidates", "all",
                 "-o", str(tmp_path / "all")]) == 0
    assert "candidates: forestcoll" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "ring", "--size", "1GiB"], "needs --topology"),
        (["simulate", "butterfly", "-t", "ring:n=4"], "nosuch"),
        (["simulate", "ring", "-t", "ring:n=4", "--size", "huge"], "bad size 'huge'"),
        (["simulate", "ring", "-t", "ring:n=4", "--latency", "link"], "--latency expects CLASS=MICROSECONDS"),
        (["simulate", "double-binary-tree", "-t", "ring:n=4", "-c", "allgather"], "no allgather form"),
        (["compare", "ring:n=4", "--sizes", "4MiB..1MiB"], "the end is below the start"),
        (["compare", "ring:n=4", "--algorithms", "butterfly"], "unknown algorithm 'butterfly'"),
        (["compare", "ring:n=4", "-o", "{tmp}/plot.gif"], "must be .png, .svg or .pdf"),
        (["generate", "ring:n=4", "--sizes", "1MiB..4MiB"], "--sizes needs -o DIRECTORY"),
        (["generate", "ring:n=4", "--candidates", "all"], "--candidates chooses what --sizes simulates"),
        (["generate", "ring:n=4", "--sizes", "1MiB", "--candidates", "few", "-o", "{tmp}/d"], "invalid choice"),
    ],
)
def test_bad_input(tmp_path, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code, _out, err = run(*args)
    assert code == 2, err
    assert err.count("\n") == 1
    if message != "nosuch":
        assert message in err, err
    assert not (tmp_path / "plot.gif").exists()
