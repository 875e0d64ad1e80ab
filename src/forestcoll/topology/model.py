"""The fabric model: compute and switch nodes joined by directed links.

A :class:`Topology` is immutable plain data.  Bandwidths are exact rationals in
GB/s (10^9 bytes per second) per direction; parallel links between the same
pair of nodes add up.  Compute nodes are the ranks, numbered in the order they
appear in ``nodes``.  Switches only forward data: they neither copy nor reduce.

Nodes may belong to a *box* (one machine of a cluster: ``Node.box``), recorded
by whoever builds the fabric (the cluster builder, the importers, a file's
per-node ``box``); forestcoll never guesses it from names.  Box membership
tells the simulator which routes stay inside a machine and the baselines
which ranks share one.

``symmetries`` optionally lists automorphisms of the fabric (each a permutation
of node indices: ``perm[i]`` is the image of node ``i``) that the algorithms may
exploit; every one is checked to preserve node kinds and link bandwidths.

``gpu`` optionally says what GPU the compute nodes are (:mod:`forestcoll.topology.device`: vendor, SMs / CUs),
recorded by the builder of the fabric like ``box``; the MSCCL exporters read their runtime and resident-block
defaults from it.  It is not part of the fabric's equality or fingerprint.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

from forestcoll.errors import ForestCollError, TopologyError
from forestcoll.limits import MAX_NODES, MAX_RANKS, check_count
from forestcoll.topology.device import Gpu
from forestcoll.units import parse_bandwidth, parse_latency

__all__ = [
    "COMPUTE", "NODE_KINDS", "SWITCH", "Link", "Node", "Topology", "TopologyBuilder", "fingerprint", "from_networkx",
    "make_topology", "shuffled", "to_networkx",
]

COMPUTE = "compute"
SWITCH = "switch"
NODE_KINDS = (COMPUTE, SWITCH)


@dataclass(frozen=True)
class Node:
    """A named node: ``kind`` is ``"compute"`` (a rank) or ``"switch"`` (forwards only); ``box`` names the
    machine it belongs to (None: not part of a box, e.g. a cluster's network switches or a flat fabric)."""

    name: str
    kind: str = COMPUTE
    box: str | None = None

    @property
    def local_name(self) -> str:
        """The name within its box: without the ``<box>.`` prefix the cluster builder adds."""
        prefix = f"{self.box}."
        return self.name[len(prefix):] if self.box is not None and self.name.startswith(prefix) else self.name


@dataclass(frozen=True)
class Link:
    """One directed link ``src -> dst`` of ``bandwidth`` GB/s; ``cls`` labels its technology (nvlink, ib, ...);
    ``latency_us`` is its one-way latency for the simulator (None: the default of its class)."""

    src: str
    dst: str
    bandwidth: Fraction
    cls: str = ""
    latency_us: Fraction | None = None


@dataclass(frozen=True, eq=False)
class Topology:
    """A validated fabric.  Build one with :class:`TopologyBuilder` or :func:`make_topology`."""

    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    name: str = ""
    symmetries: tuple[tuple[int, ...], ...] = field(default=())
    gpu: Gpu | None = None  # what the compute nodes are (None: not said)

    # ----- derived views (computed once) ---------------------------------
    @cached_property
    def index(self) -> dict[str, int]:
        """Node name -> position in ``nodes``."""
        return {n.name: i for i, n in enumerate(self.nodes)}

    @cached_property
    def compute_nodes(self) -> tuple[str, ...]:
        """Names of the compute nodes in rank order."""
        return tuple(n.name for n in self.nodes if n.kind == COMPUTE)

    @cached_property
    def switch_nodes(self) -> tuple[str, ...]:
        """Names of the switch nodes."""
        return tuple(n.name for n in self.nodes if n.kind == SWITCH)

    @cached_property
    def is_compute(self) -> tuple[bool, ...]:
        """``is_compute[i]`` tells whether node ``i`` is a compute node."""
        return tuple(n.kind == COMPUTE for n in self.nodes)

    @cached_property
    def capacity(self) -> dict[tuple[str, str], Fraction]:
        """Total bandwidth of each ordered node pair that has links (parallel links summed)."""
        cap: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
        for link in self.links:
            cap[link.src, link.dst] += link.bandwidth
        return dict(cap)

    @cached_property
    def arcs(self) -> tuple[tuple[int, int, Fraction], ...]:
        """Merged directed arcs as ``(tail index, head index, bandwidth)``, sorted by indices."""
        idx = self.index
        return tuple(sorted((idx[a], idx[b], bw) for (a, b), bw in self.capacity.items()))

    @cached_property
    def boxes(self) -> dict[str, tuple[str, ...]]:
        """Box name -> its nodes' names, boxes and nodes in the order they appear (empty for a flat fabric)."""
        out: dict[str, list[str]] = {}
        for n in self.nodes:
            if n.box is not None:
                out.setdefault(n.box, []).append(n.name)
        return {b: tuple(names) for b, names in out.items()}

    @cached_property
    def node_bandwidth(self) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
        """(bandwidth into, bandwidth out of) every node, by index."""
        into = [Fraction(0)] * len(self.nodes)
        out = [Fraction(0)] * len(self.nodes)
        for u, v, bw in self.arcs:
            out[u] += bw
            into[v] += bw
        return tuple(into), tuple(out)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Topology):
            return NotImplemented
        return (
            [(n.name, n.kind, n.box) for n in self.nodes] == [(n.name, n.kind, n.box) for n in other.nodes]
            and sorted((lk.src, lk.dst, lk.bandwidth, lk.cls) for lk in self.links)
            == sorted((lk.src, lk.dst, lk.bandwidth, lk.cls) for lk in other.links)
        )

    def __hash__(self) -> int:
        return hash((tuple(self.nodes), len(self.links)))

    @property
    def num_compute(self) -> int:
        return len(self.compute_nodes)

    def kind(self, name: str) -> str:
        """Kind of the node called ``name``."""
        return self.nodes[self.index[name]].kind

    def reversed(self) -> Topology:
        """The same fabric with every link turned around (used for reduce-scatter and reduce)."""
        return Topology(
            nodes=self.nodes,
            links=tuple(Link(lk.dst, lk.src, lk.bandwidth, lk.cls, lk.latency_us) for lk in self.links),
            name=self.name,
            symmetries=self.symmetries,
            gpu=self.gpu,
        )

    def is_symmetric(self) -> bool:
        """True when every link pair has equal bandwidth both ways (then reversing changes nothing)."""
        cap = self.capacity
        return all(cap.get((b, a)) == bw for (a, b), bw in cap.items())

    def renamed(self, name: str) -> Topology:
        return Topology(self.nodes, self.links, name, self.symmetries, self.gpu)


