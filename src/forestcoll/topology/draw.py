"""Drawing a topology (matplotlib, no display needed), optionally with its bottleneck cut.

Layout: ranks along the bottom, grouped box by box; each switch one row up
per hop from the nearest rank (NVSwitch and NICs, then PCIe/CPU, then the
fabric), centred over what it serves.  Fabrics without switches (rings, tori,
meshes) go on a circle.  Line width grows with bandwidth, colour tells the link
class; with a cut, the nodes of S are filled orange and the links leaving S
are drawn red.
"""

from __future__ import annotations

import io
import math
from collections import defaultdict, deque
from fractions import Fraction

from forestcoll.errors import UsageError
from forestcoll.fileio import atomic_write_bytes
from forestcoll.topology.model import Node, Topology

__all__ = ["FORMATS", "draw", "layout"]

FORMATS = ("png", "svg", "pdf")
_PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#ff7f0e")


def _short(node: Node) -> str:
    """A label: the name within its box, PCI bus ids cut to bus:device."""
    label = node.local_name
    if label.startswith("pci") and ":" in label:
        label = "pci " + label.split(":", 1)[1].rsplit(".", 1)[0]
    return label


def layout(topo: Topology) -> dict[str, tuple[float, float]]:
    """Positions for every node (x to the right, y up)."""
    names = [n.name for n in topo.nodes]
    n = len(names)
    if not topo.switch_nodes:
        import networkx as nx

        g = nx.Graph()
        g.add_nodes_from(names)
        g.add_edges_from((names[u], names[v]) for u, v, _ in topo.arcs)
        start = {name: (math.cos(2 * math.pi * i / n), math.sin(2 * math.pi * i / n)) for i, name in enumerate(names)}
        if n > 300:
            return start
        placed = nx.spring_layout(g, pos=start, seed=1, iterations=300)
        return {name: (float(xy[0]) * n**0.5, float(xy[1]) * n**0.5) for name, xy in placed.items()}
    adj: dict[int, set[int]] = defaultdict(set)
    for u, v, _ in topo.arcs:
        adj[u].add(v)
        adj[v].add(u)
    level = [-1] * n
    queue = deque(i for i in range(n) if topo.is_compute[i])
    for i in queue:
        level[i] = 0
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            if level[v] < 0:
                level[v] = level[u] + 1
                queue.append(v)
    ranks = [i for i in range(n) if topo.is_compute[i]]
    pos: dict[str, tuple[float, float]] = {}
    gap = 1.0
    x = 0.0
    last_box = None
    for i in ranks:
        box = topo.nodes[i].box
        if last_box is not None and box != last_box:
            x += gap  # space between boxes
        pos[names[i]] = (x, 0.0)
        x += 1.0
        last_box = box
    width = max(x - 1.0, 1.0)
    # switches: centred over the ranks / switches below them they connect to
    for lvl in range(1, max(level) + 1):
        row = [i for i in range(n) if level[i] == lvl]
        wanted = []
        for i in row:
            below = [pos[names[j]][0] for j in adj[i] if names[j] in pos and level[j] < lvl]
            wanted.append((sum(below) / len(below) if below else width / 2, i))
        wanted.sort()
        # switches serving one node below sit on the row; those serving many half a row higher
        for shared in (False, True):
            sub = [(w, i) for w, i in wanted if (len([j for j in adj[i] if level[j] < lvl]) > 1) == shared]
            min_gap = min(1.0, width / max(len(sub), 1) * 0.8)
            placed: list[float] = []
            for want, i in sub:
                xx = want if not placed or want - placed[-1] >= min_gap else placed[-1] + min_gap
                placed.append(xx)
                pos[names[i]] = (xx, 1.6 * lvl + (0.7 if shared else 0.0))
            if placed and placed[-1] > width:  # pull the row back inside
                shift = (placed[-1] - width) / 2
                for _, i in sub:
                    pos[names[i]] = (pos[names[i]][0] - shift, pos[names[i]][1])
    for i in range(n):  # unreachable switches (not connected to anything)
        pos.setdefault(names[i], (width / 2, -1.6))
    return pos


