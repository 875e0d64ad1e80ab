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