class TopologyBuilder:
    """Accumulates nodes and links, then :meth:`build` validates them into a :class:`Topology`."""

    def __init__(self, name: str = "", gpu: Gpu | None = None) -> None:
        self.name = name
        self.gpu = gpu
        self._nodes: list[Node] = []
        self._links: list[Link] = []
        self._symmetries: list[dict[str, str]] = []

    def compute(self, name: str, box: str | None = None) -> str:
        """Add a compute node (in machine ``box``, if given) and return its name."""
        self._nodes.append(Node(name, COMPUTE, box))
        return name

    def switch(self, name: str, box: str | None = None) -> str:
        """Add a switch node (in machine ``box``, if given) and return its name."""
        self._nodes.append(Node(name, SWITCH, box))
        return name

    def link(self, src: str, dst: str, bandwidth: object, cls: str = "", latency_us: object = None) -> None:
        """Add one directed link (``latency_us``: its one-way latency for the simulator, default by class)."""
        try:
            bw = parse_bandwidth(bandwidth, f"link {src} -> {dst} bandwidth")
            lat = None if latency_us is None else parse_latency(latency_us, f"link {src} -> {dst} latency_us")
        except ForestCollError as exc:
            raise TopologyError(str(exc)) from None
        self._links.append(Link(src, dst, bw, cls, lat))

    def duplex(self, a: str, b: str, bandwidth: object, cls: str = "", latency_us: object = None) -> None:
        """Add a two-way link: ``bandwidth`` GB/s in each direction."""
        self.link(a, b, bandwidth, cls, latency_us)
        self.link(b, a, bandwidth, cls, latency_us)

    def symmetry(self, mapping: Mapping[str, str]) -> None:
        """Declare an automorphism as a name map (names left out map to themselves)."""
        self._symmetries.append(dict(mapping))

    def build(self) -> Topology:
        return make_topology(self._nodes, self._links, self.name, self._symmetries, self.gpu)


