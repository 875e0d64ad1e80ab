"""The fabric as a runtime routes it inside its boxes: trees packed where a runtime sends their edges.

A tree edge carries its physical route (``Edge.path``), and the packer may take any route with capacity: two
NVLink neighbours also joined through their PCIe switch (or their CPUs) get both, a GPU reaches another GPU's NIC
through the CPUs.  A runtime sends a connection between two GPUs over the pair's own route (the fewest hops through
the box's switches, widest: the direct link when there is one), and between boxes out of the GPU's nearest NIC, so
those links carry more than the trees assumed (sweep seeds 3 and 18, two CPU sockets per box: MSCCL files at 0.80
and 0.44 of the bound, docs/sweep.md kind 6).  :func:`misrouted` counts such edges; :func:`as_routed` builds a
topology on which every packing is routed as a runtime routes it, so the optimum packed there
(and packings of smaller k, :func:`routed_schedules`) runs on the real fabric at its own exact rate, at most the
bound of that topology, not of the fabric:

* its PCIe switches and CPUs (the switches of a box whose every link is PCIe or CPU-CPU, class ``pcie`` / ``sys``,
  and stays in the box) are dropped;
* every ordered pair of GPUs of one box whose runtime route passes one of them, and every GPU and each of its
  nearest NICs (both ways), gets a link of its own, of a fixed share of those routes' links: a link l carried by
  routes of total weight A_l (a pair's equal routes split its bytes evenly) gives each of them cap(l) / A_l, and a
  pair takes its smallest share.

Every flow on that topology maps onto the fabric within its capacities along the runtime's routes (the shares are
fixed, so its bound can be below what the runtime's routes allow; it is exact for that topology).  One way remains
that a runtime does not take: GPU -> NIC -> GPU of the same box (:func:`misrouted` counts it).  The packing's
paths are mapped back onto the fabric (:func:`on_fabric`: a pair's link becomes the first of its routes) so the
exporters see real NICs and switches."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import replace
from fractions import Fraction
from typing import Any

from forestcoll.schedule import Edge, Schedule
from forestcoll.topology.model import Link, Topology, TopologyError, make_topology

__all__ = ["as_routed", "misrouted", "on_fabric", "routed_schedules", "runtime_routes"]

RELAY_CLASSES = frozenset({"pcie", "sys"})  # the link classes of a PCIe switch's / CPU's links

Path = tuple[str, ...]


def _relays(topology: Topology) -> set[str]:
    """The switches of a box whose every link is PCIe or CPU-CPU and stays in the box: PCIe switches and CPUs."""
    touching: dict[str, list[Link]] = defaultdict(list)
    for lk in topology.links:
        touching[lk.src].append(lk)
        touching[lk.dst].append(lk)
    box = {n.name: n.box for n in topology.nodes}
    return {n.name for n in topology.nodes if n.kind != "compute" and n.box is not None and touching[n.name]
            and all(lk.cls in RELAY_CLASSES and box[lk.src] == box[lk.dst] for lk in touching[n.name])}


def _widest_fewest(a: str, b: str, inner: set[str], cap: dict[tuple[str, str], Fraction],
                   out: dict[str, list[str]]) -> list[Path]:
    """Every fewest-hop path a -> b whose inner nodes are in ``inner`` and whose narrowest link is the widest of
    them, sorted; [] when there is none."""
    dist = {a: 0}
    queue = deque([a])
    while queue:
        u = queue.popleft()
        if u != a and u not in inner:
            continue
        for v in out[u]:
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    if b not in dist:
        return []
    paths: list[Path] = []
    stack: list[Path] = [(a,)]
    while stack:
        path = stack.pop()
        u = path[-1]
        if u == b:
            paths.append(path)
            continue
        if u != a and u not in inner:
            continue
        stack.extend(path + (v,) for v in out[u] if dist.get(v) == dist[u] + 1 and (v == b or dist[v] < dist[b]))
    width = {p: min(cap[(x, y)] for x, y in zip(p, p[1:])) for p in paths}
    best = max(width.values())
    return sorted(p for p in paths if width[p] == best)


def runtime_routes(topology: Topology) -> dict[tuple[str, str], list[Path]]:
    """The runtime's routes through PCIe switches and CPUs: (GPU, GPU of its box) -> routes, where the pair's
    fewest-hop widest routes through the box's switches pass one; (GPU, NIC) and (NIC, GPU) -> routes, for each of a
    GPU's nearest NICs (fewest hops through them, then widest).  Empty without such switches."""
    relays = _relays(topology)
    if not relays:
        return {}
    cap = topology.capacity
    out: dict[str, list[str]] = defaultdict(list)
    for u, v in sorted(cap):
        out[u].append(v)
    kinds = {n.name: n.kind for n in topology.nodes}
    box = {n.name: n.box for n in topology.nodes}
    leaving = {lk.src for lk in topology.links if box[lk.src] != box[lk.dst]}  # NICs: a link out of the box
    routes: dict[tuple[str, str], list[Path]] = {}
    for members in topology.boxes.values():
        gpus = [m for m in members if kinds[m] == "compute"]
        switches = {m for m in members if kinds[m] != "compute"}
        nics = sorted(switches & leaving)
        for g in gpus:
            for h in gpus:
                if g != h and (found := _widest_fewest(g, h, switches, cap, out)) \
                        and relays.intersection(found[0][1:-1]):
                    routes[(g, h)] = found
            near = sorted((len(p[0]), -min(cap[(x, y)] for x, y in zip(p[0], p[0][1:])), n, p)
                          for n in nics if (p := _widest_fewest(g, n, relays, cap, out)))
            for hops, width, nic, found in near:
                if (hops, width) == near[0][:2]:
                    routes[(g, nic)] = found
                    routes[(nic, g)] = _widest_fewest(nic, g, relays, cap, out)
    return routes


