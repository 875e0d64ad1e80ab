"""Tree edges a runtime cannot send as routed: two GPUs of one box with a direct link joined through the CPUs.

A schedule's tree edge carries its physical route (``Edge.path``).  Between two GPUs of one box the packer may route
an edge over the PCIe / CPU path (``gpu -> pci ... -> cpu0 -> cpu1 -> ... -> gpu``) when that keeps the optimum,
but a runtime's point-to-point sends it over the pair's shortest route (the direct xGMI / NVLink link, as the
simulator's ``channel_routes`` does), which then carries more than the trees assumed: the MI300 dump's
(topo_8p_940.xml x4 rail) allgather trees have 96 such edges of 4,154 and their files are capped at their
busiest xGMI link's 361.4 GB/s (0.91 of the bound 396.4).  :func:`optimum_on` packs the trees again on a part of
the topology, kept only when that changes nothing in the optimum (the same exact algbw).  On the topology without
its CPUs (:func:`without_cpus`) every edge then goes where the runtime sends it (docs/msccl.md, "Trees routed off
the CPUs").  On the topology without the links *between* its CPUs (:func:`without_cpu_links`) a GPU may still
reach another GPU's NIC through its own CPU, so its network edges spread over more peers than its own rail's (RCCL's files, which pay each network step's latency in turn, keep 16 MiB), and
the edges that crossed from one CPU to the other to join two GPUs of a box are gone (MI300 x4 rail allreduce: 192 ->
64 detours; docs/msccl.md, "Trees kept on one socket").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from forestcoll.schedule import Schedule
from forestcoll.topology.model import Topology, TopologyError, make_topology

__all__ = ["cpu_crossings", "cpu_detours", "off_cpu_packing", "optimum_on", "such_edges", "through_cpus_note",
           "without_cpu_links", "without_cpus"]

CPU = re.compile(r"cpu\d*(\.\d+)?")  # the switches an NCCL / RCCL topology's <cpu> elements become (topology/nccl_xml.py)


def _cpus(topology: Topology) -> set[str]:
    """The names of ``topology``'s CPU switches (local name ``cpu``, ``cpu<numa>`` or ``cpu<numa>.<i>``)."""
    return {n.name for n in topology.nodes if n.kind != "compute" and CPU.fullmatch(n.local_name)}


def cpu_detours(topology: Topology, sched: Schedule) -> int:
    """How many of ``sched``'s tree edges join two compute nodes of one box that have a direct link through one of
    its CPUs (a runtime sends them over the direct link)."""
    cpus = _cpus(topology)
    if not cpus:
        return 0
    box = {n.name: n.box for n in topology.nodes}
    direct = {(link.src, link.dst) for link in topology.links}
    return sum(1 for tree in sched.trees for e in tree.edges
               if (e.src, e.dst) in direct and box.get(e.src) is not None and box.get(e.src) == box.get(e.dst)
               and cpus.intersection(e.path))


def cpu_crossings(topology: Topology, sched: Schedule) -> int:
    """How many of ``sched``'s tree edges between two boxes pass through a CPU: a GPU reaching another NIC than its
    own through its CPU, or a NIC reaching a GPU through the receiving box's CPU.  A runtime sends between boxes over
    its own route (the sender's nearest NIC, the receiver's nearest GPU path), so the CPU links and NICs carry other
    loads than the trees assumed (two 8-GPU boxes with two NICs and a CPU each, docs/sweep.md: allgather file 0.67
    of the bound, 1.00 packed without the CPUs)."""
    cpus = _cpus(topology)
    if not cpus:
        return 0
    box = {n.name: n.box for n in topology.nodes}
    return sum(1 for tree in sched.trees for e in tree.edges
               if box.get(e.src) != box.get(e.dst) and cpus.intersection(e.path))


def _through_cpus(topology: Topology, sched: Schedule) -> bool:
    """Whether any tree edge of ``sched`` passes a CPU where a runtime would not send it (:func:`cpu_detours`,
    :func:`cpu_crossings`): the gate of the packings without them."""
    return bool(cpu_detours(topology, sched) or cpu_crossings(topology, sched))


