"""A summary of a topology: node counts, the GPU, per-rank bandwidth, links by class (what ``topo show`` prints)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from forestcoll.rational import format_rational
from forestcoll.topology.device import Gpu
from forestcoll.topology.model import Topology

__all__ = ["LinkClass", "NetworkPorts", "Summary", "summarize"]


@dataclass(frozen=True)
class LinkClass:
    """Directed links of one class: how many, their total and distinct bandwidths (GB/s)."""

    name: str
    count: int
    total: Fraction
    bandwidths: tuple[Fraction, ...]


@dataclass(frozen=True)
class NetworkPorts:
    """A box's network attachments (as an NCCL/RCCL dump lists them): ports, the NICs they sit on, speeds."""

    ports: int
    nics: int
    speeds: tuple[Fraction, ...]  # distinct, GB/s


@dataclass(frozen=True)
class Summary:
    """Counts and exact bandwidth figures of a topology.  A result (:mod:`forestcoll.results`), always ok."""

    name: str
    compute: int
    switches: int
    boxes: int
    rank_in: tuple[Fraction, Fraction]  # min, max over ranks of bandwidth into a rank
    rank_out: tuple[Fraction, Fraction]
    classes: tuple[LinkClass, ...]
    symmetries: int
    network: NetworkPorts | None = None  # for imported dumps: the ports of one box
    gpu: Gpu | None = None  # the GPU the ranks are, when the fabric records it

    @property
    def ok(self) -> bool:
        return True

    @property
    def message(self) -> str:
        boxes = f", {self.boxes} boxes" if self.boxes > 1 else ""
        return f"{self.name}: {self.compute} ranks, {self.switches} switches{boxes}"

    def to_dict(self) -> dict[str, Any]:
        fr = format_rational
        return {
            "topology": self.name,
            "compute_nodes": self.compute,
            "switch_nodes": self.switches,
            "boxes": self.boxes,
            **({"gpu": self.gpu.to_dict()} if self.gpu is not None else {}),
            "rank_in_gbps": [fr(x) for x in self.rank_in],
            "rank_out_gbps": [fr(x) for x in self.rank_out],
            "link_classes": [
                {"class": c.name, "links": c.count, "total_gbps": fr(c.total), "bandwidths_gbps": [fr(b) for b in c.bandwidths]}
                for c in self.classes
            ],
        }


def summarize(topo: Topology, ports: Sequence | None = None) -> Summary:
    """Counts and bandwidth figures of ``topo`` (exact); ``ports``: one box's network ports
    (:class:`~forestcoll.topology.cluster.Port`), as :func:`~forestcoll.topology.spec.import_topology` gives them."""
    into, out = topo.node_bandwidth
    ranks = [i for i in range(len(topo.nodes)) if topo.is_compute[i]]
    groups: dict[str, list[Fraction]] = defaultdict(list)
    for link in topo.links:
        groups[link.cls or "(unlabelled)"].append(link.bandwidth)
    classes = tuple(
        LinkClass(name, len(bws), sum(bws, Fraction(0)), tuple(sorted(set(bws))))
        for name, bws in sorted(groups.items(), key=lambda item: -sum(item[1], Fraction(0)))
    )
    return Summary(
        topo.name,
        len(ranks),
        len(topo.switch_nodes),
        len(topo.boxes),
        (min(into[i] for i in ranks), max(into[i] for i in ranks)),
        (min(out[i] for i in ranks), max(out[i] for i in ranks)),
        classes,
        len(topo.symmetries),
        None if ports is None else NetworkPorts(len(ports), len({p.node for p in ports}),
                                                tuple(sorted({p.bandwidth for p in ports}))),
        topo.gpu,
    )
