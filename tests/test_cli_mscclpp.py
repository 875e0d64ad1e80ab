"""The MSCCL++ commands: export / generate --format mscclpp, generate --sizes --format mscclpp, mscclpp run / lint,
simulate PLAN; one-line errors, exit 2, no partial files."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import cli
from mscclpp_plans import allgather_put
from test_mscclpp_plan import REAL

from forestcoll.mscclpp.plan import read_plan
from forestcoll.mscclpp.semantics import OP_NAMES


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A dgx-a100:nodes=2 allreduce schedule (k=1) and its plan, made through the CLI once."""
    d = tmp_path_factory.mktemp("mscclpp")
    sched, plan = d / "ar.json", d / "ar.plan.json"
    assert cli("generate", "dgx-a100:nodes=2", "-c", "allreduce", "--k", "1", "-o", str(sched))[0] == 0
    code, out, err = cli("export", str(sched), "-o", str(plan))  # format from the extension
    assert code == 0, err
    return d, sched, plan, out


def one_line_error(code: int, out: str, err: str, text: str) -> None:
    assert code == 2 and err.count("\n") == 1 and err.startswith("forestcoll: error: ") and "Traceback" not in err
    assert text in err, err


def test_export_prints_the_figures_and_self_check(files):
    _d, _sched, plan_path, out = files
    assert "plan       forestcoll_allreduce_n16_k1: allreduce, 16 GPUs, 1 chunk(s) per shard, Simple, in-place" in out
    assert "layout     edge: 34 thread blocks per GPU (most)" in out and "the executor allows 64" in out
    assert "checked    one iteration: OK" in out and "checked    two iterations: OK" in out
    assert f"wrote      {plan_path}" in out
    data = json.loads(plan_path.read_text())
    assert {"name", "collective", "protocol", "inplace", "gpus"} <= set(data)
    assert data["collective"] == "allreduce" and data["protocol"] == "Simple" and data["inplace"] is True
    for g in data["gpus"]:
        assert {"id", "input_chunks", "output_chunks", "scratch_chunks", "threadblocks", "channels"} <= set(g)
        names = {o["name"] for t in g["threadblocks"] for o in t["ops"]}
        names |= {x["name"] for t in g["threadblocks"] for o in t["ops"] for x in o.get("ops", [])}
        assert names <= set(OP_NAMES)


