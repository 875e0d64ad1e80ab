"""Import NCCL / RCCL topology dumps (``NCCL_TOPO_DUMP_FILE``) as a box.

What becomes what (bandwidths per direction, as NCCL models them):

* ``<gpu>`` -> a compute node ``gpu<rank>``; ranks keep the file's order.  The
  GPU's ``<pci>`` link to its parent carries width x lane-speed / 80 GB/s.
* ``<pci>`` with PCI children (switches, bridges) -> a switch ``pci<busid>``
  joined to its parent by its own link; PCI devices that hold neither a GPU,
  a NIC nor other PCI devices are left out.
* ``<cpu>`` -> a switch ``cpu<numaid>``; every pair of CPUs is joined both ways
  at the inter-socket bandwidth NCCL uses for the vendor and model
  (Intel by model: 6 / 10 / 22 / 40 GB/s; AMD by family: 16 / 24 / 32;
  POWER 32; ARM 6).
* ``<nvlink tclass="0x068000">`` -> links to one ``nvswitch`` node (all NVSwitch
  targets fold into it, both ways); ``<nvlink>`` to a GPU -> a one-way link from
  the listing GPU (each GPU lists its own side); count x per-link bandwidth by
  ``sm``: >= 100: 40.1, >= 90: 20.6, 86: 12, >= 80: 20, >= 70: 20, >= 60: 18.
  Links that target the GPU itself are ignored (NCCL treats them as loops).
* ``<xgmi>`` (RCCL) -> one-way links, count x per-link bandwidth by ``gcn``:
  gfx906/gfx908: 24, gfx90a (MI200): 36, gfx94x (MI300): 48.
* ``<c2c bw count>`` -> GPU <-> its CPU, bw x count / 1000 GB/s.
* ``<nic>`` -> a switch ``nic<k>`` joined to its parent PCI device (or, directly
  under a CPU, to the CPU at the sum of its port speeds); each ``<net>`` is a
  network port of speed / 8000 GB/s (speed 0 means NCCL's default 10,000 Mb/s).
  With ``bond_ports`` the ``<net>`` ports of one ``<nic>`` become one port whose
  bandwidth is their exact sum, named ``a+b`` as NCCL names a merged device
  (docs/topology.md "Dual-port NICs").

The box records its GPU (``topo.gpu``, :func:`forestcoll.topology.device.gpu_of_dump`):
AMD when the ``<gpu>`` has ``gcn`` (then RCCL writes its CU count into ``sm``),
NVIDIA by compute capability ``sm`` otherwise; none when the GPUs differ.

Files that list no ``<gpu>`` (static PCI skeletons shipped by cloud vendors)
are refused with a hint on how to make a real dump.  Every problem is one
line naming the file, the line and the element.
"""

from __future__ import annotations

import re
from fractions import Fraction

from forestcoll.errors import ForestCollError, TopologyError
from forestcoll.fileio import read_text
from forestcoll.topology.cluster import Box, Port
from forestcoll.topology.device import Gpu, common_gpu, gpu_of_dump
from forestcoll.topology.model import TopologyBuilder
from forestcoll.xmltree import Elem, parse_tree

__all__ = ["SKELETON_HINT", "XmlError", "import_nccl_xml", "parse_xml"]

# GB/s per NVLink by CUDA compute capability (NCCL's ncclTopoNVLinkBw)
_NVLINK = ((100, Fraction("40.1")), (90, Fraction("20.6")), (80, Fraction(20)), (70, Fraction(20)), (60, Fraction(18)))
_SM86 = Fraction(12)
# GB/s per xGMI link by AMD architecture (RCCL)
_XGMI = {"gfx906": Fraction(24), "gfx908": Fraction(24), "gfx90a": Fraction(36), "gfx940": Fraction(48),
         "gfx941": Fraction(48), "gfx942": Fraction(48)}
