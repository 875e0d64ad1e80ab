"""Built-in topologies, named ``NAME[:key=value,...]``.

Each builder is a pure function from parameters to a validated :class:`Topology`
that also declares its obvious automorphisms (box shifts, rotations) so the
algorithms can exploit symmetry.  Compute nodes are numbered box by box.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from forestcoll.errors import ForestCollError, TopologyError
from forestcoll.rational import format_rational, parse_bandwidth
from forestcoll.topology.model import Topology, TopologyBuilder

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


def _count(lo: int) -> Callable[[str, str], int]:
    def parse(text: str, what: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise TopologyError(f"{what}: expected an integer, got {text!r}") from None
        if value < lo:
            raise TopologyError(f"{what}: must be >= {lo}, got {value}")
        return value

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
    return dims


def dgx_a100(nodes: int = 1, nvlink_bw: Fraction = Fraction(300), nic_bw: Fraction = Fraction(25)) -> Topology:
    """DGX-A100 boxes: 8 GPUs on one NVSwitch; with >1 box, a NIC per GPU and two shared IB switches.

    GPU i's NIC joins IB switch i mod 2 (as in the ForestColl evaluation).
    """
    b = TopologyBuilder(f"dgx-a100:nodes={nodes}")
    gpus = 8
    for box in range(nodes):
        for i in range(gpus):
            b.compute(f"n{box}.gpu{i}")
        nvs = b.switch(f"n{box}.nvswitch")
        for i in range(gpus):
            b.duplex(f"n{box}.gpu{i}", nvs, nvlink_bw, "nvlink")
        if nodes > 1:
            for i in range(gpus):
                b.switch(f"n{box}.nic{i}")
                b.duplex(f"n{box}.gpu{i}", f"n{box}.nic{i}", nic_bw, "pcie")
    if nodes > 1:
        for s in range(2):
            b.switch(f"ib{s}")
        for box in range(nodes):
            for i in range(gpus):
                b.duplex(f"n{box}.nic{i}", f"ib{i % 2}", nic_bw, "ib")
    _box_shift(b, nodes, [f"gpu{i}" for i in range(gpus)] + ["nvswitch"] + ([f"nic{i}" for i in range(gpus)] if nodes > 1 else []))
    rot = {}
    for box in range(nodes):
        for i in range(gpus):
            rot[f"n{box}.gpu{i}"] = f"n{box}.gpu{(i + 1) % gpus}"
            if nodes > 1:
                rot[f"n{box}.nic{i}"] = f"n{box}.nic{(i + 1) % gpus}"
    if nodes > 1:
        rot.update({"ib0": "ib1", "ib1": "ib0"})
    b.symmetry(rot)
    return b.build()


def mi250(nodes: int = 1, xgmi_bw: Fraction = Fraction(50), nic_bw: Fraction = Fraction(16)) -> Topology:
    """AMD MI250 boxes: 16 GCDs joined by xGMI bundles; with >1 box every GCD joins one shared IB switch."""
    b = TopologyBuilder(f"mi250:nodes={nodes}")
    n = len(MI250_XGMI_LINKS)
    for box in range(nodes):
        for i in range(n):
            b.compute(f"n{box}.gcd{i}")
        for i in range(n):
            for j in range(n):
                if MI250_XGMI_LINKS[i][j]:
                    b.link(f"n{box}.gcd{i}", f"n{box}.gcd{j}", MI250_XGMI_LINKS[i][j] * xgmi_bw, "xgmi")
    if nodes > 1:
        ib = b.switch("ib")
        for box in range(nodes):
            for i in range(n):
                b.duplex(f"n{box}.gcd{i}", ib, nic_bw, "ib")
    _box_shift(b, nodes, [f"gcd{i}" for i in range(n)])
    for perm in MI250_GCD_SYMMETRIES:
        b.symmetry({f"n{box}.gcd{i}": f"n{box}.gcd{perm[i]}" for box in range(nodes) for i in range(n)})
    return b.build()


def _box_shift(b: TopologyBuilder, nodes: int, members: list[str]) -> None:
    if nodes > 1:
        b.symmetry({f"n{box}.{m}": f"n{(box + 1) % nodes}.{m}" for box in range(nodes) for m in members})


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


BUILTINS: dict[str, Builtin] = {
    "dgx-a100": Builtin(
        "dgx-a100",
        "NVIDIA DGX-A100: 8 GPUs x 300 GB/s NVSwitch; boxes joined by 8 x 25 GB/s NICs on 2 IB switches",
        {
            "nodes": Param(_count(1), 1, "number of boxes"),
            "nvlink_bw": Param(_bw, Fraction(300), "GPU<->NVSwitch GB/s each way"),
            "nic_bw": Param(_bw, Fraction(25), "GPU<->NIC and NIC<->IB GB/s each way"),
        },
        dgx_a100,
    ),
    "mi250": Builtin(
        "mi250",
        "AMD MI250: 16 GCDs joined by 50 GB/s xGMI bundles; boxes joined by 16 GB/s per GCD to one IB switch",
        {
            "nodes": Param(_count(1), 1, "number of boxes"),
            "xgmi_bw": Param(_bw, Fraction(50), "GB/s per xGMI link each way"),
            "nic_bw": Param(_bw, Fraction(16), "GCD<->IB switch GB/s each way"),
        },
        mi250,
    ),
    "ring": Builtin(
        "ring",
        "bidirectional ring",
        {"n": Param(_count(2), 8, "compute nodes"), "bw": Param(_bw, Fraction(100), "GB/s each way")},
        ring,
    ),
    "torus": Builtin(
        "torus",
        "wrap-around torus, e.g. dims=4x4",
        {"dims": Param(_dims, (4, 4), "sizes per dimension, e.g. 4x4x2"), "bw": Param(_bw, Fraction(100), "GB/s each way")},
        torus,
    ),
    "fully-connected": Builtin(
        "fully-connected",
        "direct link between every pair",
        {"n": Param(_count(2), 8, "compute nodes"), "bw": Param(_bw, Fraction(100), "GB/s each way per pair")},
        fully_connected,
    ),
    "switch": Builtin(
        "switch",
        "star: every compute node on one switch",
        {"n": Param(_count(2), 8, "compute nodes"), "bw": Param(_bw, Fraction(100), "GB/s each way per port")},
        star_switch,
    ),
}


def build_builtin(name: str, options: dict[str, str]) -> Topology:
    """Build built-in ``name`` from string options; unknown names or keys raise TopologyError."""
    if name not in BUILTINS:
        raise TopologyError(f"unknown topology {name!r}; built-ins: {', '.join(sorted(BUILTINS))} (or a .json file)")
    spec = BUILTINS[name]
    kwargs = {}
    for key, text in options.items():
        if key not in spec.params:
            raise TopologyError(
                f"{name}: unknown option {key!r}; valid options: {', '.join(spec.params) or 'none'}"
            )
        kwargs[key] = spec.params[key].parse(text, f"{name}:{key}")
    topo = spec.build(**kwargs)
    label = name + (":" + ",".join(f"{k}={v}" for k, v in options.items()) if options else "")
    return topo.renamed(label)