def test_run_lint_simulate_a_plan(files):
    _d, sched, plan, _out = files
    code, out, err = cli("mscclpp", "run", str(plan))
    assert code == 0 and err == ""
    assert "result     OK: in-place allreduce of" in out and "2 back-to-back calls, no data race" in out
    code, out, _ = cli("mscclpp", "run", str(plan), "--mode", "out-of-place", "--size", "64KiB", "--dtype", "float16",
                       "--launches", "1", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["mode"] == "out-of-place" and data["size"] == 65536
    assert data["dtype"] == "float16" and data["launches"] == 1
    code, out, _ = cli("mscclpp", "lint", str(plan))
    assert code == 0 and out.strip() == f"{plan}: clean"
    assert json.loads(cli("mscclpp", "lint", str(plan), "--json", "--size", "1MiB")[1])["errors"] == 0
    code, out, _ = cli("simulate", str(plan), "-t", "dgx-a100:nodes=2", "--size", "16MiB", "--trees", str(sched))
    assert code == 0 and "algbw" in out and "the plan reaches" in out and "over CUDA IPC" in out
    data = json.loads(cli("simulate", str(plan), "-t", "dgx-a100:nodes=2", "--size", "1MiB", "--json")[1])
    assert data["ok"] and data["plan"]["collective"] == "allreduce" and data["plan"]["size_bytes"] == 1 << 20


def test_generate_format_mscclpp_options(tmp_path):
    plan = tmp_path / "ag.json"
    code, out, err = cli("generate", "ring:n=4", "-c", "allgather", "--k", "2", "--format", "mscclpp", "-o", str(plan), "--proto", "LL",
                         "--mode", "out-of-place", "--min-bytes", "4KiB", "--max-bytes", "256KiB", "--name", "ring_ag")
    assert code == 0, err
    p = read_plan(plan)
    assert (p.name, p.protocol, p.inplace) == ("ring_ag", "LL", False)
    assert (p.setting("min_message_size"), p.setting("max_message_size")) == (4096, 256 << 10)
    assert "checked    one iteration: OK: out-of-place allgather" in out
    code, out, _ = cli("generate", "ring:n=4", "--format", "mscclpp", "-o", str(plan), "--json", "--no-check",
                       "--design-size", "1MiB", "--layout", "level", "-c", "reduce_scatter")
    data = json.loads(out)
    assert code == 0 and data["layout"] == "level" and data["checks"] == [] and data["collective"] == "reducescatter"


def test_generate_falls_back_to_a_k_that_fits(tmp_path):
    plan = tmp_path / "p.json"
    code, out, err = cli("generate", "dgx-a100:nodes=2", "-c", "allgather", "--format", "mscclpp", "-o", str(plan),
                         "--max-threadblocks", "20", "--no-check")
    assert code == 0, err
    assert "note       the optimal k=13 does not fit: allgather k=13 needs" in out
    # k = 4, 2 and 1 fit and their plans simulate alike at 1 GiB (335.3 GB/s): the tie goes to the largest k
    assert "exported k=4, the fastest of the powers of two below it whose plans fit, plans simulated at 1GiB" in out
    # with --k the user's k is kept: refused with the limit and the way out
    code, out, err = cli("generate", "dgx-a100:nodes=2", "-c", "allgather", "--k", "13", "--format", "mscclpp", "-o",
                         str(tmp_path / "q.json"), "--max-threadblocks", "20")
    one_line_error(code, out, err, "more than the 20 a GPU runs at once (--max-threadblocks")
    assert "generate with a smaller k" in err and not (tmp_path / "q.json").exists()


def test_generate_fallback_picks_the_faster_fitting_k(tmp_path):
    # mi250 (one box) allreduce in 21 thread blocks: k=3 needs 22 even with its reduce-scatter and allgather blocks
    # sharing thread blocks (the 'shared' layout); k=2 and k=1 fit with it, and at 2 MiB k=1's plan simulates faster
    # (45.5 against 41.4 GB/s; 44.4 against 41.6 before leaves and sinks stopped taking blocks of their own): the
    # largest fitting power of two would be k=2.  (With 40 blocks, before the shared layout, k=3 did not fit; it
    # does now.)
    plan = tmp_path / "p.json"
    code, out, err = cli("generate", "mi250", "-c", "allreduce", "--format", "mscclpp", "-o", str(plan),
                         "--max-threadblocks", "21", "--design-size", "2MiB", "--no-check", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["chunks_per_root"] == 1 and data["layout"] == "shared", data
    note = next(n for n in data["notes"] if n.startswith("the optimal k=3 does not fit"))
    assert "needs 22 thread blocks per GPU even at the 'shared' layout" in note
    assert "exported k=1, the fastest of the powers of two below it whose plans fit, plans simulated at 2MiB" in note
    assert "(45.5 GB/s; k=2 41.4)" in note


def test_generate_fallback_is_ranked_by_the_plans_not_the_trees(tmp_path):
    # hypercube:dim=3 reduce-scatter in 8 thread blocks: the optimal k=3 does not fit; k=2 fits only in the 'level'
    # layout (a block per tree level serialises its trees) and k=1 in 'edge'.  At 16 MiB k=2's trees simulate faster
    # on the executor's routes (299.8 against 251.4 GB/s) but its plan slower (169.2 against 246.3): ranked by the
    # trees the fallback would be k=2; the plans rank k=1 first, and k=1 is written
    from forestcoll.generate import generate
    from forestcoll.mscclpp.export import ExportOptions, fitting_schedule
    from forestcoll.simulate.mscclpp import executor_rate
    from forestcoll.topology import load_topology

    plan = tmp_path / "p.json"
    code, out, err = cli("generate", "hypercube:dim=3", "-c", "reduce_scatter", "--format", "mscclpp", "-o", str(plan),
                         "--max-threadblocks", "8", "--design-size", "16MiB", "--json")
    assert code == 0, err
    data = json.loads(out)
    note = next(n for n in data["notes"] if n.startswith("the optimal k=3 does not fit"))
    assert data["chunks_per_root"] == 1, note
    assert "exported k=1, the fastest of the powers of two below it whose plans fit, plans simulated at 16MiB (246.3 GB/s; k=2 169.2)" in note
    assert read_plan(plan).gpus and data["checks"]
    topo = load_topology("hypercube:dim=3")  # the trees' ranking disagrees: that is what the test guards
    by_trees, how = fitting_schedule(topo, "reduce_scatter", generate(topo, "reduce_scatter"),
                                     ExportOptions(max_threadblocks=8, design_size=16 << 20), executor_rate(topo))
    assert by_trees.k == 2 and "trees simulated at 16MiB (299.8 GB/s" in how


def test_generate_fallback_exports_each_fitting_k_once(tmp_path, monkeypatch):
    """The fallback ranks the plans fitting_powers exported and writes the chosen one self-checked: one export per
    k tried (the optimal k=3, then k=2 and k=1), then k=1's in the other layouts (mixed, source, level: the layout
    race), and the file is the plan write_mscclpp writes for k=1 in the layout taken."""
    import forestcoll.mscclpp.export as export
    from forestcoll.generate import generate
    from forestcoll.mscclpp.plan import write_plan
    from forestcoll.simulate.mscclpp import plan_rate
    from forestcoll.topology import load_topology

    topo = load_topology("hypercube:dim=3")
    opts = export.ExportOptions(max_threadblocks=8, design_size=16 << 20)
    calls = []
    real = export.export_mscclpp
    monkeypatch.setattr(export, "export_mscclpp", lambda s, *a, **kw: calls.append(s.k) or real(s, *a, **kw))
    sched, result = export.write_generated_plan(topo, "reduce_scatter", str(tmp_path / "p.json"), options=opts,
                                                plan_rate=plan_rate(topo))
    assert sched.k == 1 and sorted(calls) == [1, 1, 1, 1, 2, 3] and result.checks
    assert "; layouts raced, plans at 16MiB: edge 246.3 (8 thread blocks per GPU), " in result.notes[0], result.notes
    laid = replace(opts, layout=result.layout)
    assert (tmp_path / "p.json").read_text() == write_plan(real(generate(topo, "reduce_scatter", k=1), topo, laid).plan)


def test_generate_by_size_writes_plans(tmp_path):
    out_dir = tmp_path / "plans"
    code, out, err = cli("generate", "ring:n=4", "-c", "allreduce", "--sizes", "16KiB..64MiB", "--format", "mscclpp",
                         "-o", str(out_dir))
    assert code == 0, err
    files = sorted(out_dir.glob("*.json"))
    assert files and "wrote" in out
    plans = [read_plan(f) for f in files]
    protos = [p.protocol for p in plans]
    assert protos[0] == "LL" and protos[-1] == "Simple"  # packets for small calls, Simple for large ones
    # the ranges follow each other without gaps, from 0 up
    bounds = sorted((p.setting("min_message_size"), p.setting("max_message_size")) for p in plans)
    assert bounds[0][0] == 0
    for (_lo, hi), (lo2, _hi2) in zip(bounds, bounds[1:]):
        assert lo2 == hi + 1
    for f in files:
        assert cli("mscclpp", "lint", str(f))[0] == 0


def test_files_in_the_wrong_place_are_one_line_errors(files, tmp_path):
    d, sched, plan, _out = files
    xml = tmp_path / "a.xml"
    assert cli("generate", "ring:n=4", "--format", "msccl", "-o", str(xml))[0] == 0
    cases = [
        (("export", str(plan), "-o", str(tmp_path / "x.json")), "is an MSCCL++ execution plan, not a schedule JSON"),
        (("export", str(xml), "-o", str(tmp_path / "x.json")), "is an MSCCL algorithm XML, not a schedule JSON"),
        (("mscclpp", "run", str(sched)), "a forestcoll schedule, not an MSCCL++ execution plan"),
        (("mscclpp", "lint", str(xml)), "is an MSCCL algorithm XML, not an MSCCL++ execution plan"),
        (("mscclpp", "run", str(tmp_path / "none.json")), "no such plan file"),
        (("simulate", str(plan)), "simulating an MSCCL++ plan needs --topology"),
        (("simulate", str(sched), "--trees", str(sched)), "--trees compares an MSCCL++ plan or an MSCCL file with its schedule"),
        (("simulate", str(plan), "-t", "ring:n=4"), "is for 16 GPUs but the topology has 4"),
        (("export", str(sched), "-o", str(tmp_path / "x.txt")), "cannot tell the format from"),
        (("export", str(sched), "-o", str(tmp_path / "x.json"), "--mode", "both"), "serves one buffer mode"),
        (("export", str(sched), "-o", str(tmp_path / "x.json"), "--proto", "LL128"), "MSCCL++ plans are Simple or LL"),
        (("export", str(sched), "-o", str(tmp_path / "x.json"), "--instances", "2"), "--instances applies to --format msccl"),
        (("export", str(sched), "-o", str(tmp_path / "x.xml"), "--layout", "edge"), "--layout edge applies to --format mscclpp"),
        (("export", str(sched), "-o", str(tmp_path / "x.json"), "--max-bytes", "8GiB"), "stay below 4 GiB"),
        (("export", str(sched), "-o", str(tmp_path / "x.json"), "--min-bytes", "lots"), "--min-bytes: bad size"),
        (("export", str(sched), "-o", str(tmp_path / "x.json"), "-t", "ring:n=4"), "is not the fabric this schedule was made for"),
        (("export", str(sched), "-o", str(tmp_path / "x.json"), "--max-threadblocks", "0"), "--max-threadblocks must be >= 1"),
        (("mscclpp", "run", str(plan), "--size", "1000"), "the executor refuses a call of 1000 bytes"),
        (("mscclpp", "run", str(plan), "--launches", "0"), "--launches must be >= 1"),
        (("mscclpp", "lint", str(plan), "--ranks-per-node", "0"), "--ranks-per-node must be >= 1"),
        (("generate", "ring:n=4", "--sizes", "1MiB..2MiB", "--format", "json", "-o", str(tmp_path / "d")), "--sizes writes"),
        (("generate", "ring:n=4", "--format", "mscclpp"), "--format mscclpp needs -o FILE.json"),
        (("generate", "ring:n=4", "-c", "reduce", "--format", "mscclpp", "--proto", "LL", "-o", str(tmp_path / "r.json")),
         "LL plans are made for allgather, reducescatter and allreduce"),
    ]
    for args, text in cases:
        one_line_error(*cli(*args), text)
    assert not list(tmp_path.glob("x.*")) and not (tmp_path / "r.json").exists()


def test_a_broken_plan_fails_run_with_a_verdict(tmp_path):
    d = allgather_put()
    for g in d["gpus"]:  # drop the waits: the peer's data may not be there yet
        for t in g["threadblocks"]:
            t["ops"] = [o for o in t["ops"] if o["name"] not in ("wait",)]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(d))
    code, out, err = cli("mscclpp", "run", str(path), "--verbose")
    one_line_error(code, out, err, f"{path}: ")
    assert err.removeprefix(f"forestcoll: error: {path}: ").split(":")[0] in ("RACE", "WRONG", "DEADLOCK")
    assert "result     " in out and ("race       " in out or "error      " in out or "stuck      " in out)
    code, out, err = cli("mscclpp", "lint", str(path))  # lint counts signals against waits
    one_line_error(code, out, err, "error(s)")


@pytest.mark.skipif(not REAL, reason="../shared/data/mscclpp-plans not available")
def test_real_plans_through_the_cli():
    bad_lint = {"execution-files_allreduce_pipeline.json"}  # pre-#579 format: the executor at 1f5f065 refuses it
    racy = {"execution-plans_reduce_tbg.json"}  # a genuine race (docs/mscclpp.md)
    for path in REAL:
        code, _out, err = cli("mscclpp", "lint", str(path))
        assert code == (2 if path.name in bad_lint else 0), (path.name, err)
        code, out, err = cli("mscclpp", "run", str(path))
        assert code == (2 if path.name in racy else 0), (path.name, err)
        if path.name in racy:
            assert "RACE" in err
