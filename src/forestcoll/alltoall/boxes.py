"""Which box each node belongs to (the one place that knows how; the topology model will record it).

A node's box is its ``box`` attribute when the model has one, else its name up
to the first '.' (``n3.gpu5`` -> ``n3``), which is how every multi-box builder
and importer names nodes.  Fabric switches (no prefix) belong to no box.
"""

from __future__ import annotations

from forestcoll.topology.model import Topology


def node_boxes(topo: Topology) -> list[str | None]:
    """The box of every node by index (None: fabric-level, in no box)."""
    out: list[str | None] = []
    for node in topo.nodes:
        box = getattr(node, "box", None)
        if box is None and "." in node.name:
            box = node.name.split(".", 1)[0]
        out.append(box)
    return out


def rank_boxes(topo: Topology) -> list[list[int]]:
    """Rank numbers grouped by box, boxes in order of their first rank; one group when some rank has no box."""
    boxes = node_boxes(topo)
    groups: dict[str, list[int]] = {}
    for rank, name in enumerate(topo.compute_nodes):
        box = boxes[topo.index[name]]
        if box is None:
            return [list(range(topo.num_compute))]
        groups.setdefault(box, []).append(rank)
    return list(groups.values())
