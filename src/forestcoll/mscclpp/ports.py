"""The network ports an MSCCL++ executor drives: one per GPU, so a plan's trees are packed on those.

The executor (microsoft/mscclpp 1f5f065, ``src/core/executor/executor.cc``:
the table ``IBs`` of eight transports, lines 102-104; ``setupConnections``,
lines 292-309) gives every port channel of rank ``r`` between two IPC domains
the one transport ``IBs[r % nranksPerNode]``, and ``getIBDeviceName``
(``src/core/ib.cc`` lines 647-688, with ``getHcaDevices`` at 629) makes
transport ``IBi`` one InfiniBand device (``MSCCLPP_HCA_DEVICES``' i-th entry,
else the i-th device ibverbs lists), whose queue pairs use one port of it
(``IbCtx::createQp``, ~line 600).  A dual-port NIC is two devices (an NCCL
dump lists two ``<net>``, ``mlx5_0`` and ``mlx5_1``), so a GPU's port channels
leave its box through one port and the NIC's other port stays idle.  NCCL, and
MSCCL files run by it, drive every port.

The simulator already routes a port channel over one port (``Network.route``,
fewest hops then widest then smallest ids: the GPU's nearest NIC, its first
port).  :func:`executor_ports` drops, at each NIC whose port is a GPU's nearest
(the one its route leaves the box by), the NIC's other ports: the fabric the
executor's port channels can use.
Its exact bound is what an MSCCL++ plan can reach; trees packed on the whole
fabric count on the idle ports (OCI H100 dump x4 rail: 16 ports per box, 8
driven; the allreduce bound 216.2 GB/s there, 120.0 on the driven ports).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from forestcoll.schedule import Schedule
from forestcoll.topology.model import Topology, make_topology

__all__ = ["ExecutorPorts", "driven_ports", "executor_ports", "idle_port_note", "idle_path_note"]


@dataclass(frozen=True)
class ExecutorPorts:
    """``topology`` without the ports no GPU's port channels take (the input itself when none is dropped),
    ``dropped`` and ``ports``: the ports (links leaving a box) dropped and in all."""

    topology: Topology
    dropped: int
    ports: int

    def note(self, collective: str, full: Fraction, driven: Fraction) -> str:
        """The sentence ``generate --format mscclpp`` prints when ports are dropped (bounds in GB/s)."""
        return (f"the MSCCL++ executor drives one network port per GPU (its IB device, IBs[rank % nranksPerNode] in "
                f"executor.cc); {self.dropped} of the {self.ports} ports of the boxes stay idle, so the trees are "
                f"packed on the ports it drives: {collective} bound {float(driven):.1f} GB/s there, "
                f"{float(driven / full):.1%} of the fabric's {float(full):.1f}")


def _leaves(topology: Topology, src: str, dst: str) -> bool:
    box = topology.nodes[topology.index[src]].box
    return box is not None and topology.nodes[topology.index[dst]].box != box


def _nearest_port(topology: Topology, gpu: str) -> tuple[str, str] | None:
    """The box-leaving link nearest ``gpu`` through its box's switches: fewest hops, then widest, then the smallest
    node indexes (the port the simulator's route to the GPU's peer in another box leaves by)."""
    idx, nodes = topology.index, topology.nodes
    box = nodes[idx[gpu]].box
    out: dict[str, list[tuple[str, Fraction]]] = {}
    for ln in topology.links:
        out.setdefault(ln.src, []).append((ln.dst, ln.bandwidth))
    dist, width, level = {gpu: 0}, {gpu: Fraction(10**18)}, [gpu]
    best: tuple | None = None
    while level and best is None:
        nxt: list[str] = []
        for u in level:
            for v, bw in out.get(u, ()):
                node = nodes[idx[v]]
                if node.box != box:
                    cand = (-min(width[u], bw), idx[u], idx[v], u, v)
                    best = cand if best is None or cand < best else best
                elif node.kind != "compute" and dist.get(v, dist[u] + 1) == dist[u] + 1:
                    if v not in dist:
                        dist[v] = dist[u] + 1
                        nxt.append(v)
                    width[v] = max(width.get(v, Fraction(0)), min(width[u], bw))
        level = nxt
    return None if best is None else (best[3], best[4])


def _driven(topology: Topology) -> set[tuple[str, str]]:
    """The port (box-leaving link) each GPU's port channels take, where the fabric has more than one box."""
    if len(topology.boxes) < 2:
        return set()
    gpus = [n.name for n in topology.nodes if n.kind == "compute" and n.box is not None]
    return {port for g in gpus if (port := _nearest_port(topology, g)) is not None}