def make_topology(
    nodes: Iterable[Node],
    links: Iterable[Link],
    name: str = "",
    symmetries: Iterable[Mapping[str, str] | Sequence[int]] = (),
    gpu: Gpu | None = None,
) -> Topology:
    """Validate nodes, links and declared symmetries and return a :class:`Topology`.

    Raises :class:`TopologyError` with a one-line message naming the offending element.
    """
    nodes = tuple(nodes)
    links = tuple(links)
    _check_nodes(nodes)
    index = {n.name: i for i, n in enumerate(nodes)}
    _check_links(links, index)
    perms = []
    for k, sym in enumerate(symmetries):
        if isinstance(sym, Mapping):
            for a, b in sym.items():
                if a not in index or b not in index:
                    raise TopologyError(f"symmetry {k}: unknown node {a if a not in index else b!r}")
            perms.append(tuple(index[sym.get(n.name, n.name)] for n in nodes))
        else:
            perms.append(tuple(int(i) for i in sym))
    topo = Topology(nodes, links, name, tuple(perms), gpu)
    _check_connected(topo)
    _check_symmetries(topo)
    return topo


def _check_nodes(nodes: tuple[Node, ...]) -> None:
    check_count(len(nodes), "nodes of the topology", MAX_NODES)
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        if not isinstance(node.name, str) or not node.name.strip():
            raise TopologyError(f"node {i}: name must be a non-empty string")
        if node.kind not in NODE_KINDS:
            raise TopologyError(f"node {node.name!r}: kind must be 'compute' or 'switch', got {node.kind!r}")
        if node.box is not None and (not isinstance(node.box, str) or not node.box.strip()):
            raise TopologyError(f"node {node.name!r}: box must be a non-empty string or None")
        if node.name in seen:
            raise TopologyError(f"node {node.name!r} is defined twice")
        seen.add(node.name)
    ncomp = check_count(sum(n.kind == COMPUTE for n in nodes), "compute nodes of the topology", MAX_RANKS)
    if ncomp < 2:
        raise TopologyError(f"the topology has {ncomp} compute node(s); at least 2 are needed")


def _check_links(links: tuple[Link, ...], index: Mapping[str, int]) -> None:
    for i, link in enumerate(links):
        for end in (link.src, link.dst):
            if end not in index:
                raise TopologyError(f"link {i} ({link.src} -> {link.dst}): unknown node {end!r}")
        if link.src == link.dst:
            raise TopologyError(f"link {i}: self-loop on {link.src!r}")
        if not isinstance(link.bandwidth, Fraction) or link.bandwidth <= 0:
            raise TopologyError(f"link {i} ({link.src} -> {link.dst}): bandwidth must be a positive number")


def _reach(n: int, adj: Sequence[Sequence[int]], start: int) -> list[bool]:
    seen = [False] * n
    seen[start] = True
    queue = deque([start])
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            if not seen[v]:
                seen[v] = True
                queue.append(v)
    return seen


def _check_connected(topo: Topology) -> None:
    """Every compute node must reach every other one (through switches if needed)."""
    n = len(topo.nodes)
    fwd: list[list[int]] = [[] for _ in range(n)]
    bwd: list[list[int]] = [[] for _ in range(n)]
    for u, v, _ in topo.arcs:
        fwd[u].append(v)
        bwd[v].append(u)
    comp = [i for i in range(n) if topo.is_compute[i]]
    first = comp[0]
    out = _reach(n, fwd, first)
    for c in comp:
        if not out[c]:
            raise TopologyError(
                f"disconnected fabric: compute node {topo.nodes[first].name!r} cannot reach {topo.nodes[c].name!r}"
            )
    back = _reach(n, bwd, first)
    for c in comp:
        if not back[c]:
            raise TopologyError(
                f"disconnected fabric: compute node {topo.nodes[c].name!r} cannot reach {topo.nodes[first].name!r}"
            )


def _check_symmetries(topo: Topology) -> None:
    n = len(topo.nodes)
    arcs = {(u, v): bw for u, v, bw in topo.arcs}
    for k, perm in enumerate(topo.symmetries):
        if sorted(perm) != list(range(n)):
            raise TopologyError(f"symmetry {k} is not a permutation of the {n} nodes")
        for i, j in enumerate(perm):
            if topo.nodes[i].kind != topo.nodes[j].kind:
                raise TopologyError(
                    f"symmetry {k} maps {topo.nodes[i].kind} {topo.nodes[i].name!r} to "
                    f"{topo.nodes[j].kind} {topo.nodes[j].name!r}"
                )
        for (u, v), bw in arcs.items():
            if arcs.get((perm[u], perm[v])) != bw:
                raise TopologyError(
                    f"symmetry {k} is not an automorphism: link {topo.nodes[u].name} -> {topo.nodes[v].name} "
                    f"({bw} GB/s) maps to {topo.nodes[perm[u]].name} -> {topo.nodes[perm[v]].name}"
                )