_GCN_ALIASES = {"906": "gfx906", "908": "gfx908", "910": "gfx90a", "940": "gfx940", "941": "gfx941", "942": "gfx942"}
# PCIe per-lane figures (NCCL): GB/s of a link = width * lane / 80
_PCI_LANE = {Fraction("2.5"): 15, Fraction(5): 30, Fraction(8): 60, Fraction(16): 120, Fraction(32): 240, Fraction(64): 480}
_PCI_DEFAULT_LANE = 60  # unknown or empty speed: Gen3, as NCCL
_NCCL_DEFAULT_SPEED = 10000  # Mb/s when a NIC reports speed 0

SKELETON_HINT = (
    "it lists no <gpu> elements, so it is a static PCI skeleton, not a topology dump; on the machine, run any "
    "NCCL/RCCL job (e.g. all_reduce_perf) once with NCCL_TOPO_DUMP_FILE=topo.xml and import that file"
)


def _describe(elem: Elem) -> str:
    """``<tag key="...">`` with the attributes that identify an element of an NCCL topology file."""
    keys = ("busid", "rank", "dev", "name", "target", "numaid")
    ident = " ".join(f'{k}="{elem.attrs[k]}"' for k in keys if k in elem.attrs)
    return f"<{elem.tag}{' ' + ident if ident else ''}>"


class XmlError(TopologyError):
    """A problem in an NCCL XML file (one line, naming file, line and element)."""


def parse_xml(text: str, source: str) -> Elem:
    """Parse XML into :class:`Elem` trees with line numbers; DTDs and entities are refused."""
    return parse_tree(text, source, XmlError, "system", " in a topology file")[0]


