"""--bond-nic-ports: each NIC's ports of an NCCL/RCCL dump as one port of their summed bandwidth, and what that
gives MSCCL++ plans (the executor drives one network device per GPU)."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from conftest import cli, shared_file

from forestcoll.bound.optimal import optimal_bound
from forestcoll.errors import TopologyError
from forestcoll.mscclpp.export import ExportOptions, write_generated_plan
from forestcoll.mscclpp.ports import executor_ports
from forestcoll.simulate import build_network
from forestcoll.simulate.mscclpp import plan_rate, simulate_plan
from forestcoll.topology import import_topology, load_topology
from forestcoll.topology.nccl_xml import import_nccl_xml


def _box(gpu: int, nvlink_to: str, nics: str) -> str:
    return f"""    <pci busid="0000:{gpu}1:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:{gpu}2:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="{gpu}" sm="80" rank="{gpu}" gdr="1">
          <nvlink target="{nvlink_to}" count="12" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:{gpu}3:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16">
        <nic>
{nics}        </nic>
      </pci>
    </pci>
"""


def _net(name: str, dev: int, port: int, guid: str) -> str:
    return f'          <net name="{name}" dev="{dev}" speed="80000" port="{port}" guid="{guid}" gdr="1"/>\n'


def dump(ports: int = 2) -> str:
    """Two A100 joined by 12 NVLinks (240 GB/s), each behind its own PCIe switch with one NIC of ``ports`` ports of
    10 GB/s (80,000 Mb/s); a dual-port card lists its ports in one <nic>, as NCCL writes them."""
    nics = ["".join(_net(f"mlx5_{2 * g + p}", 2 * g + p, p + 1, f"0x{g + 1}a") for p in range(ports)) for g in range(2)]
    return ('<system version="1">\n  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">\n'
            + _box(0, "0000:12:00.0", nics[0]) + _box(1, "0000:02:00.0", nics[1]) + "  </cpu>\n</system>\n")


@pytest.fixture
def dual(tmp_path) -> str:
    path = tmp_path / "dual.xml"
    path.write_text(dump())
    return str(path)


@pytest.fixture
def single(tmp_path) -> str:
    path = tmp_path / "single.xml"
    path.write_text(dump(ports=1))
    return str(path)


def test_each_nics_ports_become_one_port_of_their_sum(dual):
    plain = import_nccl_xml(dual)
    assert [(p.node, p.bandwidth, p.name) for p in plain.ports] == [
        ("nic0", 10, "mlx5_0"), ("nic0", 10, "mlx5_1"), ("nic1", 10, "mlx5_2"), ("nic1", 10, "mlx5_3")]
    assert plain.notes == ()
    bonded = import_nccl_xml(dual, bond_ports=True)
    assert [(p.node, p.bandwidth, p.name) for p in bonded.ports] == [("nic0", 20, "mlx5_0+mlx5_1"),
                                                                    ("nic1", 20, "mlx5_2+mlx5_3")]
    assert bonded.topology == plain.topology  # inside the box nothing changes
    assert bonded.notes == (f"{dual}: --bond-nic-ports: each NIC's ports bonded into one port of their summed "
                            "bandwidth: 4 -> 2 network ports per box",)


def test_bonded_rail_fabric_has_one_rail_per_nic_and_the_same_bound(dual):
    plain = load_topology(dual, {"nodes": "2", "fabric": "rail"})
    bonded = load_topology(dual, {"nodes": "2", "fabric": "rail", "bond_nic_ports": "1"})
    assert bonded.name == "dual.xml:nodes=2,fabric=rail,bond_nic_ports=1"
    assert sorted(n for n in bonded.switch_nodes if n.startswith("rail")) == ["rail0", "rail1"]
    assert bonded.capacity[("n0.nic0", "rail0")] == 20 and plain.capacity[("n0.nic0", "rail0")] == 10
    for c in ("allgather", "allreduce"):
        assert optimal_bound(bonded, c).algbw == optimal_bound(plain, c).algbw
    assert optimal_bound(bonded, "allgather").algbw == 80
    # the executor drives each GPU's one device: every bonded port, half of the plain ports
    assert executor_ports(bonded).dropped == 0 and executor_ports(bonded).topology is bonded
    assert optimal_bound(executor_ports(plain).topology, "allgather").algbw == 40


def test_generated_mscclpp_plan_reaches_the_fabric_bound_when_ports_are_bonded(dual, tmp_path):
    """Plain: the plan is packed on the ports the executor drives, half the fabric's bound (80); bonded: the
    executor's device carries both ports and the plan reaches 0.95 of 80 (the H100 dump x4 rail: 0.55 -> 0.97)."""
    opts = ExportOptions(max_threadblocks=64)
    rates = {}
    for bond in ("0", "1"):
        topo = load_topology(dual, {"nodes": "2", "fabric": "rail", "bond_nic_ports": bond})
        sched, result = write_generated_plan(topo, "allgather", str(tmp_path / f"p{bond}.json"), options=opts,
                                             plan_rate=plan_rate(topo))
        rates[bond] = (sched.bound_algbw, simulate_plan(build_network(topo), result.plan, 1 << 30).algbw_gbps)
        assert result.checks
    assert rates["0"][0] == 40 and rates["0"][1] <= 40
    assert rates["1"][0] == 80 and rates["1"][1] >= 0.95 * 80


