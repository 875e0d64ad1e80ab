"""The command line: real output, one-line errors with exit 2, no partial files."""

import json
import os
import subprocess
import sys

import pytest
from conftest import cli

from forestcoll.cli import main

run = cli  # in-process; test_real_processes below starts real ones


def real(*args):
    proc = subprocess.run([sys.executable, "-m", "forestcoll", *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.slow
def test_real_processes(tmp_path):
    """What a shell sees: exit statuses, one-line errors without a traceback, output on stdout."""
    code, out, err = real("bound", "ring:n=4", "--json")
    assert code == 0 and json.loads(out)["compute_nodes"] == 4 and err == ""
    code, out, err = real("bound", "nosuch")
    assert code == 2 and out == "" and err.count("\n") == 1 and "unknown topology 'nosuch'" in err
    code, _out, err = real("frobnicate")
    assert code == 2 and "invalid choice" in err and "Traceback" not in err
    code, out, _err = real("--version")
    assert code == 0 and out.startswith("forestcoll ")
    sched = tmp_path / "s.json"
    code, _out, err = real("generate", "mi250:nodes=2", "--max-k", "2", "-o", str(sched))
    assert code == 2 and "more than 2 trees" in err and not sched.exists()


def test_bound_json():
    code, out, err = run("bound", "dgx-a100:nodes=2", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["compute_nodes"] == 16
    assert data["allgather_algbw_gbps"] == "1040/3"
    assert data["allreduce_algbw_gbps"] == "520/3"
    assert len(data["bottleneck_cut"]) == 35 and data["bottleneck_cut_ranks"] == 15


def test_bound_text_and_fixed_k(capsys):
    assert main(["bound", "mi250:nodes=2", "-c", "allgather", "--k", "1"]) == 0
    out = capsys.readouterr().out
    assert "5312/15 GB/s" in out and "with k=1" in out and "320 GB/s" in out


def test_generate_verify_export(tmp_path, capsys):
    sched = tmp_path / "sched.json"
    assert main(["generate", "mi250:nodes=2", "--collective", "allreduce", "-o", str(sched)]) == 0
    assert json.loads(sched.read_text())["collective"] == "allreduce"
    assert main(["verify", str(sched), "--topology", "mi250:nodes=2"]) == 0
    assert "OK, optimal" in capsys.readouterr().out
    topo = tmp_path / "fabric.json"
    assert main(["topo", "export", "dgx-a100:nodes=2", "--json", "-o", str(topo)]) == 0
    data = json.loads(topo.read_text())
    assert {"nodes", "links"} <= set(data)
    assert main(["generate", str(topo), "--collective", "allgather", "--k", "1", "-o", str(sched)]) == 0
    assert main(["verify", str(sched), "--json"]) == 1 - 1  # topology taken from the schedule's name
    capsys.readouterr()
    assert main(["verify", str(sched), "-t", str(topo), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["algbw_gbps"] == "2400/7"


@pytest.mark.parametrize(
    "args, message",
    [
        (["bound", "nosuch"], "unknown topology 'nosuch'"),
        (["bound", "ring:n=0"], "must be >= 2"),
        (["bound", "ring:bw=0"], "must be > 0"),
        (["bound", "ring:n=4", "--collective", "gather"], "unknown collective"),
        (["bound", "ring:n=4", "--collective", "broadcast", "--root", "zz"], "unknown root"),
        (["generate", "ring:n=4", "--k", "0"], "--k must be >= 1"),
        (["generate", "ring:n=4", "--k", "x"], "invalid int value"),
        (["frobnicate"], "invalid choice"),
        (["bound"], "required"),
        (["verify", "absent.json"], "no such schedule file"),
        (["bound", "absent.json"], "no such topology file"),
        (["bound", "absent.xml"], "no such topology file"),
        (["bound", "dgx-a100", "--nodes", "0"], "--nodes must be >= 1"),
        (["bound", "dgx-a100", "--fabric", "torus"], "invalid choice"),
        (["bound", "dgx-a100:nodes=2", "--nodes", "3"], "given both"),
        (["bound", "dgx-h100:fabric=leaf-spine,oversub=0"], "must be > 0"),
        (["bound", "ring:n=4", "--nodes", "2"], "unknown option 'nodes'"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    code, out, err = run(*args)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_malformed_topology_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}], "links": [{"src": "a", "dst": "b", "bandwidth": 0}]}')
    code, _, err = run("bound", str(bad))
    assert code == 2 and "must be > 0" in err and err.count("\n") == 1


def test_no_partial_output_on_error(tmp_path):
    out = tmp_path / "sched.json"
    code, _, err = run("generate", "mi250:nodes=2", "--max-k", "2", "-o", str(out))
    assert code == 2 and "more than 2 trees" in err
    assert not out.exists() and os.listdir(tmp_path) == []
    code, _, _ = run("generate", "ring:n=4", "-o", str(tmp_path / "no" / "dir" / "s.json"))
    assert code == 2


def test_invalid_schedule_fails_verify(tmp_path):
    sched = tmp_path / "s.json"
    assert main(["generate", "ring:n=4", "-o", str(sched)]) == 0
    data = json.loads(sched.read_text())
    data["trees"][0]["chunks"] += 1
    sched.write_text(json.dumps(data))
    code, out, err = run("verify", str(sched))
    assert code == 2 and "INVALID" in out and err.count("\n") == 1


def test_topo_list(capsys):
    assert main(["topo", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("dgx-a100", "dgx-h100", "dgx-b200", "hgx-h100", "mi250", "mi300x", "dgx-1", "ndv2", "hetero", "torus", "hypercube"):
        assert f"\n{name} " in "\n" + out
    assert main(["topo", "list", "--options"]) == 0
    assert "nodes=1" in capsys.readouterr().out


def test_topo_show_and_import(capsys, tmp_path):
    assert main(["topo", "show", "dgx-a100:nodes=2"]) == 0
    out = capsys.readouterr().out
    assert "16 compute (ranks), 20 switch, 2 boxes" in out and "in 325 GB/s, out 325 GB/s" in out
    assert main(["topo", "show", "dgx-h100", "--nodes", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["compute_nodes"] == 16 and data["rank_in_gbps"] == ["500", "500"]
    xml = tmp_path / "t.xml"
    xml.write_text(MINIMAL_XML)
    out_json = tmp_path / "t.json"
    assert main(["topo", "import", str(xml), "-o", str(out_json)]) == 0
    assert "2 compute (ranks)" in capsys.readouterr().out
    assert json.loads(out_json.read_text())["nodes"][0] == {"name": "n0.gpu0", "kind": "compute", "box": "n0"}
    assert main(["bound", str(xml), "--nodes", "4", "--fabric", "rail", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compute_nodes"] == 8


def test_topo_draw(tmp_path, capsys):
    png = tmp_path / "f.png"
    assert main(["topo", "draw", "dgx-a100:nodes=2", "--cut", "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "f.svg"
    assert main(["topo", "draw", "torus:dims=3x3", "-o", str(svg)]) == 0
    assert "<svg" in svg.read_text()
    code, _, err = run("topo", "draw", "ring:n=4", "-o", str(tmp_path / "f.gif"))
    assert code == 2 and "unknown picture format" in err and not (tmp_path / "f.gif").exists()


MINIMAL_XML = """<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:02:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="0" sm="80" rank="0"><nvlink target="0000:03:00.0" count="12" tclass="0x030200"/></gpu>
    </pci>
    <pci busid="0000:03:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="1" sm="80" rank="1"><nvlink target="0000:02:00.0" count="12" tclass="0x030200"/></gpu>
    </pci>
    <nic><net name="eth0" dev="0" speed="100000" port="0" guid="0x0"/></nic>
  </cpu>
</system>
"""