class _Reader:
    """Attribute access with one-line errors naming the file, line and element."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, elem: Elem, message: str) -> XmlError:
        return XmlError(f"{self.source}:{elem.line}: {_describe(elem)}: {message}")

    def attr(self, elem: Elem, key: str) -> str:
        if key not in elem.attrs:
            raise self.fail(elem, f"missing attribute {key!r}")
        return elem.attrs[key]

    def integer(self, elem: Elem, key: str, default: int | None = None, base: int = 0) -> int:
        if key not in elem.attrs and default is not None:
            return default
        raw = self.attr(elem, key).strip()
        try:
            return int(raw, base)
        except ValueError:
            raise self.fail(elem, f"attribute {key}={raw!r} is not an integer") from None


def _busid(text: str) -> str:
    return text.strip().lower()


def _pci_bandwidth(rd: _Reader, elem: Elem) -> Fraction:
    width = rd.integer(elem, "link_width", 16, base=10) if elem.attrs.get("link_width", "").strip() else 16
    if width < 0:
        raise rd.fail(elem, f"link_width={width} is negative")
    width = width or 16
    raw = elem.attrs.get("link_speed", "").strip()
    lane = _PCI_DEFAULT_LANE
    if raw and raw.lower() != "unknown":
        m = re.match(r"^(\d+(?:\.\d+)?)\s*GT/s(\s+PCIe)?$", raw)
        if not m:
            raise rd.fail(elem, f"unknown link_speed {raw!r} (expected like '16.0 GT/s PCIe' or '8 GT/s')")
        gts = Fraction(m.group(1))
        if gts not in _PCI_LANE:
            raise rd.fail(elem, f"unknown PCIe speed {raw!r} (known: 2.5, 5, 8, 16, 32, 64 GT/s)")
        lane = _PCI_LANE[gts]
    return Fraction(width * lane, 80)


def _cpu_bandwidth(rd: _Reader, cpu: Elem) -> Fraction:
    arch = cpu.attrs.get("arch", "").lower()
    vendor = cpu.attrs.get("vendor", "")
    if arch.startswith("ppc") or "power" in arch:
        return Fraction(32)
    if arch.startswith(("arm", "aarch")):
        return Fraction(6)
    if vendor == "GenuineIntel":
        family = rd.integer(cpu, "familyid", 0)
        model = rd.integer(cpu, "modelid", 0)
        if family == 6 and model >= 0xCF:
            return Fraction(40)
        if family == 6 and model >= 0x8F:
            return Fraction(22)
        if family == 6 and model >= 0x55:
            return Fraction(10)
        return Fraction(6)
    if vendor == "AuthenticAMD":
        family = rd.integer(cpu, "familyid", 0)
        return {0xAF: Fraction(24), 0xBF: Fraction(32)}.get(family, Fraction(16))
    if vendor in ("CentaurHauls", "  Shanghai  "):
        family = rd.integer(cpu, "familyid", 0)
        model = rd.integer(cpu, "modelid", 0)
        return Fraction(9) if (family, model) == (7, 0x5B) else Fraction(6)
    return Fraction(5000)  # NCCL's "local" bandwidth for CPUs it does not know


def _nvlink_bw(rd: _Reader, gpu: Elem) -> Fraction:
    sm = rd.integer(gpu, "sm", base=10)
    if sm == 86:
        return _SM86
    for lo, bw in _NVLINK:
        if sm >= lo:
            return bw
    raise rd.fail(gpu, f"unknown sm {sm}: no NVLink bandwidth is known before sm 60")


def _xgmi_bw(rd: _Reader, gpu: Elem) -> Fraction:
    raw = rd.attr(gpu, "gcn").strip().lower()
    arch = _GCN_ALIASES.get(raw, raw.split(":")[0])
    if arch not in _XGMI:
        raise rd.fail(gpu, f"unknown AMD architecture gcn={raw!r} (known: gfx906, gfx908, gfx90a, gfx940-gfx942)")
    return _XGMI[arch]


def _gpu_kind(gpu: Elem) -> Gpu | None:
    """What one ``<gpu>`` is (its vendor, SMs or CUs), or None when its ``sm`` is not a number."""
    gcn = gpu.attrs.get("gcn")
    arch = None if gcn is None else _GCN_ALIASES.get(gcn.strip().lower(), gcn.strip().lower().split(":")[0])
    return gpu_of_dump(gpu.attrs.get("sm", ""), gcn, arch)


def import_nccl_xml(path: str, text: str | None = None, bond_ports: bool = False) -> Box:
    """Read an NCCL / RCCL topology dump and return one box (see the module docstring); ``bond_ports``: each NIC's
    ports as one port of their summed bandwidth, with a note saying what was bonded (or that nothing was)."""
    source = str(path)
    if text is None:
        try:
            text = read_text(path, "topology file")
        except ForestCollError as exc:
            raise TopologyError(str(exc)) from None
    if text.lstrip().startswith("<"):  # another kind of XML (an MSCCL algorithm): say so before parsing it as one
        from forestcoll.fileio import file_kind, wrong_kind

        kind = file_kind(source, text)
        if kind.name != "nccl-topology" and (wrong := wrong_kind(source, "an NCCL/RCCL topology dump", kind)):
            raise TopologyError(str(wrong))
    system = parse_xml(text, source)
    rd = _Reader(source)
    if system.tag != "system":
        raise rd.fail(system, "the top element must be <system>")
    gpus = [e for e in _walk(system) if e.tag == "gpu"]
    if not gpus:
        raise XmlError(f"{source}: {SKELETON_HINT}")

    b = TopologyBuilder(gpu=common_gpu(_gpu_kind(g) for g in gpus))
    ports: list[Port] = []
    gpu_of_pci: dict[str, str] = {}  # pci busid of a GPU -> node name
    order: list[tuple[int, int, Elem]] = []
    for i, g in enumerate(gpus):
        rank = rd.integer(g, "rank", rd.integer(g, "dev", i, base=10), base=10)
        order.append((rank, i, g))
    if len({r for r, _, _ in order}) != len(order):
        raise rd.fail(gpus[0], "two GPUs have the same rank")
    order.sort()
    for rank, _, g in order:
        name = b.compute(f"gpu{rank}")
        if g.parent is None or g.parent.tag != "pci":
            raise rd.fail(g, "a <gpu> must sit inside its <pci> element")
        gpu_of_pci[_busid(rd.attr(g.parent, "busid"))] = name
        g.attrs["_node"] = name
    cpus = [e for e in system.children if e.tag == "cpu"]
    if not cpus:
        raise rd.fail(system, "no <cpu> element")
    cpu_names = []
    for c in cpus:
        numa = c.attrs.get("numaid", "").strip()
        name = f"cpu{numa}" if numa not in ("", "-1") else "cpu"
        if name in cpu_names:
            name = f"{name}.{len(cpu_names)}"
        cpu_names.append(b.switch(name))
        c.attrs["_node"] = name
    for i, c in enumerate(cpus):
        for j in range(len(cpus)):
            if i != j:
                b.link(cpu_names[i], cpu_names[j], _cpu_bandwidth(rd, c), "sys")
    nic_count = 0
    bonded: list[int] = []  # with bond_ports: how many ports each NIC had that had more than one

    def nic_ports(nic: Elem, node: str) -> list[Port]:
        found = _ports(rd, nic, node)
        if not bond_ports or len(found) == 1:
            return found
        bonded.append(len(found))
        return [Port(node, sum((p.bandwidth for p in found), Fraction(0)), "+".join(p.name for p in found))]

    def visit(elem: Elem, parent_node: str, cpu_node: str) -> None:
        nonlocal nic_count
        for child in elem.children:
            if child.tag == "pci":
                busid = _busid(rd.attr(child, "busid"))
                kinds = {c.tag for c in child.children}
                bw = _pci_bandwidth(rd, child)
                if "gpu" in kinds:
                    gpu_node = next(c for c in child.children if c.tag == "gpu").attrs["_node"]
                    b.duplex(gpu_node, parent_node, bw, "pcie")
                elif "nic" in kinds:
                    for nic in (c for c in child.children if c.tag == "nic"):
                        node = f"nic{nic_count}"
                        nic_count += 1
                        b.switch(node)
                        b.duplex(node, parent_node, bw, "pcie")
                        ports.extend(nic_ports(nic, node))
                elif "pci" in kinds:
                    node = b.switch(f"pci{busid}")
                    b.duplex(node, parent_node, bw, "pcie")
                    visit(child, node, cpu_node)
            elif child.tag == "nic":
                node = f"nic{nic_count}"
                nic_count += 1
                b.switch(node)
                own = nic_ports(child, node)
                total = sum((p.bandwidth for p in own), Fraction(0)) or Fraction(1)
                b.duplex(node, parent_node, total, "pcie")
                ports.extend(own)
            elif child.tag == "gpu":
                raise rd.fail(child, "a <gpu> must sit inside its <pci> element")

    for c in cpus:
        visit(c, c.attrs["_node"], c.attrs["_node"])
    has_nvswitch: list[bool] = []
    for g in gpus:
        cpu = g
        while cpu is not None and cpu.tag != "cpu":
            cpu = cpu.parent
        if cpu is None or "_node" not in cpu.attrs:
            raise rd.fail(g, "a <gpu> must sit under a <cpu> element of <system>")
        _gpu_links(rd, b, g, gpu_of_pci, cpu.attrs["_node"], has_nvswitch)
    b.name = source
    try:
        topo = b.build()
    except TopologyError as exc:
        raise XmlError(f"{source}: {exc}") from None
    notes = (bond_note(source, bonded, len(ports)),) if bond_ports else ()
    return Box(topo, tuple(ports), kind=source, warnings=tuple(plausibility(rd, gpus)), notes=notes)


def bond_note(source: str, bonded: list[int], ports: int) -> str:
    """What ``bond_ports`` did to a dump: which NICs' ports became one, or that every NIC had one port."""
    if not bonded:
        return f"{source}: --bond-nic-ports changes nothing: every NIC has one network port ({ports} per box)"
    return (f"{source}: --bond-nic-ports: each NIC's ports bonded into one port of their summed bandwidth: "
            f"{sum(bonded) + ports - len(bonded)} -> {ports} network ports per box")


