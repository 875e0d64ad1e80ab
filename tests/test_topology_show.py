import json
from fractions import Fraction

import pytest

from forestcoll import load_topology
from forestcoll.errors import UsageError
from forestcoll.topology.draw import draw, layout
from forestcoll.topology.show import summarize


def test_summary_numbers():
    s = summarize(load_topology("dgx-a100:nodes=2"))
    assert (s.compute, s.switches, s.boxes) == (16, 20, 2)
    assert s.rank_in == (325, 325) and s.rank_out == (325, 325)
    classes = {c.name: c for c in s.classes}
    assert classes["nvlink"].count == 32 and classes["nvlink"].total == 32 * 300
    assert classes["net"].bandwidths == (Fraction(25),)


def test_summary_of_a_heterogeneous_cluster():
    s = summarize(load_topology("hetero:dgx-a100=1,dgx-h100=1"))
    assert s.rank_in == (325, 500)


def test_layout_puts_ranks_at_the_bottom():
    topo = load_topology("dgx-a100:nodes=2")
    pos = layout(topo)
    assert all(pos[name][1] == 0 for name in topo.compute_nodes)
    assert pos["ib0"][1] > pos["n0.nvswitch"][1] > pos["n0.gpu0"][1]
    assert pos["n1.gpu0"][0] > pos["n0.gpu7"][0] + 1  # boxes are set apart


def test_draw_refuses_unknown_formats_without_writing(tmp_path):
    with pytest.raises(UsageError, match="unknown picture format"):
        draw(load_topology("ring:n=4"), str(tmp_path / "x.bmp"))
    assert list(tmp_path.iterdir()) == []


def test_draw_pdf(tmp_path):
    path = tmp_path / "x.pdf"
    draw(load_topology("switch:n=4"), str(path), cut=("h0",))
    assert path.read_bytes()[:4] == b"%PDF"


def test_summary_says_the_gpu_when_the_fabric_records_one(capsys):
    """topo show prints the GPU (name, vendor, SMs / CUs) and its JSON holds it; a fabric without one says nothing."""
    from forestcoll.cli import main

    assert summarize(load_topology("mi300x")).gpu.describe() == "MI300X (amd gfx942, 304 CUs)"
    assert main(["topo", "show", "dgx-a100:nodes=2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "gpu          A100 (nvidia sm80, 108 SMs)"
    assert main(["topo", "show", "mi250", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gpu"] == {"name": "MI250 GCD", "vendor": "amd", "units": 104, "arch": "gfx90a"}
    assert main(["topo", "show", "ring:n=4"]) == 0
    assert "gpu " not in capsys.readouterr().out
    assert main(["topo", "show", "ring:n=4", "--json"]) == 0
    assert "gpu" not in json.loads(capsys.readouterr().out)
