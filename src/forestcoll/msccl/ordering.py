"""Step order keys, piece cutting and pipeline units of the MSCCL lowering (:mod:`forestcoll.msccl.export`).

Pure functions over the schedule's tree shapes and pieces: which NIC port an edge takes, a tree node's level in
physical links, how far into its trees a piece starts (the progress order), how many hops a piece still has ahead
(critical path first), even pieces per tree range, the pipeline units a file gives its trees at a call size, and
uneven channel bands.  docs/msccl.md ("Step order", "Where the time goes at 1 GiB") says what each one buys.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from forestcoll.msccl.semantics import MAX_COUNT
from forestcoll.pieces import RUNTIME_SLICE_BYTES, Piece, TreeShape, cut_pieces, slices_for
from forestcoll.schedule import Schedule

__all__ = ["AUTO_MIN_BYTES", "AUTO_SPLITS", "AUTO_UNITS", "DESIGN_BYTES", "edge_ports", "stages"]

DESIGN_BYTES = 1 << 30  # the call size the automatic piece choice aims at (the file's max_bytes when set)
AUTO_UNITS = 16  # ... it keeps the classic pieces when every tree moves in at least this many units there
AUTO_MIN_BYTES = 256 << 20  # ... for files used up to this size or beyond (Simple protocol): smaller ranges get
#                             their split files from the per-size selection, which simulates them
AUTO_SPLITS = (8, 16)  # ... else it tries every tree's range in s pieces of s MSCCL chunks per chunk


def edge_ports(sched: Schedule, trees: list[TreeShape]) -> dict[tuple[int, int, int], tuple[int, int]]:
    """(i, p) for the edge x -> y of each tree (by ``(id(tree), x, y)``) whose pair of ranks the schedule routes
    over p >= 2 distinct shortest paths (the ports of a multi-port NIC, two rails): the edge's path is the i-th of
    them by node names.  A runtime picks a pair's port by channel, so edges on different paths go on channels
    that differ modulo p (:func:`_build_ops`), as the trees spread their bytes over the ports."""
    index = {r: i for i, r in enumerate(sched.ranks)}
    paths: dict[tuple[int, int], set[tuple[str, ...]]] = defaultdict(set)
    edge_path: dict[tuple[int, int, int], tuple[str, ...]] = {}
    for shape, tree in zip(trees, sched.trees):
        for e in tree.edges:
            x, y = index[e.src], index[e.dst]
            paths[(x, y)].add(e.path)
            edge_path[(id(shape), x, y)] = e.path
    ports: dict[tuple[int, int], list[tuple[str, ...]]] = {}
    for pair, found in paths.items():
        short = min(len(p) for p in found)
        ports[pair] = sorted(p for p in found if len(p) == short)
    out = {}
    for (tid, x, y), path in edge_path.items():
        these = ports[(x, y)]
        if len(these) > 1:
            out[(tid, x, y)] = (these.index(path) if path in these else 0, len(these))
    return out


def _hop_levels(sched: Schedule, trees: list[TreeShape]) -> dict[tuple[int, int], int]:
    """A level per (id(tree), node) in physical links: out-tree, links from the root; in-tree, links of the longest
    leaf path until the node's data reaches its parent.  Dependencies still point to smaller levels (>= 1 link)."""
    index = {r: i for i, r in enumerate(sched.ranks)}
    out: dict[tuple[int, int], int] = {}
    for shape, tree in zip(trees, sched.trees):
        links = {(index[e.src], index[e.dst]): max(1, len(e.path) - 1) for e in tree.edges}
        tid, p = id(shape), shape.parent
        for v in sorted(shape.level, key=lambda x: (shape.level[x], x)):  # parents first (out), children first (in)
            if shape.direction == "out":
                out[(tid, v)] = 0 if v == shape.root else out[(tid, p[v])] + links[(p[v], v)]
            else:
                out[(tid, v)] = max((out[(tid, c)] for c in shape.children.get(v, [])), default=0) + (
                    links[(v, p[v])] if v != shape.root else 0)
    return out