# NVLinks per GPU by generation (sm): V100 6, A100 12, H100 / H200 18, B200 18 (NVLink 5)
NVLINKS_PER_GPU = ((100, 18), (90, 18), (80, 12), (70, 6))


def plausibility(rd: _Reader, gpus: list[Elem]) -> list[str]:
    """Warnings about a dump that parses but is unlikely to describe the machine: sm90+ GPUs without any
    <nvlink> (a dump taken where NVLink was hidden), or more NVLinks per GPU than its generation has."""
    out: list[str] = []
    gpus = [g for g in gpus if "gcn" not in g.attrs and not any(c.tag == "xgmi" for c in g.children)]  # NVIDIA only
    sms = sorted({int(g.attrs["sm"]) for g in gpus if g.attrs.get("sm", "").strip().isdigit()})
    links = {g.attrs["_node"]: sum(int(c.attrs.get("count", "0")) for c in g.children
                                   if c.tag == "nvlink" and c.attrs.get("count", "").strip().isdigit()) for g in gpus}
    if sms and sms[-1] >= 90 and not any(links.values()):
        out.append(f"{rd.source}: the dump lists no <nvlink> for its sm{sms[-1]} GPUs, so they import as PCIe-only; "
                   "SXM boxes of this generation have NVLink: take the dump (NCCL_TOPO_DUMP_FILE) from a job that "
                   "sees NVLink (nvidia-smi nvlink --status) and import it again")
    for g in gpus:
        sm = g.attrs.get("sm", "").strip()
        most = next((n for lo, n in NVLINKS_PER_GPU if sm.isdigit() and int(sm) >= lo), None)
        if most is not None and links[g.attrs["_node"]] > most:
            out.append(f"{rd.source}:{g.line}: {g.attrs['_node']} lists {links[g.attrs['_node']]} NVLinks but an "
                       f"sm{sm} GPU has {most}; the dump may count links twice (imported as written)")
            break
    return out


