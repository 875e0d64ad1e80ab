"""Built-in topologies, named ``NAME[:key=value,...]``.

Two kinds: *box families* (dgx-a100, dgx-h100, dgx-b200, hgx-h100, mi250,
mi300x, dgx-1, ndv2, and the mixed ``hetero``) build one machine and join
``nodes=N`` of them with a fabric (``fabric=switch|rail|leaf-spine|mesh`` and
its options, see :mod:`forestcoll.topology.cluster`); *generic* ones (ring,
torus, fully-connected, switch, hypercube) are plain graphs.  Every builder is a
pure function to a validated :class:`Topology` that declares its obvious
automorphisms.  Compute nodes are numbered box by box.  Box families record
their GPU (``topo.gpu``: :mod:`forestcoll.topology.device`).  Sources for every
figure: docs/catalog.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from forestcoll.errors import ForestCollError, TopologyError
from forestcoll.limits import MAX_RANKS, check_count
from forestcoll.rational import format_rational, parse_rational
from forestcoll.topology.cluster import FABRICS, Box, Fabric, Port, build_cluster
from forestcoll.topology.device import GPUS, Gpu
from forestcoll.topology.model import Topology, TopologyBuilder
from forestcoll.units import parse_bandwidth

__all__ = [
    "BOX_FAMILIES", "BUILTINS", "CLUSTER_PARAMS", "DGX1_NVLINKS", "MI250_GCD_SYMMETRIES", "MI250_XGMI_LINKS",
    "SWITCH_FABRIC", "BoxFamily", "Builtin", "Param", "build_builtin", "count_option", "dgx1_box", "dgx_a100_box", "dgx_b200_box",
    "dgx_h100_box", "fabric_from_options", "fully_connected", "hetero", "hgx_h100_box", "hypercube", "mi250_box",
    "mi300x_box", "ndv2_box", "nvswitch_box", "ring", "star_switch", "torus",
]

# xGMI link counts between the 16 GCDs of one MI250 box (8 GPUs x 2 GCDs), as modelled by the
# ForestColl evaluation; each link carries 50 GB/s per direction.
MI250_XGMI_LINKS: tuple[tuple[int, ...], ...] = (
    (0, 4, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0),
    (4, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0),
    (0, 0, 0, 4, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0),
    (0, 0, 4, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0),
    (2, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 1, 0, 0, 4, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0),
    (0, 0, 0, 2, 0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0),
    (1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 2, 0, 0, 0),
    (0, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 1, 0, 0),
    (0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 1, 0),
    (0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 2),
    (0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 4, 1, 0),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4, 0, 1, 1),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 4),
    (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 4, 0),
)
# Automorphisms of that matrix (found with bliss; checked again at build time).
MI250_GCD_SYMMETRIES: tuple[tuple[int, ...], ...] = (
    (3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12),
    (8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7),
)


@dataclass(frozen=True)
class Param:
    """One ``key=value`` parameter of a built-in: its parser, default and help text."""

    parse: Callable[[str, str], object]
    default: object
    help: str


@dataclass(frozen=True)
class Builtin:
    """A named topology family."""

    name: str
    summary: str
    params: dict[str, Param]
    build: Callable[..., Topology]


def count_option(lo: int, limit: int = MAX_RANKS) -> Callable[[str, str], int]:
    """A parser of an integer option ``text`` (named ``what`` in errors) that must lie in ``lo..limit``."""
    def parse(text: str, what: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise TopologyError(f"{what}: expected an integer, got {text!r}") from None
        if value < lo:
            raise TopologyError(f"{what}: must be >= {lo}, got {value}")
        return check_count(value, what, limit)

    return parse


def _bw(text: str, what: str) -> Fraction:
    try:
        return parse_bandwidth(text, what)
    except ForestCollError as exc:
        raise TopologyError(str(exc)) from None


def _dims(text: str, what: str) -> tuple[int, ...]:
    parts = text.lower().split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise TopologyError(f"{what}: expected sizes like 4x4 or 2x2x2, got {text!r}") from None
    if not dims or any(d < 1 for d in dims):
        raise TopologyError(f"{what}: sizes must be >= 1, got {text!r}")
    check_count(math.prod(dims), f"{what} (product of the sizes)", MAX_RANKS)
    return dims


# NVLink counts of the DGX-1 (V100) hybrid cube-mesh, 25 GB/s per link per direction.
DGX1_NVLINKS: tuple[tuple[int, ...], ...] = (
    (0, 2, 1, 1, 2, 0, 0, 0),
    (2, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 0, 2, 0, 0, 2, 0),
    (1, 2, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 2, 1, 1),
    (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 2, 0, 1, 1, 0, 2),
    (0, 0, 0, 1, 1, 2, 2, 0),
)


def _rotation(prefixes: tuple[str, ...], count: int, step: int = 1) -> dict[str, str]:
    return {f"{p}{i}": f"{p}{(i + step) % count}" for p in prefixes for i in range(count)}


def nvswitch_box(kind: str, nvlink_bw: Fraction, nic_bw: Fraction, gpus: int = 8, gpu: Gpu | None = None) -> Box:
    """GPUs (``gpu``) on one NVSwitch; GPU i owns NIC i (GPU<->NIC at the NIC's bandwidth), the NICs are the ports."""
    b = TopologyBuilder(kind, gpu)
    for i in range(gpus):
        b.compute(f"gpu{i}")
    b.switch("nvswitch")
    for i in range(gpus):
        b.switch(f"nic{i}")
    for i in range(gpus):
        b.duplex(f"gpu{i}", "nvswitch", nvlink_bw, "nvlink")
        b.duplex(f"gpu{i}", f"nic{i}", nic_bw, "pcie")
    b.symmetry(_rotation(("gpu", "nic"), gpus))
    return Box(b.build(), tuple(Port(f"nic{i}", nic_bw) for i in range(gpus)), kind)


def dgx_a100_box(nvlink_bw: Fraction = Fraction(300), nic_bw: Fraction = Fraction(25)) -> Box:
    """DGX-A100: 8 GPUs x 300 GB/s to NVSwitch, a 200 Gb/s (25 GB/s) NIC per GPU."""
    return nvswitch_box("dgx-a100", nvlink_bw, nic_bw, gpu=GPUS["A100"])


def dgx_h100_box(nvlink_bw: Fraction = Fraction(450), nic_bw: Fraction = Fraction(50)) -> Box:
    """DGX-H100: 8 GPUs x 450 GB/s (18 NVLink4) to NVSwitch, a 400 Gb/s NIC per GPU."""
    return nvswitch_box("dgx-h100", nvlink_bw, nic_bw, gpu=GPUS["H100"])


def dgx_b200_box(nvlink_bw: Fraction = Fraction(900), nic_bw: Fraction = Fraction(50)) -> Box:
    """DGX-B200: 8 GPUs x 900 GB/s (18 NVLink5) to NVSwitch, a 400 Gb/s NIC per GPU."""
    return nvswitch_box("dgx-b200", nvlink_bw, nic_bw, gpu=GPUS["B200"])


def hgx_h100_box(
    nvlink_bw: Fraction = Fraction(450), nics: int = 8, nic_bw: Fraction = Fraction(50), pcie_bw: Fraction = Fraction(64)
) -> Box:
    """HGX-H100 board: 8 GPUs on NVSwitch; each pair of GPUs shares a PCIe switch with 1 or 2 NICs."""
    if nics not in (4, 8):
        raise TopologyError(f"hgx-h100:nics must be 4 or 8, got {nics}")
    b = TopologyBuilder("hgx-h100", GPUS["H100"])
    for i in range(8):
        b.compute(f"gpu{i}")
    b.switch("nvswitch")
    for j in range(4):
        b.switch(f"pcie{j}")
    for j in range(nics):
        b.switch(f"nic{j}")
    for i in range(8):
        b.duplex(f"gpu{i}", "nvswitch", nvlink_bw, "nvlink")
        b.duplex(f"gpu{i}", f"pcie{i // 2}", pcie_bw, "pcie")
    for j in range(nics):
        b.duplex(f"nic{j}", f"pcie{j * 4 // nics}", pcie_bw, "pcie")
    nic_step = nics // 4
    b.symmetry({**_rotation(("gpu",), 8, 2), **_rotation(("pcie",), 4), **_rotation(("nic",), nics, nic_step)})
    swap = {f"gpu{2 * j}": f"gpu{2 * j + 1}" for j in range(4)} | {f"gpu{2 * j + 1}": f"gpu{2 * j}" for j in range(4)}
    if nics == 8:
        swap |= {f"nic{2 * j}": f"nic{2 * j + 1}" for j in range(4)} | {f"nic{2 * j + 1}": f"nic{2 * j}" for j in range(4)}
    b.symmetry(swap)
    return Box(b.build(), tuple(Port(f"nic{j}", nic_bw) for j in range(nics)), "hgx-h100")


def mi250_box(xgmi_bw: Fraction = Fraction(50), nic_bw: Fraction = Fraction(16)) -> Box:
    """AMD MI250 box: 16 GCDs joined by xGMI bundles; every GCD is a 16 GB/s network port itself."""
    b = TopologyBuilder("mi250", GPUS["MI250 GCD"])
    n = len(MI250_XGMI_LINKS)
    for i in range(n):
        b.compute(f"gcd{i}")
    for i in range(n):
        for j in range(n):
            if MI250_XGMI_LINKS[i][j]:
                b.link(f"gcd{i}", f"gcd{j}", MI250_XGMI_LINKS[i][j] * xgmi_bw, "xgmi")
    for perm in MI250_GCD_SYMMETRIES:
        b.symmetry({f"gcd{i}": f"gcd{perm[i]}" for i in range(n)})
    return Box(b.build(), tuple(Port(f"gcd{i}", nic_bw) for i in range(n)), "mi250")


def mi300x_box(xgmi_bw: Fraction = Fraction(64), nic_bw: Fraction = Fraction(50), pcie_bw: Fraction = Fraction(64)) -> Box:
    """AMD MI300X platform: 8 GPUs, one 64 GB/s xGMI link between every pair, a 400 Gb/s NIC per GPU."""
    b = TopologyBuilder("mi300x", GPUS["MI300X"])
    for i in range(8):
        b.compute(f"gpu{i}")
    for i in range(8):
        b.switch(f"nic{i}")
    for i in range(8):
        for j in range(i + 1, 8):
            b.duplex(f"gpu{i}", f"gpu{j}", xgmi_bw, "xgmi")
        b.duplex(f"gpu{i}", f"nic{i}", pcie_bw, "pcie")
    b.symmetry(_rotation(("gpu", "nic"), 8))
    return Box(b.build(), tuple(Port(f"nic{i}", nic_bw) for i in range(8)), "mi300x")


def dgx1_box(
    nvlink_bw: Fraction = Fraction(25),
    nics: int = 4,
    nic_bw: Fraction = Fraction(25, 2),
    pcie_bw: Fraction = Fraction(12),
    qpi_bw: Fraction = Fraction(6),
    kind: str = "dgx-1",
) -> Box:
    """DGX-1 (V100) hybrid cube-mesh: NVLink2 bundles per DGX1_NVLINKS; GPU pairs on PCIe switches under 2 CPUs.

    ``nics`` 100 Gb/s EDR NICs sit on the first PCIe switches (DGX-1: 4, one per switch; NDv2: 1).
    """
    if not 1 <= nics <= 4:
        raise TopologyError(f"{kind}:nics must be between 1 and 4, got {nics}")
    b = TopologyBuilder(kind, GPUS["V100"])
    for i in range(8):
        b.compute(f"gpu{i}")
    for c in range(2):
        b.switch(f"cpu{c}")
    for j in range(4):
        b.switch(f"pcie{j}")
    for j in range(nics):
        b.switch(f"nic{j}")
    for i in range(8):
        for j in range(8):
            if DGX1_NVLINKS[i][j]:
                b.link(f"gpu{i}", f"gpu{j}", DGX1_NVLINKS[i][j] * nvlink_bw, "nvlink")
        b.duplex(f"gpu{i}", f"pcie{i // 2}", pcie_bw, "pcie")
    for j in range(4):
        b.duplex(f"pcie{j}", f"cpu{j // 2}", pcie_bw, "pcie")
    for j in range(nics):
        b.duplex(f"nic{j}", f"pcie{j}", pcie_bw, "pcie")
    b.duplex("cpu0", "cpu1", qpi_bw, "sys")
    return Box(b.build(), tuple(Port(f"nic{j}", nic_bw) for j in range(nics)), kind)


def ndv2_box(nvlink_bw: Fraction = Fraction(25), nic_bw: Fraction = Fraction(25, 2)) -> Box:
    """Azure NDv2: the DGX-1 V100 NVLink mesh with a single 100 Gb/s InfiniBand NIC."""
    return dgx1_box(nvlink_bw, 1, nic_bw, kind="ndv2")


def ring(n: int = 8, bw: Fraction = Fraction(100)) -> Topology:
    """A bidirectional ring of ``n`` compute nodes, ``bw`` GB/s each way per link."""
    b = TopologyBuilder(f"ring:n={n},bw={format_rational(bw)}")
    names = [b.compute(f"r{i}") for i in range(n)]
    for i in range(n if n > 2 else 1):
        b.duplex(names[i], names[(i + 1) % n], bw, "link")
    b.symmetry({names[i]: names[(i + 1) % n] for i in range(n)})
    return b.build()


def torus(dims: tuple[int, ...] = (4, 4), bw: Fraction = Fraction(100)) -> Topology:
    """A wrap-around torus (e.g. ``4x4``); a dimension of size 2 has one link, not two."""
    import itertools

    label = "x".join(map(str, dims))
    b = TopologyBuilder(f"torus:dims={label},bw={format_rational(bw)}")

    def name(c: tuple[int, ...]) -> str:
        return "t" + "_".join(map(str, c))

    coords = list(itertools.product(*(range(d) for d in dims)))
    for c in coords:
        b.compute(name(c))
    for c in coords:
        for axis, size in enumerate(dims):
            if size == 1 or (size == 2 and c[axis] == 1):
                continue
            nxt = list(c)
            nxt[axis] = (c[axis] + 1) % size
            b.duplex(name(c), name(tuple(nxt)), bw, "link")
    for axis, size in enumerate(dims):
        if size > 1:
            shift = {}
            for c in coords:
                nxt = list(c)
                nxt[axis] = (c[axis] + 1) % size
                shift[name(c)] = name(tuple(nxt))
            b.symmetry(shift)
    return b.build()


def fully_connected(n: int = 8, bw: Fraction = Fraction(100)) -> Topology:
    """``n`` compute nodes with a direct two-way link between every pair."""
    b = TopologyBuilder(f"fully-connected:n={n},bw={format_rational(bw)}")
    names = [b.compute(f"p{i}") for i in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            b.duplex(names[i], names[j], bw, "link")
    b.symmetry({names[i]: names[(i + 1) % n] for i in range(n)})
    return b.build()


def star_switch(n: int = 8, bw: Fraction = Fraction(100)) -> Topology:
    """``n`` compute nodes joined by one switch, ``bw`` GB/s each way per port."""
    b = TopologyBuilder(f"switch:n={n},bw={format_rational(bw)}")
    names = [b.compute(f"h{i}") for i in range(n)]
    sw = b.switch("switch")
    for name in names:
        b.duplex(name, sw, bw, "link")
    b.symmetry({names[i]: names[(i + 1) % n] for i in range(n)})
    return b.build()


def hypercube(dim: int = 3, bw: Fraction = Fraction(100)) -> Topology:
    """2**dim compute nodes; node i links to i XOR 2**d for every dimension d."""
    b = TopologyBuilder(f"hypercube:dim={dim},bw={format_rational(bw)}")
    n = 1 << dim
    names = [b.compute(f"h{i}") for i in range(n)]
    for i in range(n):
        for d in range(dim):
            j = i ^ (1 << d)
            if i < j:
                b.duplex(names[i], names[j], bw, "link")
    for d in range(dim):
        b.symmetry({names[i]: names[i ^ (1 << d)] for i in range(n)})
    return b.build()


# ----- registry ----------------------------------------------------------------------------------


def _choice(options: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(text: str, what: str) -> str:
        if text not in options:
            raise TopologyError(f"{what}: {text!r} is not one of {', '.join(options)}")
        return text

    return parse


def _ratio(text: str, what: str) -> Fraction:
    try:
        value = parse_rational(text, what)
    except ForestCollError as exc:
        raise TopologyError(str(exc)) from None
    if value <= 0:
        raise TopologyError(f"{what}: must be > 0, got {text}")
    return value


CLUSTER_PARAMS: dict[str, Param] = {
    "nodes": Param(count_option(1), 1, "number of boxes"),
    "fabric": Param(_choice(FABRICS), None, "how boxes are joined: " + ", ".join(FABRICS)),
    "rails": Param(count_option(1), None, "rail fabric: rail switches (default: ports per box)"),
    "oversub": Param(_ratio, Fraction(1), "leaf-spine: downlink / uplink bandwidth of a leaf"),
    "spines": Param(count_option(1), 2, "leaf-spine: spine switches"),
    "leaf_ports": Param(count_option(1), None, "leaf-spine: ports per leaf (default: whole boxes, about 32)"),
}


@dataclass(frozen=True)
class BoxFamily:
    """A machine type: its box builder and parameters, and the fabric its clusters use by default."""

    name: str
    summary: str
    params: dict[str, Param]
    make_box: Callable[..., Box]
    fabric: Fabric = Fabric()
    prune_single: bool = False


SWITCH_FABRIC = Fabric()


def fabric_from_options(options: dict[str, object], default: Fabric = SWITCH_FABRIC) -> Fabric:
    """A Fabric from parsed cluster options; the family default applies when ``fabric`` is not given."""
    kind = options.get("fabric")
    if kind is None or kind == default.kind:
        base = default
    else:
        base = Fabric(str(kind))
    return Fabric(
        base.kind,
        rails=options.get("rails", base.rails),  # type: ignore[arg-type]
        oversub=options.get("oversub", base.oversub),  # type: ignore[arg-type]
        spines=options.get("spines", base.spines),  # type: ignore[arg-type]
        leaf_ports=options.get("leaf_ports", base.leaf_ports),  # type: ignore[arg-type]
        switch_names=base.switch_names if base is default and "rails" not in options else "",
    )


BOX_FAMILIES: dict[str, BoxFamily] = {
    "dgx-a100": BoxFamily(
        "dgx-a100",
        "NVIDIA DGX-A100: 8 GPUs x 300 GB/s NVSwitch; boxes joined by 8 x 25 GB/s NICs on 2 IB switches",
        {"nvlink_bw": Param(_bw, Fraction(300), "GPU<->NVSwitch GB/s each way"),
         "nic_bw": Param(_bw, Fraction(25), "GPU<->NIC and NIC<->fabric GB/s each way")},
        dgx_a100_box,
        Fabric("rail", rails=2, switch_names="ib"),
        prune_single=True,
    ),
    "dgx-h100": BoxFamily(
        "dgx-h100",
        "NVIDIA DGX-H100: 8 GPUs x 450 GB/s NVSwitch; 8 x 400 Gb/s NICs, rail-optimised",
        {"nvlink_bw": Param(_bw, Fraction(450), "GPU<->NVSwitch GB/s each way"),
         "nic_bw": Param(_bw, Fraction(50), "NIC GB/s each way")},
        dgx_h100_box,
        Fabric("rail"),
    ),
    "dgx-b200": BoxFamily(
        "dgx-b200",
        "NVIDIA DGX-B200: 8 GPUs x 900 GB/s NVSwitch; 8 x 400 Gb/s NICs, rail-optimised",
        {"nvlink_bw": Param(_bw, Fraction(900), "GPU<->NVSwitch GB/s each way"),
         "nic_bw": Param(_bw, Fraction(50), "NIC GB/s each way")},
        dgx_b200_box,
        Fabric("rail"),
    ),
    "hgx-h100": BoxFamily(
        "hgx-h100",
        "HGX-H100 board: 8 GPUs x 450 GB/s NVSwitch; 4 or 8 NICs on 4 PCIe switches (2 GPUs each)",
        {"nvlink_bw": Param(_bw, Fraction(450), "GPU<->NVSwitch GB/s each way"),
         "nics": Param(count_option(1), 8, "NICs per box: 8 (one per GPU) or 4 (one per GPU pair)"),
         "nic_bw": Param(_bw, Fraction(50), "NIC GB/s each way"),
         "pcie_bw": Param(_bw, Fraction(64), "PCIe Gen5 x16 GB/s each way")},
        hgx_h100_box,
        Fabric("rail"),
    ),
    "mi250": BoxFamily(
        "mi250",
        "AMD MI250: 16 GCDs joined by 50 GB/s xGMI bundles; boxes joined by 16 GB/s per GCD to one IB switch",
        {"xgmi_bw": Param(_bw, Fraction(50), "GB/s per xGMI link each way"),
         "nic_bw": Param(_bw, Fraction(16), "GCD<->fabric GB/s each way")},
        mi250_box,
        Fabric("switch", switch_names="ib"),
    ),
    "mi300x": BoxFamily(
        "mi300x",
        "AMD MI300X platform: 8 GPUs, 64 GB/s xGMI between every pair; 8 x 400 Gb/s NICs",
        {"xgmi_bw": Param(_bw, Fraction(64), "GB/s per xGMI link each way"),
         "nic_bw": Param(_bw, Fraction(50), "NIC GB/s each way"),
         "pcie_bw": Param(_bw, Fraction(64), "GPU<->NIC PCIe GB/s each way")},
        mi300x_box,
        Fabric("rail"),
    ),
    "dgx-1": BoxFamily(
        "dgx-1",
        "NVIDIA DGX-1 (V100): hybrid cube-mesh NVLink (25 GB/s per link); 4 x 100 Gb/s NICs on PCIe",
        {"nvlink_bw": Param(_bw, Fraction(25), "GB/s per NVLink each way"),
         "nics": Param(count_option(1), 4, "NICs per box (1-4)"),
         "nic_bw": Param(_bw, Fraction(25, 2), "NIC GB/s each way"),
         "pcie_bw": Param(_bw, Fraction(12), "PCIe GB/s each way"),
         "qpi_bw": Param(_bw, Fraction(6), "CPU<->CPU GB/s each way")},
        dgx1_box,
        Fabric("rail"),
    ),
    "ndv2": BoxFamily(
        "ndv2",
        "Azure NDv2: 8 V100 in the DGX-1 NVLink mesh; one 100 Gb/s InfiniBand NIC per VM",
        {"nvlink_bw": Param(_bw, Fraction(25), "GB/s per NVLink each way"),
         "nic_bw": Param(_bw, Fraction(25, 2), "NIC GB/s each way")},
        ndv2_box,
        Fabric("switch"),
    ),
}


def _family_builder(family: BoxFamily) -> Callable[..., Topology]:
    def build(**options: object) -> Topology:
        box_opts = {k: v for k, v in options.items() if k in family.params}
        cluster_opts = {k: v for k, v in options.items() if k in CLUSTER_PARAMS}
        box = family.make_box(**box_opts)
        nodes = int(cluster_opts.get("nodes", 1))  # type: ignore[arg-type]
        fabric = fabric_from_options(cluster_opts, family.fabric)
        return build_cluster([box] * nodes, fabric, family.name, prune_single=family.prune_single)

    return build


def hetero(**options: object) -> Topology:
    """A cluster mixing box types: ``hetero:dgx-a100=2,dgx-h100=2`` (the default; fabric: one switch)."""
    boxes: list[Box] = []
    if not any(name in BOX_FAMILIES for name in options):
        options = {"dgx-a100": 2, "dgx-h100": 2, **options}
    for name, count in options.items():
        if name in BOX_FAMILIES:
            boxes.extend([BOX_FAMILIES[name].make_box()] * int(count))  # type: ignore[call-overload]
    if len(boxes) < 1:
        raise TopologyError("hetero: give box counts, e.g. hetero:dgx-a100=2,dgx-h100=2")
    cluster_opts = {k: v for k, v in options.items() if k in CLUSTER_PARAMS}
    return build_cluster(boxes, fabric_from_options(cluster_opts, Fabric("switch")), "hetero")


def _fabric_default(fabric: Fabric, what: str) -> str:
    """The fabric a family's clusters get without ``fabric=``, as ``topo list --options`` shows it."""
    if fabric.kind == "rail" and fabric.rails:
        names = fabric.switch_names or "rail"
        return f"{what}rail over {fabric.rails} switches ({', '.join(f'{names}{r}' for r in range(fabric.rails))})"
    if fabric.kind == "rail":
        return f"{what}rail (one rail switch per NIC port)"
    if fabric.kind == "switch":
        return f"{what}switch (one switch {fabric.switch_names or 'fabric'!r} for every port)"
    return what + fabric.kind


def _family_params(fam: BoxFamily) -> dict[str, Param]:
    """A family's options and the cluster options, with the family's own fabric default shown."""
    params = {**fam.params, **CLUSTER_PARAMS}
    fabric = CLUSTER_PARAMS["fabric"]
    params["fabric"] = Param(fabric.parse, fam.fabric.kind, f"{fabric.help}; default: {_fabric_default(fam.fabric, '')}")
    if fam.fabric.rails:
        params["rails"] = Param(CLUSTER_PARAMS["rails"].parse, fam.fabric.rails, "rail fabric: rail switches")
    return params


BUILTINS: dict[str, Builtin] = {
    name: Builtin(name, fam.summary, _family_params(fam), _family_builder(fam))
    for name, fam in BOX_FAMILIES.items()
}
BUILTINS.update({
    "hetero": Builtin(
        "hetero",
        "a cluster mixing box types, e.g. hetero:dgx-a100=2,dgx-h100=2",
        {**{name: Param(count_option(0), 0, f"number of {name} boxes") for name in BOX_FAMILIES},
         **{k: p for k, p in CLUSTER_PARAMS.items() if k not in ("nodes", "fabric")},
         "fabric": Param(CLUSTER_PARAMS["fabric"].parse, "switch", CLUSTER_PARAMS["fabric"].help + "; default: "
                         + _fabric_default(Fabric("switch"), ""))},
        hetero,
    ),
    "ring": Builtin(
        "ring",
        "bidirectional ring",
        {"n": Param(count_option(2), 8, "compute nodes"), "bw": Param(_bw, Fraction(100), "GB/s each way")},
        ring,
    ),
    "torus": Builtin(
        "torus",
        "wrap-around torus (TPU-like 2D/3D), e.g. dims=4x4x4",
        {"dims": Param(_dims, (4, 4), "sizes per dimension, e.g. 4x4x2"), "bw": Param(_bw, Fraction(100), "GB/s each way")},
        torus,
    ),
    "hypercube": Builtin(
        "hypercube",
        "2^dim compute nodes, links along every dimension",
        {"dim": Param(count_option(1), 3, "dimensions"), "bw": Param(_bw, Fraction(100), "GB/s each way")},
        hypercube,
    ),
    "fully-connected": Builtin(
        "fully-connected",
        "direct link between every pair",
        {"n": Param(count_option(2), 8, "compute nodes"), "bw": Param(_bw, Fraction(100), "GB/s each way per pair")},
        fully_connected,
    ),
    "switch": Builtin(
        "switch",
        "star: every compute node on one switch",
        {"n": Param(count_option(2), 8, "compute nodes"), "bw": Param(_bw, Fraction(100), "GB/s each way per port")},
        star_switch,
    ),
})


def did_you_mean(word: str, choices) -> str | None:
    """The choice closest to a mistyped ``word`` (difflib), or None when none is close."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def build_builtin(name: str, options: dict[str, str]) -> Topology:
    """Build built-in ``name`` from string options; unknown names or keys raise TopologyError."""
    if name not in BUILTINS:
        close = did_you_mean(name, BUILTINS)
        raise TopologyError(f"unknown topology {name!r}: not a built-in and not a file; "
                            + (f"did you mean {close}? " if close else f"built-ins: {', '.join(sorted(BUILTINS))} ")
                            + "(`forestcoll topo list` lists the built-ins; a file is .json, .yaml or .xml)")
    spec = BUILTINS[name]
    kwargs = {}
    for key, text in options.items():
        if key not in spec.params:
            close = did_you_mean(key, spec.params)
            raise TopologyError(f"{name}: unknown option {key!r}; "
                                + (f"did you mean {close}? " if close else "")
                                + f"valid options: {', '.join(spec.params) or 'none'}")
        kwargs[key] = spec.params[key].parse(text, f"{name}:{key}")
    topo = spec.build(**kwargs)
    label = name + (":" + ",".join(f"{k}={v}" for k, v in options.items()) if options else "")
    return topo.renamed(label)