def _progress(pieces: list[Piece]) -> dict[int, Fraction]:
    """How far into its trees each piece starts (by ``id``): the largest, over its phases, of the chunks of the
    tree before it over the tree's chunks.  In the fluid schedule behind the bound every tree streams its chunks
    in order at a rate proportional to its size, so that is the fraction of the call after which the piece's data
    reaches a given depth: pieces of different trees on one connection go in that order."""
    lo: dict[int, int] = {}
    hi: dict[int, int] = {}
    for pc in pieces:
        for t in pc.trees:
            lo[id(t)] = min(lo.get(id(t), pc.start), pc.start)
            hi[id(t)] = max(hi.get(id(t), 0), pc.start + pc.cnt)
    return {id(pc): max(Fraction(pc.start - lo[id(t)], hi[id(t)] - lo[id(t)]) for t in pc.trees) for pc in pieces}


def _pieces_per_range(pieces: list[Piece], pick: Callable[[list[int]], int] = min) -> int:
    """The fewest (``pick=max``: the most) pieces one range of chunks (one tree per phase, one root) is cut into."""
    per: dict[tuple, int] = defaultdict(int)
    for pc in pieces:
        per[(pc.root, tuple(id(t) for t in pc.trees))] += 1
    return pick(per.values())


def _units(pieces: list[Piece], nchunks: int, design: int) -> int:
    """The fewest pipeline units a tree's range moves in per call of ``design`` bytes: its pieces (steps) times the
    runtime's loop iterations over each MSCCL chunk (two slices of at most 1 MiB each; :func:`slices_for`).  A
    stage of a tree waits for one unit of the stage before it, so a tree moved in few units fills its pipeline
    late; under fair sharing by volume its small stream never catches up."""
    iterations = slices_for(design / nchunks, RUNTIME_SLICE_BYTES, None, rule="ring")
    return _pieces_per_range(pieces) * iterations