def _walk(elem: Elem):
    yield elem
    for c in elem.children:
        yield from _walk(c)


def _ports(rd: _Reader, nic: Elem, node: str) -> list[Port]:
    out = []
    nets = [c for c in nic.children if c.tag == "net"]
    if not nets:
        raise rd.fail(nic, "a <nic> needs at least one <net> port")
    for net in nets:
        name = rd.attr(net, "name")
        speed = rd.integer(net, "speed", base=10)
        if speed < 0:
            raise rd.fail(net, f"negative speed {speed} Mb/s")
        speed = speed or _NCCL_DEFAULT_SPEED
        out.append(Port(node, Fraction(speed, 8000), name))
    return out


def _gpu_links(
    rd: _Reader, b: TopologyBuilder, gpu: Elem, gpu_of_pci: dict[str, str], cpu_node: str, has_nvswitch: list[bool]
) -> None:
    me = gpu.attrs["_node"]
    for link in gpu.children:
        if link.tag not in ("nvlink", "xgmi", "c2c"):
            continue
        count = rd.integer(link, "count", base=10)
        if count < 0:
            raise rd.fail(link, f"negative count {count}")
        if count == 0:
            continue
        if link.tag == "c2c":
            bw = rd.integer(link, "bw", base=10)
            if bw <= 0:
                raise rd.fail(link, f"bw must be > 0, got {bw}")
            b.duplex(me, cpu_node, Fraction(bw * count, 1000), "c2c")
            continue
        per_link = _nvlink_bw(rd, gpu) if link.tag == "nvlink" else _xgmi_bw(rd, gpu)
        target = _busid(rd.attr(link, "target"))
        tclass = rd.attr(link, "tclass").strip().lower()
        bw = per_link * count
        if tclass == "0x068000":
            if not has_nvswitch:
                has_nvswitch.append(True)
                b.switch("nvswitch")
            b.duplex(me, "nvswitch", bw, "nvlink")
        elif tclass == "0x068001":
            b.duplex(me, cpu_node, bw, link.tag)
        elif tclass.startswith(("0x03", "0x12")):
            other = gpu_of_pci.get(target)
            if other is None:
                raise rd.fail(link, f"target {target} is not a GPU in this file")
            if other != me:
                b.link(me, other, bw, link.tag)
        else:
            raise rd.fail(link, f"unknown tclass {tclass} (expected 0x03.. / 0x12.. GPU, 0x068000 NVSwitch, 0x068001 CPU)")
