"""Trees kept inside their boxes: tree edges that join two GPUs of one box through the network, and a packing without.

The packer may route an edge between two GPUs of one box out through their NICs, a network switch and back (a
*turn* at the switch: ``n1.gpu7 -> n1.nic7 -> leaf1 -> n1.nic0 -> n1.gpu0``) wherever a NIC's link has room left, as it
has on a leaf-spine fabric whose uplinks, not the NICs, bound the rate: the built-in
``dgx-h100:nodes=2,fabric=leaf-spine,leaf_ports=8,oversub=2`` allreduce (bound 200 GB/s = the leaf's two 100 GB/s
uplinks; each NIC carries 25 GB/s between boxes and the packer fills the other 25 GB/s with turns) has 32 such edges.
They cost the rate nothing, but every one pays two network links' latencies and two PCIe hops (12 us in the default
model) where the box's NVSwitch pays 1.4 us, and they sit near the roots, so at 16 MiB the trees run at 118.2 GB/s
where the double binary tree runs at 125.9.  An MSCCL++ plan sends them as port channels (docs/mscclpp.md).

:func:`without_turns` is the same fabric with every box-less switch that two nodes of one box reach cut in two ways
out of the box: links from a box arrive at ``S~<box>.in``, which forwards to the switch's other neighbours
(``S~up``) and to other boxes' ``S~<box>.out``; links into a box leave from ``S~<box>.out``, fed by ``S~down`` (the
links from the other neighbours) and the other boxes' ``.in``.  Every link of the fabric keeps its capacity (the new
links join pieces of one switch, which the fabric does not limit), so a packing there is a packing of the fabric with
no turn inside a box; :func:`on_fabric` writes its paths back with the switch's own name.  :func:`inbox_packing`
packs a schedule again there and keeps it when its exact rate is not lower.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from forestcoll.schedule import Schedule
from forestcoll.topology.model import Link, Node, Topology, TopologyError, make_topology

__all__ = ["INBOX", "SEP", "inbox_candidates", "inbox_packing", "network_turns", "on_fabric", "without_turns"]

INBOX = "-inbox"  # the name suffix of a per-size candidate packed again without turns (:func:`inbox_candidates`)
SEP = "~"  # the pieces of switch S in :func:`without_turns`: ``S~up``, ``S~down``, ``S~<box>.in``, ``S~<box>.out``


def network_turns(topology: Topology, sched: Schedule) -> int:
    """How many of ``sched``'s tree edges join two compute nodes of one box along a path that leaves the box."""
    box = {n.name: n.box for n in topology.nodes}
    return sum(1 for tree in sched.trees for e in tree.edges
               if box.get(e.src) is not None and box.get(e.src) == box.get(e.dst)
               and any(box.get(x) != box[e.src] for x in e.path))


def _turning(topology: Topology) -> list[str]:
    """The box-less switches that two links from nodes of one box enter (where a path can turn back into the box)."""
    box = {n.name: n.box for n in topology.nodes}
    entering: dict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    for link in topology.links:
        if box.get(link.dst, "") is None and box.get(link.src) is not None:
            entering[link.dst][box[link.src]] += 1
    return [n.name for n in topology.nodes
            if n.kind != "compute" and n.box is None and any(c >= 2 for c in entering[n.name].values())]