def _even_pieces(sched: Schedule, trees: list[TreeShape], per: int, split: int) -> tuple[int, list[Piece]]:
    """:func:`cut_pieces` with every range of chunks that lies in one tree per phase cut into ``per`` pieces
    (as even as the chunks allow, at most ``MAX_COUNT`` chunks each): a tree carrying few chunks moves them in as
    many steps as one carrying many, so every connection's stream has as many pipeline units and a stage waits for
    a unit of each tree's own size, not of the largest tree's."""
    k, whole = cut_pieces(sched, trees, 1 << 40, split)
    out: list[Piece] = []
    for pc in whole:
        m = min(pc.cnt, max(per, -(-pc.cnt // MAX_COUNT)))
        q, r = divmod(pc.cnt, m)
        x = pc.start
        for j in range(m):
            c = q + (j < r)
            out.append(Piece(pc.root, x, c, pc.trees))
            x += c
    return k, out


def _tails(pieces: list[Piece]) -> dict[tuple[int, int, int], int]:
    """Hops a piece still has to go once it reaches node x of tree t, by ``(id(piece), id(tree), x)``: in an
    in-tree the hops from x to the root, plus the height of the piece's out-tree (allreduce); in an out-tree the
    height of x's subtree.  The "tail" order sends, among steps of equal progress and level, the pieces with the
    longest way ahead first (critical path first), so the deep trees' pipelines fill before the shallow ones'."""
    up: dict[tuple[int, int], int] = {}
    below: dict[tuple[int, int], int] = {}
    height: dict[int, int] = {}
    for pc in pieces:
        for t in pc.trees:
            if id(t) in height:
                continue
            if t.direction == "in":
                for v in sorted(t.level, key=lambda x: -t.level[x]):  # parents before children
                    up[(id(t), v)] = 0 if v == t.root else up[(id(t), t.parent[v])] + 1
                height[id(t)] = t.level[t.root]
            else:
                for v in sorted(t.level, key=lambda x: -t.level[x]):  # children before parents
                    below[(id(t), v)] = max((below[(id(t), c)] + 1 for c in t.children.get(v, [])), default=0)
                height[id(t)] = below[(id(t), t.root)]
    out: dict[tuple[int, int, int], int] = {}
    for pc in pieces:
        after = sum(height[id(t)] for t in pc.trees if t.direction == "out")
        for t in pc.trees:
            for x in t.level:
                out[(id(pc), id(t), x)] = up[(id(t), x)] + after if t.direction == "in" else below[(id(t), x)]
    return out


def _mix(value: int) -> int:
    """A fixed integer hash (splitmix64's finaliser): deterministic on every platform."""
    z = (value + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def _bands(loads: list[int], channels: int) -> list[int]:
    """Channels per stage, ``channels`` in all, at least one each: every further channel goes to the stage whose
    blocks hold the most steps per channel (ties to the earlier stage), so the busiest stages' blocks get fewer
    trees each and pass their pieces on sooner."""
    widths = [1] * len(loads)
    for _ in range(channels - len(loads)):
        st = max(range(len(loads)), key=lambda i: (loads[i] / widths[i], -i))
        widths[st] += 1
    return widths


def stages(pieces: list[Piece]) -> tuple[int, int]:
    """(number of pipeline stages, first stage of the out-trees): an in-tree edge out of a node whose subtree
    has height h is stage h; an out-tree edge into depth d is stage base + d - 1, base = the largest in-tree
    height (0 without in-trees).  Every dependency points from a smaller stage to a larger one."""
    h_in = max((t.level[t.root] for pc in pieces for t in pc.trees if t.direction == "in"), default=0)
    d_out = max((max(t.level.values()) for pc in pieces for t in pc.trees if t.direction == "out"), default=0)
    return h_in + d_out, h_in


def _stage(t: TreeShape, x: int, y: int, base: int) -> int:
    return t.level[x] if t.direction == "in" else base + t.level[y] - 1


def _channel_of(pieces: list[Piece], channels: int, layout: str, ports: dict[tuple[int, int, int], tuple[int, int]] | None,
                spread_band: bool, widths: list[int] | None, heavy: dict[tuple[int, int, int], int] | None = None
                ) -> Callable[[TreeShape, int, int, int], int]:
    """``chan_of(tree, instance, x, y)``: the channel of the edge x -> y of a tree with ``channels`` per instance (the
    layouts of :mod:`forestcoll.msccl.export`; ``heavy``, :func:`_heavy_offsets`, moves edges within their stage's
    band when ``spread_band`` is off); every piece of one tree takes one channel on each of its edges."""
    n_stages, out_base = stages(pieces)
    starts = [sum(widths[:i]) for i in range(len(widths))] if widths is not None else []

    def chan_of(t: TreeShape, m: int, x: int, y: int) -> int:
        spread = (t.order + _mix(x * 65599 + y))
        if layout == "tree":
            # trees round robin on each edge, shifted by a hash of the edge so that a node's fan-out spreads too
            return m * channels + spread % channels
        st = _stage(t, x, y, out_base)
        port = ports.get((id(t), x, y)) if ports else None
        if widths is not None:  # uneven bands: a stage's width by its load (_bands)
            lo, per = starts[st], widths[st]
            c = lo + spread % per
        elif channels >= n_stages:  # a band of channels per stage, trees round robin within it
            lo, per = st * (channels // n_stages), channels // n_stages
            c = lo + spread % per
        else:
            lo, per = 0, 0
            c = st * channels // n_stages  # neighbouring stages share a channel
        if port is not None and channels >= port[1]:
            i, p = port  # a channel of the port's residue (the runtime picks the port by channel mod p): within
            #              the stage's band when it is a multiple of p wide, else the nearest
            if per and per % p == 0:
                c = lo + (spread % (per // p)) * p + i
            else:
                c = c - c % p + i
                if c >= channels:
                    c -= p
        elif not spread_band and channels >= n_stages:
            c = lo + (heavy.get((id(t), x, y), 0) if heavy else 0)  # the band is for the ports (and heavy edges)
        return m * channels + c

    return chan_of


def _edges(t: TreeShape) -> list[tuple[int, int]]:
    """The edges x -> y of a tree in the direction its data moves (children to parents in an in-tree)."""
    if t.direction == "in":
        return [(c, v) for v in t.level for c in t.children.get(v, [])]
    return [(t.parent[v], v) for v in t.level if v != t.root]


def _tree_loads(pieces: list[Piece]) -> tuple[dict[int, int], dict[int, TreeShape]]:
    """(pieces each tree carries, the trees), by ``id``."""
    load: dict[int, int] = defaultdict(int)
    shapes: dict[int, TreeShape] = {}
    for pc in pieces:
        for t in pc.trees:
            load[id(t)] += 1
            shapes[id(t)] = t
    return load, shapes


def _heavy_offsets(pieces: list[Piece], channels: int, ports: dict[tuple[int, int, int], tuple[int, int]] | None,
                   limit: int) -> dict[tuple[int, int, int], int]:
    """(id(tree), x, y) -> channel of its stage's band (an offset) for the edges of a pair of ranks whose trees would
    put more than ``limit`` steps in one thread block with one channel per stage: that pair's trees of the stage go
    on the fewest channels of the band (``channels`` // stages wide) that could keep each within ``limit``, the most
    loaded tree first to the least loaded channel (ties to the lower).  Edges of multi-port pairs (``ports``) keep
    their port's channel.  So a band opens only where a block needs it: the thread blocks per GPU grow by those."""
    n_stages, out_base = stages(pieces)
    per = channels // max(1, n_stages)
    load, shapes = _tree_loads(pieces)
    groups: dict[tuple[int, int, int], list[tuple[int, int, int]]] = defaultdict(list)
    for tid, t in shapes.items():
        for x, y in _edges(t):
            if not ports or (tid, x, y) not in ports:
                groups[(x, y, _stage(t, x, y, out_base))].append((load[tid], t.order, tid))
    out: dict[tuple[int, int, int], int] = {}
    for (x, y, _st), trees in sorted(groups.items()):
        ways = min(per, -(-sum(q[0] for q in trees) // limit))
        if ways < 2:
            continue
        bins = [0] * ways
        for cnt, _order, tid in sorted(trees, key=lambda q: (-q[0], q[1])):
            j = min(range(ways), key=lambda i: (bins[i], i))
            bins[j] += cnt
            out[(tid, x, y)] = j
    return out


def _predicted_figures(pieces: list[Piece], n: int, instances: int, chan_of: Callable[[TreeShape, int, int, int], int],
                       copy_first: bool, two_phase: bool) -> tuple[int, int, int, int]:
    """:func:`_channel_figures` of the operations :func:`forestcoll.msccl.export._build_ops` would build with
    ``chan_of``, without building them (:func:`_step_counts`)."""
    return _figures_of(_step_counts(pieces, instances, chan_of, copy_first, two_phase), n)


def _step_counts(pieces: list[Piece], instances: int, chan_of: Callable[[TreeShape, int, int, int], int],
                 copy_first: bool, two_phase: bool) -> dict[tuple, int]:
    """Steps of each (gpu, kind, peer, channel) thread block of the operations
    :func:`forestcoll.msccl.export._build_ops` would build with ``chan_of``, counted per tree edge (each of a tree's
    pieces is one send and one receive on every edge, on the edge's one channel; an out-of-place root without
    reduction copies each piece once, on channel 0)."""
    per_tree, shapes = _tree_loads(pieces)
    copies: dict[int, int] = defaultdict(int)
    for pc in pieces:
        for t in pc.trees:
            if copy_first and not two_phase and t.direction == "out":
                copies[pc.root] += instances
    steps: dict[tuple, int] = defaultdict(int)
    for tid, t in shapes.items():
        cnt = per_tree[tid]
        for m in range(instances):
            for x, y in _edges(t):
                ch = chan_of(t, m, x, y)
                steps[(x, "send", y, ch)] += cnt
                steps[(y, "recv", x, ch)] += cnt
    for root, cnt in copies.items():
        steps[(root, "local", -1, 0)] += cnt
    return steps


def _channel_figures(ops: list[Any], n: int) -> tuple[int, int, int, int]:
    """(most steps in a tb, most tbs on a GPU, most send or receive tbs of one GPU on one channel, most receiving
    and copying tbs on a GPU: the dependency targets) of an assignment."""
    steps: dict[tuple, int] = defaultdict(int)
    for op in ops:
        steps[(op.gpu, op.kind, op.peer, op.chan)] += 1
    return _figures_of(steps, n)


def _figures_of(steps: dict[tuple, int], n: int) -> tuple[int, int, int, int]:
    """:func:`_channel_figures` from the step count of each (gpu, kind, peer, channel) thread block."""
    tbs = [0] * n
    targets = [0] * n
    per_channel: dict[tuple, int] = defaultdict(int)
    for g, kind, _peer, chan in steps:
        tbs[g] += 1
        targets[g] += kind != "send"
        if kind != "local":
            per_channel[(g, kind, chan)] += 1
    return max(steps.values(), default=0), max(tbs), max(per_channel.values(), default=0), max(targets)