def test_single_port_nics_change_nothing_and_a_note_says_so(single):
    plain, bonded = import_nccl_xml(single), import_nccl_xml(single, bond_ports=True)
    assert bonded.ports == plain.ports and bonded.topology == plain.topology
    assert bonded.notes == (f"{single}: --bond-nic-ports changes nothing: every NIC has one network port (2 per box)",)
    code, out, err = cli("topo", "import", single, "--bond-nic-ports")
    assert code == 0 and "forestcoll: note: " in err and "changes nothing" in err
    assert "network      2 port(s) on 2 NIC(s) per box, 10 GB/s each" in out


def test_cli_flag_reaches_generate_and_the_schedule_records_it(dual, tmp_path):
    out = tmp_path / "s.json"
    code, stdout, err = cli("generate", dual, "--nodes", "2", "--fabric", "rail", "-c", "allgather",
                            "--bond-nic-ports", "-o", str(out))
    assert code == 0, err
    assert "bonded" in err and err.count("\n") == 1
    assert json.loads(out.read_text())["topology"]["spec"].endswith("dual.xml:nodes=2,fabric=rail,bond_nic_ports=1")
    code, stdout, err = cli("verify", str(out))  # the record reloads the bonded fabric
    assert code == 0, err
    code, stdout, _ = cli("bound", dual, "--nodes", "2", "--fabric", "rail", "--bond-nic-ports")
    assert code == 0 and "bond_nic_ports=1" in stdout


@pytest.mark.parametrize("args, message", [
    (("bound", "dgx-a100:nodes=2", "--bond-nic-ports"), "--bond-nic-ports applies to NCCL/RCCL topology dumps (.xml); "
                                                         "dgx-a100:nodes=2 is not one"),
    (("bound", "{dual}:bond_nic_ports=yes"), "bond_nic_ports must be 0 or 1, got 'yes'"),
    (("bound", "{dual}:bond_nic_ports=1", "--nodes", "2"), None),
    (("bound", "{dual}:bond_nic_ports=0", "--bond-nic-ports"), "bond_nic_ports is given both in the spec (0) and as "
                                                                 "--bond-nic-ports (1)"),
])
def test_bad_input_is_one_line(dual, args, message):
    args = tuple(a.replace("{dual}", dual) for a in args)
    code, _out, err = cli(*args)
    if message is None:
        assert code == 0
        return
    assert code == 2 and err.count("\n") == 1 and message in err, err


def test_refused_for_files_that_are_not_dumps_and_no_partial_output(dual, tmp_path):
    js = tmp_path / "box.json"
    code, _out, err = cli("topo", "import", dual, "-o", str(js))
    assert code == 0, err
    with pytest.raises(TopologyError, match=r"applies to NCCL/RCCL topology dumps \(\.xml\) only"):
        import_topology(str(js), {"bond_nic_ports": "1"})
    out = tmp_path / "p.json"
    code, _out, err = cli("generate", str(js), "--bond-nic-ports", "-o", str(out))
    assert code == 2 and err.count("\n") == 1 and not out.exists()


def test_h100_dump_bonded_leaves_no_port_idle():
    path = str(shared_file("data", "nccl-topo", "H100-topology.xml"))
    box = import_nccl_xml(path, bond_ports=True)
    assert len(box.ports) == 8 and {p.bandwidth for p in box.ports} == {Fraction(45)}
    assert box.ports[0].name == "mlx5_0+mlx5_1"
    topo = load_topology(path, {"nodes": "4", "fabric": "rail", "bond_nic_ports": "1"})
    assert executor_ports(topo).dropped == 0
    assert optimal_bound(topo, "allgather").algbw == Fraction(67008, 155)  # the fabric's bound, as without bonding


def test_a_fabric_without_boxes_to_join_is_noted(dual):
    """--fabric with one box joins nothing: the same bound, and a note says so; with --nodes 2 no such note."""
    one = import_topology(dual, {"fabric": "rail"})
    assert one.notes == (f"{dual}: one box (nodes=1): the fabric 'rail' joins boxes and changes nothing here "
                         "(--nodes N for N boxes)",)
    assert optimal_bound(one.topology, "allgather") == optimal_bound(import_topology(dual).topology, "allgather")
    assert import_topology(dual, {"fabric": "rail", "nodes": "2"}).notes == ()