def draw(topo: Topology, path: str, cut: tuple[str, ...] = (), title: str | None = None) -> None:
    """Write a picture of ``topo`` to ``path`` (.png, .svg or .pdf), highlighting ``cut`` if given."""
    fmt = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if fmt not in FORMATS:
        raise UsageError(f"{path}: unknown picture format {fmt!r}; use .png, .svg or .pdf")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    pos = layout(topo)
    inside = set(cut)
    n = len(topo.nodes)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    span_x = max(xs) - min(xs) + 2
    span_y = max(ys) - min(ys) + 2
    fig = Figure(figsize=(min(max(6.0, span_x * 0.35), 40.0), min(max(4.0, span_y * 0.9), 24.0)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_axis_off()
    # one line per node pair, width by the larger direction's bandwidth
    pairs: dict[tuple[str, str], tuple[Fraction, str]] = {}
    for lk in topo.links:
        key = (min(lk.src, lk.dst), max(lk.src, lk.dst))
        bw, cls = pairs.get(key, (Fraction(0), lk.cls))
        pairs[key] = (max(bw, topo.capacity[(lk.src, lk.dst)]), cls or lk.cls)
    classes = sorted({cls for _, cls in pairs.values()})
    colour = {cls: _PALETTE[i % len(_PALETTE)] for i, cls in enumerate(classes)}
    top = max((bw for bw, _ in pairs.values()), default=Fraction(1))
    crossing = {(a, b) for a, b in topo.capacity if a in inside and b not in inside}
    arcs = bool(topo.switch_nodes)  # ranks sit on one line: draw rank-to-rank links as arcs below it
    for (a, b), (bw, cls) in pairs.items():
        (x1, y1), (x2, y2) = pos[a], pos[b]
        lw = 0.4 + 3.0 * math.log1p(float(bw)) / math.log1p(float(top))
        is_cut = (a, b) in crossing or (b, a) in crossing
        if arcs and y1 == y2 == 0.0:
            t = [k / 24 for k in range(25)]
            depth = 0.35 + 0.12 * abs(x2 - x1)
            px = [x1 + (x2 - x1) * u for u in t]
            py = [-depth * 4 * u * (1 - u) for u in t]
        else:
            px, py = [x1, x2], [y1, y2]
        ax.plot(px, py, color="#d62728" if is_cut else colour[cls], linewidth=lw * (1.6 if is_cut else 1),
                alpha=0.9 if is_cut else 0.55, zorder=1)
    size = 260 if n <= 40 else (120 if n <= 200 else 30)
    for node in topo.nodes:
        x, y = pos[node.name]
        face = "#ff7f0e" if node.name in inside else ("#4c72b0" if node.kind == "compute" else "#dddddd")
        ax.scatter([x], [y], s=size, marker="o" if node.kind == "compute" else "s", c=face, edgecolors="#333333",
                   linewidths=0.6, zorder=3)
        if n <= 80 or (node.kind == "compute" and n <= 400):
            ax.annotate(_short(node), (x, y), xytext=(0, -11 if node.kind == "compute" else 9),
                        textcoords="offset points", ha="center", va="center", fontsize=6, zorder=4)
    handles = [Line2D([0], [0], color=colour[c], lw=2, label=c or "link") for c in classes]
    if inside:
        handles.append(Line2D([0], [0], color="#d62728", lw=2.5, label="links leaving the cut S"))
        handles.append(Line2D([0], [0], marker="o", color="w", markerfacecolor="#ff7f0e", markersize=8, label="nodes in S"))
    handles.append(Line2D([0], [0], marker="o", color="w", markerfacecolor="#4c72b0", markersize=8, label="rank (compute)"))
    handles.append(Line2D([0], [0], marker="s", color="w", markerfacecolor="#dddddd", markeredgecolor="#333333", markersize=8, label="switch"))
    ax.legend(handles=handles, loc="upper left", fontsize=7, frameon=False, bbox_to_anchor=(0, 1.0))
    ax.set_title(title or topo.name, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    atomic_write_bytes(path, buf.getvalue())
