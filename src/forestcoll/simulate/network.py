"""The simulator's view of a fabric: links with bytes/s and latency, and routes between ranks.

Parallel links between the same two nodes act as one link with the summed
bandwidth and the smallest latency.  A link's latency is its ``latency_us`` when
the topology gives one, else the default of its class (:data:`CLASS_LATENCY_US`,
overridable per run).  Routes for algorithms that name only ranks (baselines,
MSCCL files) are shortest paths through switches, widest first; where no path
through switches alone exists (meshes without a switch, or a NIC on another
rail) the route may pass through other ranks' links, as NVLink-to-NIC
forwarding and peer-to-peer routing do.

Equal-cost routes (ECMP).  A rank pair's equal-cost routes (:meth:`Network.equal_routes`) are
:meth:`Network.route`'s and those as short and as wide that differ from it only in switches.
:func:`channel_routes` groups them by the links where they leave the sender's box and enter the
receiver's (the NIC ports): a connection on channel c takes port group c mod P (group 0 holds
:meth:`Network.route`'s own ports) and spreads its bytes evenly over that group's routes, the
average of a fabric's ECMP hashing over its spines.  The MSCCL model spreads every connection so;
the MSCCL++ model spreads every port-channel transfer between boxes over group 0 (the executor
drives one NIC port per GPU, the one :meth:`Network.route` leaves by), and the baselines every
transfer between boxes (:func:`forestcoll.simulate.baselines.pair_routes`, group 0 too).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from forestcoll.errors import UsageError
from forestcoll.limits import MAX_SIM_BANDWIDTH_RATIO
from forestcoll.topology import Topology

__all__ = ["CLASS_LATENCY_US", "GB", "Network", "Route", "build_network", "channel_routes", "load_network"]

Route = tuple[tuple[int, ...], float]  # link ids and latency (s)

GB = 1e9  # bandwidths are GB/s (10^9 bytes per second), as in nccl-tests

# One-way latency per link class, microseconds (assumptions; see docs/simulate.md).
CLASS_LATENCY_US: dict[str, float] = {
    "nvlink": 0.7,
    "c2c": 0.5,
    "xgmi": 1.0,
    "pcie": 1.0,
    "sys": 2.0,
    "net": 5.0,
    "ib": 5.0,
    "eth": 5.0,
    "link": 1.0,
    "": 1.0,
}


@dataclass
class Network:
    """Directed links between named nodes, with capacity in bytes/s and latency in seconds."""

    topology: Topology
    names: tuple[str, ...]
    link_of: dict[tuple[int, int], int]
    ends: list[tuple[int, int]]
    capacity: np.ndarray
    latency: np.ndarray
    ranks: tuple[str, ...]  # compute nodes in rank order
    _routes: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict, repr=False)
    _out: dict[int, list[int]] = field(default_factory=dict, repr=False)
    _box: list[str | None] = field(default_factory=list, repr=False)
    port_groups: dict = field(default_factory=dict, repr=False)  # a :func:`channel_routes` cache kept with the network

    @property
    def box(self) -> list[str | None]:
        """The box the topology records for every node (None outside boxes), by node id."""
        if not self._box:
            self._box.extend(n.box for n in self.topology.nodes)
        return self._box

    @property
    def out(self) -> dict[int, list[int]]:
        """Successors of every node, in id order."""
        if not self._out:
            for u, v in self.ends:
                self._out.setdefault(u, []).append(v)
        return self._out

    @property
    def index(self) -> Mapping[str, int]:
        return self.topology.index

    def path_links(self, path: Sequence[str]) -> tuple[tuple[int, ...], float]:
        """Link ids and total latency (s) of a path given by node names."""
        ids = []
        for name in path:
            if name not in self.index:
                raise UsageError(f"node {name!r} of a route is not in {self.topology.name or 'the topology'}")
        for a, b in zip(path, path[1:]):
            key = (self.index[a], self.index[b])
            if key not in self.link_of:
                raise UsageError(f"no link {a} -> {b} in {self.topology.name or 'the topology'}")
            ids.append(self.link_of[key])
        return tuple(ids), float(sum(self.latency[i] for i in ids))

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float]:
        """Links and latency of the route between ranks ``src`` and ``dst`` (rank numbers).

        Between ranks of one box: through that box's switches, else through its other
        ranks, else anywhere; between boxes: through switches, else anywhere.  Each
        choice is the fewest hops, then the widest."""
        key = (src, dst)
        if key not in self._routes:
            a, b = self.index[self.ranks[src]], self.index[self.ranks[dst]]
            box_of = self.box
            box = box_of[a]
            is_compute = self.topology.is_compute
            tries = []
            if box == box_of[b]:
                tries += [lambda v: not is_compute[v] and box_of[v] == box, lambda v: box_of[v] == box]
            tries += [lambda v: not is_compute[v], lambda v: True]
            path = None
            for allowed in tries:
                path = _widest_shortest(self, a, b, allowed)
                if path is not None:
                    break
            if path is None:
                raise UsageError(f"{self.ranks[dst]} cannot be reached from {self.ranks[src]}")
            self._routes[key] = tuple(self.link_of[(u, v)] for u, v in zip(path, path[1:]))
        ids = self._routes[key]
        return ids, float(sum(self.latency[i] for i in ids))

    def equal_routes(self, src: int, dst: int, limit: int = 16) -> list[tuple[tuple[int, ...], float]]:
        """The routes between ranks ``src`` and ``dst`` that are as short and as wide as :meth:`route` and differ
        from it only in switches (another NIC port, another spine; inside a box, only that box's switches):
        :meth:`route`'s own first, then the others by node names, at most ``limit``.  A route that passes
        through another rank has no alternatives here."""
        first = self.route(src, dst)
        ends = self.ends
        nodes = [ends[first[0][0]][0]] + [ends[i][1] for i in first[0]]
        is_compute = self.topology.is_compute
        if any(is_compute[v] for v in nodes[1:-1]):
            return [first]
        box_of = self.box
        box = box_of[nodes[0]] if all(box_of[v] == box_of[nodes[0]] for v in nodes) else None
        width = min(self.capacity[i] for i in first[0])
        found = self.fewest_hop_paths(nodes[0], nodes[-1],
                                      lambda v: not is_compute[v] and (box is None or box_of[v] == box), 4 * limit)
        others = []
        for path in found:
            if path == nodes or len(path) != len(nodes):
                continue
            links = tuple(self.link_of[(u, v)] for u, v in zip(path, path[1:]))
            if min(self.capacity[i] for i in links) >= width * (1 - 1e-12):
                others.append((tuple(self.names[v] for v in path), links))
        others.sort()
        return [first] + [(links, float(sum(self.latency[i] for i in links))) for _, links in others[: limit - 1]]

    def fewest_hop_paths(self, a: int, b: int, allowed, limit: int) -> list[list[int]]:
        """Up to ``limit`` fewest-hop paths (node ids) from a to b whose inner nodes are ``allowed``."""
        out = self.out
        dist = {a: 0}
        frontier = [a]
        while frontier and b not in dist:
            nxt = []
            for u in frontier:
                if u != a and not allowed(u):
                    continue
                for v in out.get(u, []):
                    if v not in dist:
                        dist[v] = dist[u] + 1
                        nxt.append(v)
            frontier = nxt
        if b not in dist:
            return []
        found: list[list[int]] = []
        stack = [[a]]
        while stack and len(found) < limit:
            path = stack.pop()
            u = path[-1]
            if u == b:
                found.append(path)
                continue
            if u != a and not allowed(u):
                continue
            for v in sorted(out.get(u, []), reverse=True):
                if dist.get(v) == dist[u] + 1 and (v == b or dist[v] < dist[b]):
                    stack.append(path + [v])
        return found

    def adjacent(self, src: int, dst: int) -> bool:
        """True when a link joins the two ranks directly or through switches of their own box."""
        a, b = self.index[self.ranks[src]], self.index[self.ranks[dst]]
        box_of, is_compute = self.box, self.topology.is_compute
        box = box_of[a]
        return _widest_shortest(self, a, b, lambda v: not is_compute[v] and box_of[v] == box) is not None


def build_network(topo: Topology, latency_us: Mapping[str, float] | None = None) -> Network:
    """The simulator's network for ``topo``; ``latency_us`` overrides class defaults (class -> microseconds)."""
    defaults = dict(CLASS_LATENCY_US)
    classes = sorted({lk.cls for lk in topo.links})
    for cls, value in (latency_us or {}).items():
        if cls not in classes and cls not in CLASS_LATENCY_US:
            raise UsageError(f"--latency: {cls!r} is not a link class of {topo.name or 'this topology'} "
                             f"(its classes: {', '.join(c or 'unnamed' for c in classes)})")
        if not value >= 0:
            raise UsageError(f"latency of class {cls!r} must be >= 0 microseconds, got {value}")
        defaults[cls] = float(value)
    bw: dict[tuple[int, int], Fraction] = {}
    lat: dict[tuple[int, int], float] = {}
    index = topo.index
    for lk in topo.links:
        key = (index[lk.src], index[lk.dst])
        bw[key] = bw.get(key, Fraction(0)) + lk.bandwidth
        this = float(lk.latency_us) if lk.latency_us is not None else defaults.get(lk.cls, defaults[""])
        lat[key] = min(lat.get(key, this), this)
    ends = sorted(bw)
    if bw and max(bw.values()) > MAX_SIM_BANDWIDTH_RATIO * min(bw.values()):
        lo, hi = min(bw.values()), max(bw.values())
        raise UsageError(f"{topo.name or 'the topology'}: link bandwidths from {float(lo):.6g} to {float(hi):.6g} GB/s span "
                         f"more than the 10^6 ratio the simulator's floating-point rates handle (see docs/limits.md); "
                         "bound, generate and verify are exact and take it")
    link_of = {e: i for i, e in enumerate(ends)}
    capacity = np.array([float(bw[e]) * GB for e in ends])
    latency = np.array([lat[e] * 1e-6 for e in ends])
    names = tuple(n.name for n in topo.nodes)
    ranks = tuple(topo.compute_nodes)
    return Network(topo, names, link_of, ends, capacity, latency, ranks)


def load_network(topology, extra: Mapping[str, str] | None = None,
                 latency_us: Mapping[str, float] | None = None) -> Network:
    """:func:`build_network` of a topology spec, file or Topology (``extra``: cluster options such as nodes)."""
    from forestcoll.topology import load_topology

    return build_network(load_topology(topology, extra), latency_us)


def channel_routes(net: Network, cache: dict, src: int, dst: int, chan: int) -> list[Route]:
    """The routes a transfer from rank ``src`` to rank ``dst`` on channel ``chan`` spreads its bytes over, evenly:
    port group ``chan`` mod P of the pair's equal-cost routes (see the module docstring; group 0 starts with
    :meth:`Network.route`'s).  ``cache``: the pairs' groups, kept between calls on the same ``net``."""
    key = (src, dst)
    if key not in cache:
        box = net.box
        groups: dict[tuple[int, ...], list[Route]] = {}
        for links, lat in net.equal_routes(src, dst):
            ports = tuple(i for i in links if box[net.ends[i][0]] != box[net.ends[i][1]])
            groups.setdefault(ports, []).append((links, lat))
        cache[key] = list(groups.values())
    found = cache[key]
    return found[chan % len(found)]


def _widest_shortest(net: Network, a: int, b: int, allowed) -> list[int] | None:
    """Fewest hops from a to b with every intermediate node ``allowed``, then the widest bottleneck,
    then the smallest node ids (deterministic)."""
    out = net.out
    dist = {a: 0}
    order = [a]
    queue = deque([a])
    while queue:
        u = queue.popleft()
        if u == b or (u != a and not allowed(u)):
            continue
        for v in out.get(u, []):
            if v not in dist:
                dist[v] = dist[u] + 1
                order.append(v)
                queue.append(v)
    if b not in dist:
        return None
    # among the widest: fewest relays through ranks that are not on the destination's rail (same name within
    # their boxes: NVLink to the GPU next to the right NIC, as PXN does), then the smallest node ids
    nodes = net.topology.nodes
    rail = nodes[b].local_name
    is_compute = net.topology.is_compute
    best: dict[int, tuple[float, int, tuple[int, ...]]] = {a: (np.inf, 0, (a,))}
    for u in order:
        if u not in best or u == b or (u != a and not allowed(u)):
            continue
        width, off_rail, path = best[u]
        if u != a and is_compute[u] and nodes[u].local_name != rail:
            off_rail += 1
        for v in out.get(u, []):
            if dist.get(v) != dist[u] + 1:
                continue
            cand = (min(width, net.capacity[net.link_of[(u, v)]]), off_rail, path + (v,))
            cur = best.get(v)
            if cur is None or (-cand[0], cand[1], cand[2]) < (-cur[0], cur[1], cur[2]):
                best[v] = cand
    return list(best[b][2]) if b in best else None