def without_turns(topology: Topology) -> Topology | None:
    """``topology`` with every switch where a path can turn back into a box (:func:`_turning`) cut into pieces that
    forward a box's traffic only out of it (module docstring), under the same name; None when it has no such switch."""
    switches = _turning(topology)
    if not switches:
        return None
    box = {n.name: n.box for n in topology.nodes}
    nodes = [n for n in topology.nodes if n.name not in switches]
    links = list(topology.links)
    for s in switches:
        into: defaultdict[str, Any] = defaultdict(int)  # box -> capacity of its links into s
        out_of: defaultdict[str, Any] = defaultdict(int)  # box -> capacity of s's links into it
        kept: list[Link] = []
        cls = next(link.cls for link in links if link.dst == s)
        for link in links:
            if link.dst == s and box.get(link.src) is not None:
                into[box[link.src]] += link.bandwidth
                kept.append(dataclasses.replace(link, dst=f"{s}{SEP}{box[link.src]}.in"))
            elif link.src == s and box.get(link.dst) is not None:
                out_of[box[link.dst]] += link.bandwidth
                kept.append(dataclasses.replace(link, src=f"{s}{SEP}{box[link.dst]}.out"))
            elif link.src == s:
                kept.append(dataclasses.replace(link, src=f"{s}{SEP}up"))
            elif link.dst == s:
                kept.append(dataclasses.replace(link, dst=f"{s}{SEP}down"))
            else:
                kept.append(link)
        boxes = sorted(set(into) | set(out_of))
        for b in boxes:
            if into[b]:
                kept.append(Link(f"{s}{SEP}{b}.in", f"{s}{SEP}up", into[b], cls))
            if out_of[b]:
                kept.append(Link(f"{s}{SEP}down", f"{s}{SEP}{b}.out", out_of[b], cls))
            kept += [Link(f"{s}{SEP}{b}.in", f"{s}{SEP}{c}.out", min(into[b], out_of[c]), cls)
                     for c in boxes if c != b and into[b] and out_of[c]]
        nodes += [Node(f"{s}{SEP}{part}", "switch", None)
                  for part in ("up", "down", *(f"{b}.{d}" for b in boxes for d in ("in", "out")))]
        links = kept
    used = {x for link in links for x in (link.src, link.dst)}
    try:
        return make_topology([n for n in nodes if n.name in used or n.kind == "compute"], links, topology.name)
    except TopologyError:
        return None


def on_fabric(sched: Schedule, topology: Topology, bound: Any = None) -> Schedule:
    """``sched`` (packed on :func:`without_turns` of ``topology``) with every path written with the fabric's switch
    names (the pieces of a switch, consecutive on a path, become the switch once) and ``topology``'s record (its
    fingerprint); ``bound``: the fabric's bound algbw.  No symmetry record (the packing had none)."""
    from forestcoll.schedule import TopologyRecord
    from forestcoll.topology import fingerprint

    def back(path: tuple[str, ...]) -> tuple[str, ...]:
        out: list[str] = []
        for x in path:
            x = x.split(SEP, 1)[0]
            if not out or out[-1] != x:
                out.append(x)
        return tuple(out)

    trees = tuple(dataclasses.replace(t, edges=tuple(dataclasses.replace(e, path=back(e.path)) for e in t.edges))
                  for t in sched.trees)
    record = TopologyRecord(topology.name, topology.name, None, fingerprint(topology))
    return dataclasses.replace(sched, trees=trees, record=record, symmetry=None,
                               **({} if bound is None else {"bound_algbw": bound}))


def inbox_packing(topology: Topology, sched: Schedule, **generate_kwargs: Any) -> Schedule | None:
    """``sched`` packed again on :func:`without_turns` with ``generate_kwargs`` (its k or max_height, root, shard
    weights) and written back on the fabric, when ``sched`` has network turns (:func:`network_turns`) and that packing
    reaches ``sched``'s exact algbw; else None."""
    from forestcoll.errors import ForestCollError
    from forestcoll.generate import generate

    if not sched.trees or not network_turns(topology, sched):
        return None
    bare = without_turns(topology)
    if bare is None:
        return None
    try:
        found = generate(bare, sched.collective, **generate_kwargs)
    except ForestCollError:
        return None
    return on_fabric(found, topology, sched.bound_algbw) if found.algbw >= sched.algbw else None


def inbox_candidates(topology: Topology, cands: dict[str, Schedule], root: str | None = None) -> dict[str, Schedule]:
    """``name + INBOX`` -> each forestcoll candidate of ``cands`` (the optimal ``forestcoll``, ``forestcoll-k<k>``,
    ``forestcoll-h<H>``; not the packings off the CPUs) packed again by :func:`inbox_packing` with the same k or height
    limit and shard weights, where it has network turns and the packing keeps its exact rate.  Empty elsewhere."""
    out: dict[str, Schedule] = {}
    bare_needed = any(network_turns(topology, s) for s in cands.values())
    if not bare_needed:
        return out
    for name, sched in cands.items():
        same: dict[str, Any] = {"root": root}
        if sched.shard_weights is not None:
            same["shard_weights"] = sched.shard_weights
        if name == "forestcoll":
            pass
        elif name.startswith("forestcoll-k") and name[len("forestcoll-k"):].isdigit():
            same["k"] = sched.k
        elif name.startswith("forestcoll-h") and name[len("forestcoll-h"):].isdigit():
            same["max_height"] = sched.max_height()
        else:
            continue
        found = inbox_packing(topology, sched, **same)
        if found is not None:
            out[name + INBOX] = found
    return out
