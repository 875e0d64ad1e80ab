"""The command line for all-to-all, end to end: bound, generate, verify, export, simulate, compare; bad input."""

from __future__ import annotations

import json

import pytest
from conftest import cli

from forestcoll.msccl.ir import read_algo

TOPO = "dgx-a100:nodes=2"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("a2a")
    path = folder / "s.json"
    code, out, err = cli("generate", TOPO, "-c", "alltoall", "-o", path)
    assert code == 0, err
    return folder, path, out


def test_bound_text_and_json():
    code, out, _ = cli("bound", TOPO, "--collective", "all-to-all")
    assert code == 0
    assert "optimal algbw   50 GB/s" in out and "certified" in out and "bottleneck      cut {box n0}" in out
    code, out, _ = cli("bound", TOPO, "-c", "alltoall", "--json")
    data = json.loads(out)
    assert code == 0 and data["collective"] == "alltoall" and data["algbw_gbps"] == "50" and data["certified"]
    assert data["busbw_gbps"] == "375/8" and data["compute_nodes"] == 16
    again = json.loads(cli("bound", TOPO, "-c", "alltoall", "--json")[1])
    assert again == data  # deterministic: no timings in the JSON


def test_generate_verify_export_simulate(made):
    folder, path, out = made
    assert "k          1 chunks per pair" in out and "100% of the bound" in out and f"wrote      {path}" in out
    data = json.loads(path.read_text())
    assert data["collective"] == "alltoall" and data["optimal"] and len(data["flows"]) >= 16 * 15
    code, out, _ = cli("verify", path)
    assert code == 0 and "= the certified optimum" in out
    code, out, _ = cli("verify", path, "--json")
    assert code == 0 and json.loads(out)["ok"] and json.loads(out)["algbw_gbps"] == "50"
    xml = folder / "a.xml"
    code, out, err = cli("export", path, "--format", "msccl", "-o", xml)
    assert code == 0, err
    assert "alltoall, 16 gpus" in out and "checked    out-of-place: OK" in out and "rccl: fits" in out
    algo, _ = read_algo(str(xml))
    assert algo.coll == "alltoall" and algo.outofplace and not algo.inplace
    code, out, _ = cli("simulate", path, "--json")
    sim = json.loads(out)
    assert code == 0 and sim["collective"] == "alltoall" and 49 < sim["algbw_gbps"] <= 50
    code, out, _ = cli("simulate", xml, "-t", TOPO, "--size", "64MiB")
    assert code == 0 and "alltoall on dgx-a100:nodes=2" in out


def test_generate_msccl_directly_and_for_rccl(tmp_path):
    xml = tmp_path / "b.xml"
    code, out, err = cli("generate", TOPO, "-c", "alltoall", "--format", "msccl", "--runtime", "rccl", "-o", xml)
    assert code == 0, err
    assert "certified" in out and xml.exists()
    code, out, _ = cli("generate", "ring:n=4", "-c", "alltoall", "--k", "3", "--json")  # opposite ranks: 2/3 + 1/3
    data = json.loads(out)
    assert code == 0 and data["k"] == 3 and not data["optimal"] and data["bound_algbw_gbps"] is not None


@pytest.mark.parametrize("baseline", ["direct", "hierarchical"])
def test_simulate_baselines(baseline):
    code, out, _ = cli("simulate", baseline, "-t", TOPO, "-c", "alltoall", "--size", "16MiB", "--json")
    res = json.loads(out)
    assert code == 0 and res["algorithm"] == baseline and res["collective"] == "alltoall" and res["algbw_gbps"] > 0


def test_compare_keeps_the_json_contract():
    code, out, err = cli("compare", TOPO, "-c", "alltoall", "--sizes", "1MiB,16MiB", "--jobs", "1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["collective"] == "alltoall" and data["bound_algbw_gbps"] == 50.0
    algos = [r["algorithm"] for r in data["rows"]]
    assert list(dict.fromkeys(algos)) == ["forestcoll", "direct", "hierarchical"]
    assert all({"algorithm", "size_bytes", "algbw_gbps"} <= set(r) for r in data["rows"])
    code, out, _ = cli("compare", TOPO, "-c", "alltoall", "--sizes", "1GiB", "--jobs", "1")
    assert code == 0 and "forestcoll vs direct at 1GiB" in out and "forestcoll vs hierarchical" in out


@pytest.mark.parametrize(("args", "msg"), [
    (("bound", TOPO, "-c", "alltoall", "--root", "n0.gpu0"), "--root does not apply to alltoall"),
    (("bound", TOPO, "-c", "alltoall", "--k", "2"), "--k does not apply to alltoall"),
    (("generate", TOPO, "-c", "alltoall", "--k", "0"), "--k must be >= 1"),
    (("generate", TOPO, "-c", "alltoall", "--sizes", "1MiB..4MiB", "-o", "x"), "--sizes chooses among tree schedules"),
    (("generate", TOPO, "-c", "alltoall", "--format", "msccl"), "--format msccl needs -o"),
    (("simulate", "ring", "-t", TOPO, "-c", "alltoall"), "ring has no alltoall form on this fabric; choose direct"),
    (("simulate", "hierarchical", "-t", "ring:n=4", "-c", "alltoall"), "hierarchical has no alltoall form"),
    (("bound", "ring:n=4,bw=0", "-c", "alltoall"), "must be > 0"),
    (("bound", TOPO, "-c", "alltoallv"), "unknown collective"),
])
def test_bad_input_is_one_line_and_exit_2(args, msg):
    code, out, err = cli(*args)
    assert code == 2 and msg in err and err.count("\n") == 1 and "Traceback" not in err


def test_bad_schedule_files(tmp_path, made):
    _folder, path, _ = made
    data = json.loads(path.read_text())
    data["flows"] = data["flows"][1:]  # a pair loses its path
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    code, out, err = cli("verify", broken)
    assert code == 2 and "fractions sum to 0, not 1" in err and "INVALID" in out
    code, _, err = cli("export", broken, "-o", tmp_path / "x.xml")
    assert code == 2 and "not 1" in err and not (tmp_path / "x.xml").exists()
    data["flows"] = [{"src": "n0.gpu0"}]
    broken.write_text(json.dumps(data))
    code, _, err = cli("simulate", broken)
    assert code == 2 and "missing 'path'" in err and err.count("\n") == 1
