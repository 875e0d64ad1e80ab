"""Clusters: boxes joined through their network ports by a fabric model.

A :class:`Box` is one machine (a :class:`Topology` with unprefixed names) plus
its network *ports*: the nodes that attach to the network (a NIC, or a GPU
directly) and the bandwidth of each port, in rail order.  :func:`build_cluster`
names box ``b``'s nodes ``n{b}.<name>``, records ``n{b}`` as their box (and the
boxes' GPU when they all have the same one), and joins the ports:

* ``switch``      one non-blocking switch ``fabric`` that every port joins;
* ``rail``        rail-optimised: port p of every box joins rail switch p mod R
                  (R = ``rails``, default the number of ports per box);
* ``leaf-spine``  (alias ``fat-tree``) two tiers: leaf switches serve
                  ``leaf_ports`` ports each, in box order, and reach each of the
                  ``spines`` spines with (their port bandwidth) / (``oversub`` *
                  spines) each way;
* ``mesh``        direct-connect: no switch; the port of box b with offset d is
                  cabled to the port of box b+d with offset -d, offsets taken in
                  the order +1, -1, +2, -2, ... (mod the number of boxes).

Every link carries its bandwidth both ways.  The cluster declares the
automorphisms that are plain to see (shifting identical boxes, and each
box's own symmetries applied to all boxes alike when the fabric allows it), so
the algorithms can exploit them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from forestcoll.errors import TopologyError
from forestcoll.limits import MAX_NODES, MAX_RANKS, check_count
from forestcoll.topology.device import common_gpu
from forestcoll.topology.fabrics import FABRICS
from forestcoll.topology.model import Link, Node, Topology, make_topology

__all__ = ["FABRICS", "Box", "Fabric", "Port", "build_cluster"]



@dataclass(frozen=True)
class Port:
    """A network attachment of a box: ``node`` joins the fabric with ``bandwidth`` GB/s each way."""

    node: str
    bandwidth: Fraction
    name: str = ""


@dataclass(frozen=True)
class Box:
    """One machine: its topology (names without a box prefix) and its network ports in rail order."""

    topology: Topology
    ports: tuple[Port, ...] = ()
    kind: str = "box"
    warnings: tuple[str, ...] = field(default=(), compare=False)  # what an importer found implausible
    notes: tuple[str, ...] = field(default=(), compare=False)  # what an import option did (or that it did nothing)


@dataclass(frozen=True)
class Fabric:
    """How boxes are joined; see the module docstring."""

    kind: str = "switch"
    rails: int | None = None
    oversub: Fraction = Fraction(1)
    spines: int = 2
    leaf_ports: int | None = None
    switch_names: str = ""  # prefix for switch/rail switch names (default: "fabric" / "rail")
    options: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in FABRICS:
            raise TopologyError(f"unknown fabric {self.kind!r}; choose one of {', '.join(FABRICS)}")


def _box_perm_images(box: Box) -> list[tuple[dict[str, str], list[int]]]:
    """Declared symmetries of a box as (node map, port permutation), when they map ports to ports."""
    topo = box.topology
    names = [n.name for n in topo.nodes]
    out = []
    for perm in topo.symmetries:
        node_map = {names[i]: names[j] for i, j in enumerate(perm)}
        # ports at the same node are matched in order
        by_node: dict[str, list[int]] = {}
        for i, p in enumerate(box.ports):
            by_node.setdefault(p.node, []).append(i)
        port_perm = [0] * len(box.ports)
        ok = True
        for node, idxs in by_node.items():
            target = by_node.get(node_map[node], [])
            if len(target) != len(idxs) or any(box.ports[a].bandwidth != box.ports[b].bandwidth for a, b in zip(idxs, target)):
                ok = False
                break
            for a, b in zip(idxs, target):
                port_perm[a] = b
        if ok:
            out.append((node_map, port_perm))
    return out


def build_cluster(
    boxes: Sequence[Box], fabric: Fabric | None = None, name: str = "", prune_single: bool = False
) -> Topology:
    """Replicate / join ``boxes`` with ``fabric``; one box alone needs no fabric.

    ``prune_single``: with a single box, drop port nodes that are switches with
    no other purpose (the ForestColl evaluation models omit NICs for one box).
    """
    if not boxes:
        raise TopologyError("a cluster needs at least one box")
    check_count(sum(box.topology.num_compute for box in boxes), "compute nodes of the cluster", MAX_RANKS)
    check_count(sum(len(box.topology.nodes) for box in boxes), "nodes of the cluster", MAX_NODES)
    fabric = fabric or Fabric()
    nodes: list[Node] = []
    links: list[Link] = []
    for b, box in enumerate(boxes):
        prefix = f"n{b}."
        drop = set()
        if prune_single and len(boxes) == 1:
            drop = {p.node for p in box.ports if box.topology.kind(p.node) == "switch"}
        nodes.extend(Node(prefix + n.name, n.kind, f"n{b}") for n in box.topology.nodes if n.name not in drop)
        links.extend(
            Link(prefix + lk.src, prefix + lk.dst, lk.bandwidth, lk.cls, lk.latency_us)
            for lk in box.topology.links
            if lk.src not in drop and lk.dst not in drop
        )
    symmetries: list[dict[str, str]] = []
    if len(boxes) > 1:
        for i, box in enumerate(boxes):
            if not box.ports:
                raise TopologyError(f"box {i} ({box.kind}) has no network port to join the other boxes")
        fab_nodes, fab_links, port_switch = _fabric(boxes, fabric)
        nodes.extend(fab_nodes)
        links.extend(fab_links)
        symmetries = _cluster_symmetries(boxes, fabric, port_switch)
    else:
        for node_map, _ in _box_perm_images(boxes[0]):
            symmetries.append({f"n0.{a}": f"n0.{b}" for a, b in node_map.items() if a != b and f"n0.{a}" in {n.name for n in nodes}})
    try:
        return make_topology(nodes, links, name, symmetries, common_gpu(box.topology.gpu for box in boxes))
    except TopologyError as exc:
        raise TopologyError(f"{name or 'cluster'}: {exc}") from None


# ----- fabrics ---------------------------------------------------------------------------------


def _fabric(boxes: Sequence[Box], fabric: Fabric):
    """Fabric switches, their links, and for rail/switch fabrics port (box, index) -> switch name."""
    kind = "leaf-spine" if fabric.kind == "fat-tree" else fabric.kind
    nodes: list[Node] = []
    links: list[Link] = []
    port_switch: dict[tuple[int, int], str] = {}

    def duplex(a: str, b: str, bw: Fraction, cls: str = "net") -> None:
        links.append(Link(a, b, bw, cls))
        links.append(Link(b, a, bw, cls))

    if kind == "switch":
        sw = fabric.switch_names or "fabric"
        nodes.append(Node(sw, "switch"))
        for b, box in enumerate(boxes):
            for i, p in enumerate(box.ports):
                duplex(f"n{b}.{p.node}", sw, p.bandwidth)
                port_switch[(b, i)] = sw
    elif kind == "rail":
        rails = fabric.rails or max(len(box.ports) for box in boxes)
        if rails < 1:
            raise TopologyError("rail fabric: rails must be >= 1")
        prefix = fabric.switch_names or "rail"
        for r in range(rails):
            nodes.append(Node(f"{prefix}{r}", "switch"))
        for b, box in enumerate(boxes):
            for i, p in enumerate(box.ports):
                sw = f"{prefix}{i % rails}"
                duplex(f"n{b}.{p.node}", sw, p.bandwidth)
                port_switch[(b, i)] = sw
    elif kind == "leaf-spine":
        per_box = max(len(box.ports) for box in boxes)
        leaf_ports = fabric.leaf_ports or per_box * max(1, 32 // max(1, per_box))
        if leaf_ports < 1 or fabric.spines < 1:
            raise TopologyError("leaf-spine fabric: leaf_ports and spines must be >= 1")
        if fabric.oversub <= 0:
            raise TopologyError("leaf-spine fabric: oversub must be > 0")
        flat = [(b, i, p) for b, box in enumerate(boxes) for i, p in enumerate(box.ports)]
        nleaves = -(-len(flat) // leaf_ports)
        for s in range(fabric.spines):
            nodes.append(Node(f"spine{s}", "switch"))
        for leaf in range(nleaves):
            nodes.append(Node(f"leaf{leaf}", "switch"))
            members = flat[leaf * leaf_ports : (leaf + 1) * leaf_ports]
            down = Fraction(0)
            for b, i, p in members:
                duplex(f"n{b}.{p.node}", f"leaf{leaf}", p.bandwidth)
                port_switch[(b, i)] = f"leaf{leaf}"
                down += p.bandwidth
            for s in range(fabric.spines):
                duplex(f"leaf{leaf}", f"spine{s}", down / (fabric.oversub * fabric.spines))
    else:  # mesh
        n = len(boxes)
        counts = {len(box.ports) for box in boxes}
        if len(counts) != 1:
            raise TopologyError("mesh fabric: every box needs the same number of ports")
        offsets = _mesh_offsets(n, counts.pop())
        where = {(d, o): i for i, (d, o) in enumerate(offsets)}
        for b, box in enumerate(boxes):
            for i, (d, o) in enumerate(offsets):
                j = where.get((n - d, o))
                c = (b + d) % n
                if j is None or d > n - d or (d == n - d and b > c):
                    continue  # no partner port, or the cable is added from the other end
                p, q = box.ports[i], boxes[c].ports[j]
                duplex(f"n{b}.{p.node}", f"n{c}.{q.node}", min(p.bandwidth, q.bandwidth))
    return nodes, links, port_switch


def _mesh_offsets(n: int, ports: int) -> list[tuple[int, int]]:
    """(box offset, occurrence) of each port: offsets +1, -1, +2, -2, ... mod n, repeated when ports > n-1.

    The port with offset d and occurrence o is cabled to the port with offset
    n-d and the same occurrence on box b+d; a port whose partner offset is
    missing (an odd count) stays unused.
    """
    uniq: list[int] = []
    for k in range(1, n // 2 + 1):
        uniq.append(k)
        if n - k != k:
            uniq.append(n - k)
    seen: dict[int, int] = {}
    out = []
    for i in range(ports):
        d = uniq[i % len(uniq)]
        out.append((d, seen.get(d, 0)))
        seen[d] = seen.get(d, 0) + 1
    return out


def _cluster_symmetries(boxes: Sequence[Box], fabric: Fabric, port_switch) -> list[dict[str, str]]:
    """Box shifts among identical boxes, and box symmetries lifted to every box when the fabric allows."""
    kind = "leaf-spine" if fabric.kind == "fat-tree" else fabric.kind
    n = len(boxes)
    kinds = [box.kind for box in boxes]
    syms: list[dict[str, str]] = []

    def box_map(perm: Sequence[int]) -> dict[str, str]:
        m: dict[str, str] = {}
        for b, c in enumerate(perm):
            if b != c:
                for node in boxes[b].topology.nodes:
                    m[f"n{b}.{node.name}"] = f"n{c}.{node.name}"
        return m

    same = len(set(kinds)) == 1
    if kind in ("switch", "rail") or (kind == "mesh" and same):
        if kind == "mesh":
            syms.append(box_map([(b + 1) % n for b in range(n)]))
        else:
            for k in sorted(set(kinds)):
                group = [b for b in range(n) if kinds[b] == k]
                if len(group) > 1:
                    perm = list(range(n))
                    for i, b in enumerate(group):
                        perm[b] = group[(i + 1) % len(group)]
                    syms.append(box_map(perm))
    elif kind == "leaf-spine" and same:
        per_box = len(boxes[0].ports)
        leaf_ports = fabric.leaf_ports or per_box * max(1, 32 // max(1, per_box))
        if per_box and leaf_ports % per_box == 0:
            per_leaf = leaf_ports // per_box
            if n % per_leaf == 0 and n > per_leaf:
                m = box_map([(b + per_leaf) % n for b in range(n)])
                leaves = n // per_leaf
                m.update({f"leaf{i}": f"leaf{(i + 1) % leaves}" for i in range(leaves)})
                syms.append(m)
            if per_leaf > 1 and n > 1:
                perm = []
                for b in range(n):
                    start = (b // per_leaf) * per_leaf
                    size = min(per_leaf, n - start)  # the last leaf may hold fewer boxes
                    perm.append(start + (b - start + 1) % size)
                syms.append(box_map(perm))
    # lift each box symmetry to all boxes of that kind at once
    if same and kind in ("switch", "rail", "leaf-spine"):
        box = boxes[0]
        for node_map, port_perm in _box_perm_images(box):
            lifted = {f"n{b}.{a}": f"n{b}.{c}" for b in range(n) for a, c in node_map.items() if a != c}
            if kind == "rail":
                rail_map: dict[str, str] = {}
                consistent = True
                for i, j in enumerate(port_perm):
                    src, dst = port_switch[(0, i)], port_switch[(0, j)]
                    if rail_map.setdefault(src, dst) != dst:
                        consistent = False
                if not consistent or len(set(rail_map.values())) != len(rail_map):
                    continue
                lifted.update({a: c for a, c in rail_map.items() if a != c})
            elif kind == "leaf-spine":
                if any(port_switch[(0, i)] != port_switch[(0, j)] for i, j in enumerate(port_perm)):
                    continue
            syms.append(lifted)
    return syms