def executor_ports(topology: Topology) -> ExecutorPorts:
    """The fabric as the executor's port channels use it: a node whose box-leaving link a GPU's route takes (its
    NIC) keeps one port, that link (the first of parallel ones) and one link back; its other box-leaving links
    in and out are dropped, then the switches left without links; declared symmetries that keep what is left
    are kept."""
    driven = _driven(topology)
    nics = {u: v for u, v in driven}
    leaving = [i for i, ln in enumerate(topology.links) if _leaves(topology, ln.src, ln.dst)]
    keep_out: dict[str, int] = {}
    keep_in: dict[str, int] = {}
    for i in leaving:
        ln = topology.links[i]
        if nics.get(ln.src) == ln.dst:
            keep_out.setdefault(ln.src, i)
    for i, ln in enumerate(topology.links):
        if ln.dst in nics and nics[ln.dst] == ln.src:
            keep_in.setdefault(ln.dst, i)
    drop = {i for i in leaving if topology.links[i].src in nics and keep_out.get(topology.links[i].src) != i}
    drop |= {i for i, ln in enumerate(topology.links)
             if ln.dst in nics and _leaves(topology, ln.dst, ln.src) and keep_in.get(ln.dst) != i}
    if not drop:
        return ExecutorPorts(topology, 0, len(leaving))
    links = [ln for i, ln in enumerate(topology.links) if i not in drop]
    used = {ln.src for ln in links} | {ln.dst for ln in links}
    nodes = [n for n in topology.nodes if n.name in used or n.kind == "compute"]
    names = [n.name for n in topology.nodes]
    kept = {n.name for n in nodes}
    pairs = {(ln.src, ln.dst) for ln in links}
    syms = []
    for perm in topology.symmetries:
        image = {names[i]: names[j] for i, j in enumerate(perm)}
        if all(image[n] in kept for n in kept) and all((image[a], image[b]) in pairs for a, b in pairs):
            syms.append({n: image[n] for n in kept})
    dropped = sum(1 for i in leaving if i in drop)
    return ExecutorPorts(make_topology(nodes, links, topology.name, syms, topology.gpu), dropped, len(leaving))


def driven_ports(topology: Topology) -> Topology:
    """``executor_ports(topology).topology``: the fabric an MSCCL++ plan's trees or flows are packed on."""
    return executor_ports(topology).topology


def idle_path_note(paths: list[tuple[str, ...]], topology: Topology, what: str = "flow(s)",
                   whose: str = "its flows") -> str | None:
    """A note when some of ``paths`` (node names; ``what`` they are) cross boxes on ports the executor does not
    drive (None otherwise)."""
    ports = executor_ports(topology)
    if not ports.dropped:
        return None
    kept = {(ln.src, ln.dst) for ln in ports.topology.links}
    idle = {(ln.src, ln.dst) for ln in topology.links} - kept
    edges = sum(1 for path in paths if any(hop in idle for hop in zip(path, path[1:])))
    if not edges:
        return None
    return (f"{edges} {what} cross boxes on network ports the executor does not drive (it drives one per GPU: "
            f"{ports.dropped} of the {ports.ports} ports stay idle); their port channels take the GPU's own port, so "
            f"the plan runs below {whose} there: `generate --format mscclpp` packs {whose} on the driven ports")


def idle_port_note(sched: Schedule, topology: Topology) -> str | None:
    """A note when tree edges of ``sched`` cross boxes on ports the executor does not drive (None otherwise)."""
    return idle_path_note([e.path for t in sched.trees for e in t.edges], topology, "tree edge(s)", "its trees")
