"""NCCL / RCCL topology dumps: every real file imports; facts read off each file by hand; bad files fail cleanly."""

import re
from fractions import Fraction

import pytest
from conftest import SHARED, cli, shared_file
from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll import load_topology, optimal_bound
from forestcoll.errors import ForestCollError, TopologyError
from forestcoll.topology.nccl_xml import import_nccl_xml

DATA = SHARED / "data" / "nccl-topo"

# Read off the files by hand: GPUs; GPU 0's total GPU-to-GPU (NVLink/xGMI) bandwidth out (or to the
# NVSwitch); number of NIC ports and their speed (Mb/s / 8000); number of NIC cards.
FACTS = {
    "H100-topology.xml": dict(gpus=8, gpu0_links=Fraction(18) * Fraction("20.6"), ports=16, port_bw=Fraction(180000, 8000), cards=8),
    "nccl-tests_topo.xml": dict(gpus=8, gpu0_links=0, ports=1, port_bw=Fraction(56000, 8000), cards=1),
    "nccl_miner_nccl_topo.xml": dict(gpus=2, gpu0_links=4 * 12, ports=1, port_bw=Fraction(10000, 8000), cards=1),
    "ncv4-topo.xml": dict(gpus=4, gpu0_links=0, ports=1, port_bw=Fraction(100000, 8000), cards=1),
    "topo_16p1h.xml": dict(gpus=16, gpu0_links=(4 + 1 + 2) * 36, ports=8, port_bw=25, cards=8),
    "topo_16p_gio-1s-1rp-cascade.xml": dict(gpus=16, gpu0_links=7 * 48, ports=1, port_bw=Fraction(1000, 8000), cards=1),
    "topo_4p2h.xml": dict(gpus=8, gpu0_links=2 * 24, ports=1, port_bw=Fraction(100000, 8000), cards=1),
    "topo_8p6l.xml": dict(gpus=8, gpu0_links=6 * 24, ports=1, port_bw=25, cards=1),
    "topo_8p_940.xml": dict(gpus=8, gpu0_links=7 * 48, ports=8, port_bw=50, cards=8),
    "topo_8p_rome.xml": dict(gpus=8, gpu0_links=2 * 24, ports=1, port_bw=25, cards=1),
    "topo_collnet_n4.xml": dict(gpus=8, gpu0_links=3 * 24, ports=4, port_bw=25, cards=4),
}
SKELETONS = ("p4d-24xl-topo.xml", "ndv4-topo.xml")


def gpu_link_bandwidth(topo, gpu):
    return sum((bw for (a, b), bw in topo.capacity.items()
                if a == gpu and (b == "nvswitch" or topo.kind(b) == "compute")), Fraction(0))


@pytest.mark.parametrize("name", sorted(FACTS))
def test_real_dump_imports_with_the_facts(name):
    box = import_nccl_xml(str(shared_file("data", "nccl-topo", name)))
    topo, facts = box.topology, FACTS[name]
    assert topo.num_compute == facts["gpus"]
    assert topo.compute_nodes == tuple(f"gpu{i}" for i in range(facts["gpus"]))
    assert gpu_link_bandwidth(topo, "gpu0") == facts["gpu0_links"]
    assert len(box.ports) == facts["ports"]
    assert {p.bandwidth for p in box.ports} == {Fraction(facts["port_bw"])}
    assert len({p.node for p in box.ports}) == facts["cards"]


def test_every_file_in_the_folder_is_covered():
    shared_file("data", "nccl-topo")
    assert {p.name for p in DATA.glob("*.xml")} == set(FACTS) | set(SKELETONS)


@pytest.mark.parametrize("name", sorted(FACTS))
def test_bound_alone_and_with_four_boxes(name):
    path = str(shared_file("data", "nccl-topo", name))
    one = optimal_bound(load_topology(path))
    four = optimal_bound(load_topology(path, {"nodes": "4"}))
    assert one.algbw > 0 and four.algbw > 0
    assert four.ranks == 4 * one.ranks


def test_hand_checked_bounds():
    # 2 RTX A6000, 4 NVLinks (48 GB/s) plus a 24 GB/s PCIe Gen4 link each: a rank takes in 72 GB/s
    assert optimal_bound(load_topology(str(shared_file("data", "nccl-topo", "nccl_miner_nccl_topo.xml")))).algbw == 144
    # 8 RTX 3090 on two sockets; 4 GPUs behind each PLX switch share a 10 GB/s Ice Lake UPI link
    assert optimal_bound(load_topology(str(shared_file("data", "nccl-topo", "nccl-tests_topo.xml")))).algbw == 8 * Fraction(10, 4)
    # 4 A100 PCIe, one per NUMA node, each on 12 GB/s (width 0 and empty speed: NCCL's defaults)
    assert optimal_bound(load_topology(str(shared_file("data", "nccl-topo", "ncv4-topo.xml")))).algbw == 16


@pytest.mark.parametrize("name", SKELETONS)
def test_skeletons_are_refused_with_a_hint(name):
    path = shared_file("data", "nccl-topo", name)
    code, _out, err = cli("bound", str(path))
    assert code == 2
    assert "no <gpu> elements" in err and "NCCL_TOPO_DUMP_FILE" in err
    assert err.count("\n") == 1


