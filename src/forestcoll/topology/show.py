"""A summary of a topology: node counts, per-rank bandwidth, links by class."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction

from forestcoll.topology.model import Topology


@dataclass(frozen=True)
class LinkClass:
    """Directed links of one class: how many, their total and distinct bandwidths (GB/s)."""

    name: str
    count: int
    total: Fraction
    bandwidths: tuple[Fraction, ...]


@dataclass(frozen=True)
class Summary:
    name: str
    compute: int
    switches: int
    boxes: int
    rank_in: tuple[Fraction, Fraction]  # min, max over ranks of bandwidth into a rank
    rank_out: tuple[Fraction, Fraction]
    classes: tuple[LinkClass, ...]
    symmetries: int


def summarize(topo: Topology) -> Summary:
    """Counts and bandwidth figures of ``topo`` (exact)."""
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
    )