def to_networkx(topo: Topology):
    """A networkx DiGraph: node attributes ``kind`` (and ``box`` when set), edge attributes ``bandwidth``
    (Fraction, summed) and ``cls``."""
    import networkx as nx

    g = nx.DiGraph(name=topo.name)
    for node in topo.nodes:
        g.add_node(node.name, kind=node.kind, **({"box": node.box} if node.box is not None else {}))
    classes: dict[tuple[str, str], set[str]] = defaultdict(set)
    for link in topo.links:
        if link.cls:
            classes[link.src, link.dst].add(link.cls)
    for (a, b), bw in topo.capacity.items():
        g.add_edge(a, b, bandwidth=bw, cls="+".join(sorted(classes[a, b])))
    return g


def from_networkx(graph, name: str | None = None) -> Topology:
    """Build a Topology from a networkx (Multi)DiGraph or Graph.

    Nodes carry ``kind`` ("compute" by default) and optionally ``box``; edges carry ``bandwidth`` (or
    ``capacity``) and optionally ``cls``.  Undirected graphs get a link each way.
    """
    nodes = [Node(str(v), str(data.get("kind", COMPUTE)), None if data.get("box") is None else str(data["box"]))
             for v, data in graph.nodes(data=True)]
    links = []
    for a, b, data in graph.edges(data=True):
        raw = data.get("bandwidth", data.get("capacity"))
        if raw is None:
            raise TopologyError(f"edge {a} -> {b} has no 'bandwidth' attribute")
        bw = parse_bandwidth(raw, f"edge {a} -> {b} bandwidth")
        cls = str(data.get("cls", ""))
        links.append(Link(str(a), str(b), bw, cls))
        if not graph.is_directed():
            links.append(Link(str(b), str(a), bw, cls))
    return make_topology(nodes, links, name if name is not None else str(graph.graph.get("name", "")))


def fingerprint(topo: Topology) -> str:
    """``"sha256:<hex>"`` of the fabric a schedule depends on: the nodes (name, kind) and the exact bandwidth
    from each node to each other (parallel links summed), in a canonical order; names of the topology, boxes,
    link classes, latencies and declared symmetries do not count."""
    import hashlib

    bandwidth: dict[tuple[str, str], Fraction] = {}
    for lk in topo.links:
        bandwidth[(lk.src, lk.dst)] = bandwidth.get((lk.src, lk.dst), Fraction(0)) + lk.bandwidth
    lines = ["forestcoll-fabric 1"]
    lines += [f"node {n.name!r} {n.kind}" for n in sorted(topo.nodes, key=lambda n: n.name)]
    lines += [f"link {a!r} {b!r} {bw.numerator}/{bw.denominator}" for (a, b), bw in sorted(bandwidth.items())]
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def shuffled(topo: Topology, seed: int = 0, rename: bool = True) -> Topology:
    """The same fabric as a user's file might give it: nodes and links in a random order (seeded, so
    deterministic), declared symmetries dropped, and with ``rename`` every node called ``v<random number>``
    (boxes ``b<number>``).  For tests and benchmarks of symmetry detection."""
    import random

    rng = random.Random(seed)
    order = list(range(len(topo.nodes)))
    rng.shuffle(order)
    labels = list(range(len(topo.nodes)))
    rng.shuffle(labels)
    boxes = sorted({n.box for n in topo.nodes if n.box is not None})
    box_labels = list(range(len(boxes)))
    rng.shuffle(box_labels)
    box_name = {b: f"b{box_labels[i]}" for i, b in enumerate(boxes)}
    if rename:
        name = {n.name: f"v{labels[i]}" for i, n in enumerate(topo.nodes)}
    else:
        name = {n.name: n.name for n in topo.nodes}
    nodes = tuple(Node(name[topo.nodes[i].name], topo.nodes[i].kind,
                       (box_name[topo.nodes[i].box] if rename else topo.nodes[i].box) if topo.nodes[i].box else None)
                  for i in order)
    links = [Link(name[lk.src], name[lk.dst], lk.bandwidth, lk.cls, lk.latency_us) for lk in topo.links]
    rng.shuffle(links)
    return Topology(nodes, tuple(links), f"{topo.name} (shuffled{', renamed' if rename else ''})", gpu=topo.gpu)