def misrouted(topology: Topology, sched: Schedule) -> int:
    """How many of ``sched``'s tree edges pass a PCIe switch or a CPU (:func:`as_routed`) where a runtime does not
    send them: between two GPUs of one box, a path that is not one of the pair's routes (:func:`runtime_routes`);
    between boxes, a path that leaves or enters its box other than by the GPU's own way to its nearest NIC."""
    relays = _relays(topology)
    if not relays:
        return 0
    routes = runtime_routes(topology)
    box = {n.name: n.box for n in topology.nodes}
    count = 0
    for tree in sched.trees:
        for e in tree.edges:
            inner = relays.intersection(e.path[1:-1])
            if not inner:
                continue
            if box[e.src] == box[e.dst]:
                count += e.path not in routes.get((e.src, e.dst), ())
                continue
            count += any(leg not in routes.get((leg[0], leg[-1]), ()) for leg in _legs(e.path, box)
                         if relays.intersection(leg[1:-1]))
    return count


def _legs(path: Path, box: dict[str, str | None]) -> list[Path]:
    """A path between boxes cut where it leaves its first box and enters its last: (GPU .. first NIC), (last NIC ..
    GPU), the NICs being the last node of the sender's box and the first of the receiver's."""
    first = next(i for i, v in enumerate(path) if box[v] != box[path[0]]) - 1
    last = max(i for i, v in enumerate(path) if box[v] != box[path[-1]]) + 1
    return [path[:first + 1], path[last:]]


def as_routed(topology: Topology) -> tuple[Topology, dict[tuple[str, str], list[Path]]] | None:
    """The fabric as a runtime routes it (the module docstring: PCIe switches and CPUs dropped, a link of a fixed
    share per pair whose route passes them), under the same name, with the pairs' routes; None without PCIe
    switches or CPUs, or when that topology is not connected."""
    relays = _relays(topology)
    if not relays:
        return None
    routes = runtime_routes(topology)
    cap = topology.capacity
    kept = [lk for lk in topology.links if lk.src not in relays and lk.dst not in relays]
    weight: dict[tuple[str, str], dict[tuple[str, str], Fraction]] = {}
    total: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for pair, found in sorted(routes.items()):
        mine: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
        for path in found:
            for link in zip(path, path[1:]):
                mine[link] += Fraction(1, len(found))
        weight[pair] = mine
        for link, w in mine.items():
            total[link] += w
    share = {pair: min(cap[link] / total[link] for link in mine) for pair, mine in weight.items()}
    links = list(kept)
    links += [Link(a, b, bw, "pcie") for (a, b), bw in share.items()]
    ends = {x for lk in links for x in (lk.src, lk.dst)}
    nodes = [n for n in topology.nodes if n.name not in relays and n.name in ends]
    try:
        return make_topology(nodes, links, topology.name, gpu=topology.gpu), routes
    except TopologyError:
        return None


def on_fabric(sched: Schedule, routes: dict[tuple[str, str], list[Path]], like: Schedule) -> Schedule:
    """``sched`` (packed on :func:`as_routed`'s topology) with its paths on the fabric: a pair's own link becomes
    the first of its routes; the topology name, record and bound of ``like`` (a schedule of the fabric: ``sched``'s
    exact rate stays its own)."""
    def real(path: Iterable[str]) -> Path:
        names = list(path)
        out = [names[0]]
        for a, b in zip(names, names[1:]):
            out += routes[(a, b)][0][1:] if (a, b) in routes else (b,)
        return tuple(out)

    trees = tuple(replace(t, edges=tuple(Edge(e.src, e.dst, real(e.path)) for e in t.edges)) for t in sched.trees)
    return replace(sched, trees=trees, topology=like.topology, record=like.record, bound_algbw=like.bound_algbw,
                   symmetry=None, templates=None)


def routed_schedules(topology: Topology, sched: Schedule, most: int = 256,
                     **generate_kwargs: Any) -> list[Schedule]:
    """Schedules of ``sched``'s collective packed on :func:`as_routed`, their paths on the fabric
    (:func:`on_fabric`), when ``sched`` has tree edges a runtime routes otherwise (:func:`misrouted`) and that
    topology exists: its optimum (``generate_kwargs``: root, symmetry, max_k as for ``sched``) when a tree schedule
    reaches it, then k = 1, 2, 4, ... below that k (at most ``most``; every power of two up to ``most`` when the
    optimum has none: a PCIe switch's halves can send more than they receive), the packings that failed left out;
    else [].  Each one's exact rate is its own (on the topology as routed: at most that topology's bound)."""
    from forestcoll.errors import ForestCollError
    from forestcoll.generate import generate

    if not sched.trees or not misrouted(topology, sched):
        return []
    made = as_routed(topology)
    if made is None:
        return []
    bare, routes = made
    if sched.shard_weights is not None:  # the same contract: the shards the schedule was built on
        generate_kwargs = {"shard_weights": sched.shard_weights, **generate_kwargs}
    found: list[Schedule] = []
    try:
        found.append(generate(bare, sched.collective, **generate_kwargs))
    except ForestCollError:
        pass
    top = min(found[0].k - 1 if found else most, most)
    for kk in (2**i for i in range(20) if 2**i <= top):
        try:
            found.append(generate(bare, sched.collective, **{**generate_kwargs, "k": kk}))
        except ForestCollError:
            continue
    return [on_fabric(s, routes, sched) for s in found]