MINIMAL = """<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:01:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:02:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="80" rank="0" gdr="1">
          <nvlink target="0000:03:00.0" count="12" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:03:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="1" sm="80" rank="1" gdr="1">
          <nvlink target="0000:02:00.0" count="12" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:04:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="16">
        <nic><net name="mlx5_0" dev="0" speed="200000" port="1" guid="0x1"/></nic>
      </pci>
    </pci>
  </cpu>
</system>
"""


def test_minimal_file_model(tmp_path):
    path = tmp_path / "t.xml"
    path.write_text(MINIMAL)
    box = import_nccl_xml(str(path))
    cap = box.topology.capacity
    assert cap[("gpu0", "gpu1")] == 240 and cap[("gpu1", "gpu0")] == 240  # 12 x 20 GB/s (sm80), each side once
    assert cap[("gpu0", "pci0000:01:00.0")] == 24  # x16 Gen4
    assert cap[("nic0", "pci0000:01:00.0")] == 24
    assert box.ports[0].bandwidth == 25 and box.ports[0].name == "mlx5_0"


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('sm="80" rank="0"', 'sm="35" rank="0"', r't\.xml:5: <gpu rank="0" dev="0">: unknown sm 35'),
        ('sm="80" rank="0"', 'rank="0"', r"t\.xml:5: .*missing attribute 'sm'"),
        ('rank="1"', 'rank="x"', r"t\.xml:10: .*rank='x' is not an integer"),
        ('count="12" tclass="0x030200"/>\n        </gpu>\n      </pci>\n      <pci busid="0000:03:00.0"',
         'count="two" tclass="0x030200"/>\n        </gpu>\n      </pci>\n      <pci busid="0000:03:00.0"', r"count='two' is not an integer"),
        ('speed="200000"', 'speed="-5"', r"t\.xml:15: <net .*negative speed"),
        ('speed="200000"', 'speed="fast"', r"speed='fast' is not an integer"),
        ('link_speed="16.0 GT/s PCIe" link_width="16">\n      <pci busid="0000:02', 'link_speed="16 GHz" link_width="16">\n      <pci busid="0000:02',
         r"unknown link_speed '16 GHz'"),
        ('link_width="16">\n      <pci busid="0000:02', 'link_width="-4">\n      <pci busid="0000:02', r"link_width=-4 is negative"),
        ('target="0000:03:00.0"', 'target="0000:99:00.0"', r"target 0000:99:00.0 is not a GPU"),
        ('tclass="0x030200"/>\n        </gpu>\n      </pci>\n      <pci busid="0000:03', 'tclass="0x999"/>\n        </gpu>\n      </pci>\n      <pci busid="0000:03',
         r"unknown tclass 0x999"),
        ("</system>", "", r"malformed XML"),
        ("<system", "<!DOCTYPE x>\n<system", r"DOCTYPE"),
    ],
)
def test_malformed_files_name_line_and_element(tmp_path, old, new, message):
    assert old in MINIMAL
    path = tmp_path / "t.xml"
    path.write_text(MINIMAL.replace(old, new, 1))
    with pytest.raises(TopologyError, match=message):
        import_nccl_xml(str(path))


def test_unknown_amd_architecture(tmp_path):
    text = MINIMAL.replace('sm="80" rank="0"', 'sm="104" gcn="gfx1100" rank="0"').replace("<nvlink", "<xgmi", 1)
    path = tmp_path / "t.xml"
    path.write_text(text)
    with pytest.raises(TopologyError, match="unknown AMD architecture gcn='gfx1100'"):
        import_nccl_xml(str(path))


def test_bad_xml_via_cli_is_one_line(tmp_path):
    path = tmp_path / "cut.xml"
    path.write_text(MINIMAL[: len(MINIMAL) // 2])
    code, _out, err = cli("bound", str(path))
    assert code == 2 and "malformed XML" in err and err.count("\n") == 1


# ----- fuzzing: random mutations of the real files never escape as anything but a ForestCollError -----

def _real_texts():
    if not DATA.exists():
        return [MINIMAL]
    return [p.read_text() for p in sorted(DATA.glob("*.xml"))]


TEXTS = _real_texts()


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 3))):
        n = len(text)
        op = draw(st.sampled_from(["delete", "insert", "truncate", "attr", "duplicate"]))
        i = draw(st.integers(0, max(0, n - 1)))
        if op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 40)):]
        elif op == "insert":
            text = text[:i] + draw(st.text(alphabet='<>/="abc0123456789 -x.:', max_size=12)) + text[i:]
        elif op == "truncate":
            text = text[:i]
        elif op == "duplicate":
            j = min(n, i + draw(st.integers(1, 200)))
            text = text[:j] + text[i:j] + text[j:]
        else:
            values = [m.span(1) for m in re.finditer(r'="([^"]*)"', text)]
            if values:
                a, b = draw(st.sampled_from(values))
                text = text[:a] + draw(st.sampled_from(["", "-1", "x", "0", "99999999999", "1e3", "0x", "16 GHz", "gfx1", "-0"])) + text[b:]
    return text


@settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "300")))
@given(mutated())
def test_fuzzed_files_fail_cleanly(text):
    try:
        box = import_nccl_xml("fuzz.xml", text)
    except ForestCollError as exc:
        assert "\n" not in str(exc)
        return
    # whatever imports is a valid topology the bound can handle
    from forestcoll.topology.cluster import build_cluster

    try:
        optimal_bound(build_cluster([box], name="fuzz"))
    except ForestCollError:
        pass
