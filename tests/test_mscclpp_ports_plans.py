"""Per-size MSCCL++ plans (``generate --sizes --format mscclpp``) and all-to-all plans packed on the ports the
executor drives (one per GPU), on a fabric whose NICs have two ports each."""

from __future__ import annotations

import json

from conftest import cli
from test_mscclpp_ports import dual_port

from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.alltoall.mscclpp import port_notes
from forestcoll.mscclpp.export import ExportOptions
from forestcoll.mscclpp.plan import read_plan
from forestcoll.mscclpp.ports import driven_ports, idle_port_note
from forestcoll.simulate import build_network
from forestcoll.simulate.mscclpp import simulate_plan
from forestcoll.simulate.select import export_by_size
from forestcoll.topology.jsonio import write_topology


def test_per_size_plans_are_packed_on_the_driven_ports(tmp_path):
    """Whole-fabric trees count on the idle ports (allgather bound 53.3 there, 40 on the driven ports): every
    range's trees must stay on the driven ports and its plan reach what the executor can drive."""
    topo = dual_port()
    out = export_by_size(topo, "allgather", [1 << 20, 1 << 30], str(tmp_path), format="mscclpp",
                         options=ExportOptions(max_threadblocks=64), workers=1)
    assert out.ok
    assert any("drives one network port per GPU" in n and "allgather bound 40.0 GB/s there, 75.0% of the fabric's 53.3"
               in n for n in out.notes)
    net = build_network(topo)
    for r in out.ranges:
        assert idle_port_note(r.range.schedule, topo) is None
        assert r.range.schedule.bound_algbw == 40
    last = out.ranges[-1]
    assert simulate_plan(net, read_plan(last.path), 1 << 30).algbw_gbps >= 0.95 * 40


def test_generate_sizes_on_a_dual_port_fabric(tmp_path):
    """The command line: the per-size plans say the ports are dropped and give both bounds."""
    path = str(tmp_path / "dual.json")
    write_topology(dual_port(), path)
    code, out, err = cli("generate", path, "-c", "allgather", "--sizes", "1MiB,1GiB", "--format", "mscclpp",
                         "--max-threadblocks", "64", "--no-check", "-o", str(tmp_path / "sizes"))
    assert code == 0, err
    assert "drives one network port per GPU" in out and "4 of the 8 ports" in out and "not drive" not in out


def test_generate_alltoall_on_a_dual_port_fabric(tmp_path):
    """The command line: the all-to-all plan's flows stay on the driven ports, and it says so with both bounds."""
    path = str(tmp_path / "dual.json")
    write_topology(dual_port(), path)
    plan = tmp_path / "a2a.json"
    code, out, err = cli("generate", path, "-c", "alltoall", "--format", "mscclpp", "--no-check", "-o", str(plan))
    assert code == 0, err
    assert "drives one network port per GPU" in out and "the flows are routed on the ports it drives" in out
    assert "not drive" not in out and json.loads(plan.read_text())["collective"] == "alltoall"


def test_alltoall_port_notes():
    """Flows routed on the whole fabric cross on idle ports (said); on the driven ports both bounds are given; a
    fabric with single-port NICs gets no note."""
    topo = dual_port()
    whole = generate_alltoall(topo, chunks="auto").schedule
    assert any("flow(s) cross boxes on network ports the executor does not drive" in n for n in port_notes(whole, topo))
    driven = generate_alltoall(driven_ports(topo), chunks="auto").schedule
    notes = port_notes(driven, topo)
    assert len(notes) == 1 and "alltoall bound" in notes[0] and "of the fabric's" in notes[0]
    single = dual_port(ports=1)
    assert port_notes(generate_alltoall(single, chunks="auto").schedule, single) == []


def test_an_ll_plan_that_cannot_be_written_gives_way_to_the_simple_plan(tmp_path, monkeypatch):
    """(The H100 dump's 1 MiB LL plans fail their self-check: that range got no plan.)"""
    import forestcoll.mscclpp.export as export
    from forestcoll.mscclpp.recut import Cuts

    real = Cuts.checked  # the self-check export_plans_by_size runs on each plan it writes

    def no_ll(result, options):
        if options.protocol == "LL":
            raise export.ExportError("the exported plan fails its self-check (stand-in)")
        return real(result, options)

    topo = dual_port(ports=1)
    kept = export_by_size(topo, "allgather", [64 << 10, 1 << 30], str(tmp_path / "a"), format="mscclpp",
                          options=ExportOptions(max_threadblocks=64, check=False), workers=1)
    assert kept.ranges[0].result.plan.protocol == "LL" and "-LL-" in kept.ranges[0].path
    monkeypatch.setattr(Cuts, "checked", staticmethod(no_ll))
    out = export_by_size(topo, "allgather", [64 << 10, 1 << 30], str(tmp_path / "b"), format="mscclpp",
                         options=ExportOptions(max_threadblocks=64, check=False), workers=1)
    first = out.ranges[0]
    assert out.ok and first.result.plan.protocol == "Simple" and "-Simple-" in first.path
    assert first.range.max_bytes == kept.ranges[0].range.max_bytes and first.result.plan.name.endswith("_simple")
    assert any("the LL plan was not written: the exported plan fails its self-check" in n for n in first.result.notes)