def through_cpus_note(topology: Topology, sched: Schedule, who: str = "a runtime") -> str:
    """What ``who`` (a runtime, the executor) does otherwise than ``sched``'s trees through the CPUs: edges joining
    GPUs of one box through a CPU (sent over their direct link), else edges between boxes through a CPU (sent over
    its own route)."""
    if detours := cpu_detours(topology, sched):
        return (f"the optimal k={sched.k}'s trees join GPUs of one box through a CPU ({detours} edges), which {who} "
                "sends over their direct link")
    return (f"the optimal k={sched.k}'s trees cross between boxes through a CPU ({cpu_crossings(topology, sched)} "
            f"edges), which {who} sends over its own route through the NICs")


def such_edges(topology: Topology, optimal: Schedule, bare: Schedule) -> int:
    """The count :func:`through_cpus_note` gave ``optimal``, for ``bare``."""
    return cpu_detours(topology, bare) if cpu_detours(topology, optimal) else cpu_crossings(topology, bare)


def without_cpus(topology: Topology) -> Topology | None:
    """``topology`` without its CPU switches and their links, under the same name; None when it has none or
    is no longer connected without them (a NIC or a GPU reached only through a CPU)."""
    cpus = _cpus(topology)
    if not cpus:
        return None
    try:
        return make_topology([n for n in topology.nodes if n.name not in cpus],
                             [link for link in topology.links if link.src not in cpus and link.dst not in cpus],
                             topology.name)
    except TopologyError:
        return None


def without_cpu_links(topology: Topology) -> Topology | None:
    """``topology`` without the links that join two of its CPU switches (a socket's link to the other), under the
    same name; None when it has none or is no longer connected without them."""
    cpus = _cpus(topology)
    links = [link for link in topology.links if not (link.src in cpus and link.dst in cpus)]
    if len(links) == len(topology.links):
        return None
    try:
        return make_topology(list(topology.nodes), links, topology.name)
    except TopologyError:
        return None


def optimum_on(topology: Topology, sched: Schedule, part: Callable[[Topology], Topology | None],
               **generate_kwargs: Any) -> Schedule | None:
    """The optimal schedule of ``sched``'s collective packed on ``part(topology)`` (``topology`` with some of its
    links or switches dropped: :func:`without_cpus`, :func:`without_cpu_links`; ``generate_kwargs``: root, symmetry,
    max_k as for ``sched``), when ``sched`` has CPU detours (:func:`cpu_detours`) and the packing reaches ``sched``'s
    exact algbw (so it is as optimal on ``topology``, its links a subset); else None, also when ``part`` gives None.
    Edges between boxes through a CPU (:func:`cpu_crossings`) open the same offer.  A schedule with shard weights
    is packed with the same weights and compared with their optimum (like with like)."""
    from forestcoll.bound.optimal import optimal_bound
    from forestcoll.generate import generate
    from forestcoll.shard_pieces import weighted_bound

    if not sched.trees or not _through_cpus(topology, sched):
        return None
    bare = part(topology)
    if bare is None:
        return None
    weights = generate_kwargs.pop("shard_weights", None) or sched.shard_weights
    best = (optimal_bound(bare, sched.collective, generate_kwargs.get("root")).algbw if weights is None
            else weighted_bound(bare, weights))
    if best != sched.algbw:
        return None
    found = generate(bare, sched.collective, **generate_kwargs, **({} if weights is None else {"shard_weights": weights}))
    return found if found.algbw == sched.algbw else None


def off_cpu_packing(topology: Topology, sched: Schedule, **generate_kwargs: Any) -> Schedule | None:
    """``sched`` packed again on :func:`without_cpus` with the same ``generate_kwargs`` (its ``k`` or
    ``max_height``, root, ...), when ``sched`` has CPU detours (:func:`cpu_detours`; edges between boxes through a
    CPU do not open it here: on the MI300 dump every k below the optimum has them, and the per-size candidates they
    would add are not measured yet, docs/sweep.md) and that packing's exact algbw
    is not below ``sched``'s; else None.  For a schedule that is not optimal (a fixed k, a height limit) this is
    :func:`optimum_on`'s test on :func:`without_cpus`, without the bound: the packing itself must reach the rate."""
    from forestcoll.errors import ForestCollError
    from forestcoll.generate import generate

    if not sched.trees or not cpu_detours(topology, sched):
        return None
    bare = without_cpus(topology)
    if bare is None:
        return None
    try:
        found = generate(bare, sched.collective, **generate_kwargs)
    except ForestCollError:
        return None
    return found if found.algbw >= sched.algbw else None
