"""Schedules as the lowering stages see them: trees as parent maps with levels, and chunk pieces.

Both the MSCCL exporter and the simulator cut every root's k chunks into
*pieces* that lie in exactly one tree of each phase (for allreduce the
reduce-scatter and allgather trees of a root split its chunks differently), and
walk each tree from its parent links: out-trees from the root down, in-trees
from the leaves up.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from forestcoll import collectives
from forestcoll.errors import ScheduleError
from forestcoll.schedule import Schedule, ScheduleTree

__all__ = [
    "MIN_SLICES", "MIN_SLICE_BYTES", "RULES", "RUNTIME_SLICE_BYTES", "Piece", "TreeShape", "cut_pieces", "piece_rule",
    "schedule_shards", "shape_trees", "slices_for", "tree_chunk", "tree_height", "tree_shape",
]


@dataclass(frozen=True)
class TreeShape:
    """A tree of the schedule by rank numbers: parent links, levels, children (sorted)."""

    order: int  # position among its phase's trees
    phase: int
    name: str
    direction: str
    root: int
    parent: dict[int, int]  # out: parent of each non-root; in: next hop toward the root
    level: dict[int, int]  # out: depth of each node; in: height of its subtree
    children: dict[int, list[int]]


def tree_shape(tree: ScheduleTree, order: int, phase: int, index: dict[str, int], where: str) -> TreeShape:
    """Parent links and levels of a spanning tree, checking that it is one."""
    if tree.root not in index:
        raise ScheduleError(f"{where}: root {tree.root!r} is not a rank")
    root = index[tree.root]
    parent: dict[int, int] = {}
    for e in tree.edges:
        if e.src not in index or e.dst not in index:
            raise ScheduleError(f"{where}: edge {e.src} -> {e.dst} names a node that is not a rank")
        u, v = index[e.src], index[e.dst]
        child, par = (v, u) if tree.direction == "out" else (u, v)
        if child == root or child in parent:
            raise ScheduleError(f"{where}: {e.src} -> {e.dst} gives rank {child} a second "
                                f"{'parent' if tree.direction == 'out' else 'next hop'}")
        parent[child] = par
    if len(parent) != len(index) - 1:
        raise ScheduleError(f"{where}: the tree reaches {len(parent) + 1} of {len(index)} ranks")
    children: dict[int, list[int]] = defaultdict(list)
    for c, p in parent.items():
        children[p].append(c)
    depth = {root: 0}
    stack = [root]
    while stack:
        v = stack.pop()
        for c in children[v]:
            depth[c] = depth[v] + 1
            stack.append(c)
    if len(depth) != len(index):
        raise ScheduleError(f"{where}: the edges do not form a tree rooted at {tree.root}")
    if tree.direction == "out":
        level = depth
    else:
        level = {}
        for v in sorted(depth, key=lambda x: -depth[x]):
            level[v] = 1 + max((level[c] for c in children[v]), default=-1)
    for v in children:
        children[v].sort()
    return TreeShape(order, phase, tree.phase, tree.direction, root, parent, level, dict(children))


def tree_height(shape: TreeShape) -> int:
    """Hops from the root to the deepest rank (out-trees) or from the farthest leaf to the root (in-trees)."""
    return max(shape.level.values(), default=0)


def piece_rule(trees: tuple[TreeShape, ...] | list[TreeShape], rooted: bool) -> tuple[str, int]:
    """The runtime rule (and depth) a piece moving on ``trees`` is cut by (:func:`slices_for`): NCCL's tree rule
    for the height of its trees; a piece whose trees are all chains (every rank feeds at most one) is a ring
    channel's block, cut as NCCL cuts rings (``"ring"``; ``"step"`` for a rooted collective's chain, as NCCL's
    broadcast / reduce)."""
    if all(len(c) <= 1 for t in trees for c in t.children.values()):
        return ("step" if rooted else "ring"), 0
    return "tree", max(tree_height(t) for t in trees)


def shape_trees(sched: Schedule) -> list[TreeShape]:
    """Every tree of ``sched`` with its parent links and levels, numbered within its phase (checks they are trees)."""
    index = {r: i for i, r in enumerate(sched.ranks)}
    coll = collectives.get(sched.collective)
    phases = coll.phase_names
    phase_index = {name: i for i, name in enumerate(phases)}
    counters: dict[int, int] = defaultdict(int)
    trees: list[TreeShape] = []
    for i, t in enumerate(sched.trees):
        if t.phase not in phase_index:
            raise ScheduleError(f"trees[{i}]: phase {t.phase!r} does not belong to a {sched.collective} schedule")
        ph = phase_index[t.phase]
        trees.append(tree_shape(t, counters[ph], ph, index, f"trees[{i}]"))
        counters[ph] += 1
    if coll.rooted and len({t.root for t in trees}) != 1:
        raise ScheduleError(f"a {sched.collective} schedule must have one root")
    for name, ph in phase_index.items():  # every phase has trees, from every rank unless one root serves all
        roots = {t.root for t in trees if t.phase == ph}
        missing = [] if coll.rooted and roots else [r for r in sched.ranks if index[r] not in roots]
        if missing:
            raise ScheduleError(f"the {name} phase has no trees rooted at {missing[0]} ({len(missing)} of "
                                f"{len(index)} ranks without trees)")
    return trees


@dataclass(frozen=True)
class Piece:
    """``cnt`` consecutive chunks of ``root``'s k (k*w_root with shard weights), from ``start``, and the tree of
    each phase that carries them."""

    root: int  # rank whose shard it is (the root, for broadcast / reduce)
    start: int  # first chunk within the root's k (per instance)
    cnt: int
    trees: tuple[TreeShape, ...]  # one per phase


def schedule_shards(sched: Schedule) -> int:
    """Shards of the buffer the schedule's chunks are counted in (D of its k*D chunks): the sum of the shard
    weights (the ranks, for equal shards) for allgather / reduce-scatter / allreduce; 1 for broadcast / reduce."""
    coll = collectives.get(sched.collective)
    return 1 if coll.rooted else sum(sched.weights)


def cut_pieces(sched: Schedule, trees: list[TreeShape], max_cnt: int, split: int = 1) -> tuple[int, list[Piece]]:
    """Cut every root's chunks so each piece lies in one tree per phase and moves at most ``max_cnt`` chunks; with
    ``split`` every chunk of the schedule first becomes ``split`` chunks (the k returned is k x split).  Root r
    holds k chunks, k*w_r with shard weights (:attr:`Schedule.shard_weights`)."""
    phases = sorted({t.phase for t in trees})
    ks = {p.name: p.k for p in sched.phases}
    names = [next(t.name for t in trees if t.phase == ph) for ph in phases]
    k = math.lcm(*(ks.get(nm, sched.k) for nm in names))
    by_root: dict[tuple[int, int], list[tuple[int, int, TreeShape]]] = defaultdict(list)
    weight = (1,) * len(sched.ranks) if collectives.get(sched.collective).rooted else sched.weights
    for ph, nm in zip(phases, names):
        scale = k // ks.get(nm, sched.k)
        cursor: dict[int, int] = defaultdict(int)
        for t, st in zip(trees, sched.trees):
            if t.phase != ph:
                continue
            c = st.chunks * scale
            by_root[(ph, t.root)].append((cursor[t.root], cursor[t.root] + c, t))
            cursor[t.root] += c
        for r, total in cursor.items():
            if total != k * weight[r]:
                want = f"k={k // scale}" if weight[r] == 1 else f"k*w={k // scale * weight[r]} (shard weight {weight[r]})"
                raise ScheduleError(f"the {nm} trees of rank {r} carry {total // scale} chunks, not {want}")
    roots = sorted({t.root for t in trees})
    pieces: list[Piece] = []
    for r in roots:
        cuts = {0, k * weight[r]}
        for ph in phases:
            for a, b, _t in by_root[(ph, r)]:
                cuts.update((a, b))
        bounds = sorted(cuts)
        for a, b in zip(bounds, bounds[1:]):
            owners = tuple(next(t for lo, hi, t in by_root[(ph, r)] if lo <= a < hi) for ph in phases)
            x, b = a * split, b * split
            while x < b:
                c = min(max_cnt, b - x)
                pieces.append(Piece(r, x, c, owners))
                x += c
    return k * split, pieces


MIN_SLICES = 8  # the fixed rule: smaller blocks are still cut this fine ...
MIN_SLICE_BYTES = 64 << 10  # ... down to slices of this size
FIXED_MAX_SLICES = 16  # ... and at most this many where the fixed rule stays (all-to-all and its MSCCL++ plans)

# The runtimes' pipelining (NCCL; MSCCL-on-NCCL uses the same connection buffers), in units of the
# *slice* a ring moves per step: NCCL_BUFFSIZE (4 MiB) / NCCL_STEPS (8) = a 512 KiB step; a ring chunk is
# ALLREDUCE_CHUNKSTEPS = 4 steps moved as 2 slices of ALLREDUCE_SLICESTEPS = 2 steps, so the default slice is
# 1 MiB.  docs/simulate.md ("How messages are cut") cites the source lines.
RUNTIME_SLICE_BYTES = 1 << 20  # NCCL_BUFFSIZE / NCCL_STEPS x SLICESTEPS (2)
SLICES_PER_CHUNK = 2  # CHUNKSTEPS / SLICESTEPS: a ring / MSCCL chunk moves as this many slices
TREE_FLOORS = ((8, 128 << 10), (4, 64 << 10), (1, 32 << 10))  # NCCL tree: halve while chunks < d x m and chunk > floor
RULES = ("fixed", "tree", "ring", "step")


def tree_chunk(nbytes: float, depth: int, slice_bytes: float = RUNTIME_SLICE_BYTES) -> float:
    """NCCL's tree chunk (Simple protocol) for ``nbytes`` on one channel of a tree ``depth`` hops deep: one step
    (``slice_bytes`` / 2), halved while the channel has fewer than 8 x depth chunks and the chunk is above 128 KiB,
    then fewer than 4 x depth above 64 KiB, then fewer than depth above 32 KiB (integer chunk counts, as NCCL)."""
    chunk = slice_bytes / 2
    for mult, floor in TREE_FLOORS:
        while nbytes // chunk < depth * mult and chunk > floor:
            chunk /= 2
    return chunk


def slices_for(nbytes: float, slice_bytes: float, max_slices: int | None, min_slices: int = MIN_SLICES, *,
               rule: str = "fixed", depth: int = 0) -> int:
    """How many pipeline slices a block of ``nbytes`` is cut into (at most ``max_slices``; None: no cap).

    ``rule="fixed"`` (the simulator's rule before the runtimes' own; all-to-all and its MSCCL++ plans keep
    it): about ``slice_bytes`` each, at least ``min_slices`` while slices stay >= ``MIN_SLICE_BYTES`` (rings pass ``min_slices=1``).
    The runtimes' rules (``slice_bytes``: a ring's slice, NCCL_BUFFSIZE / 4; default 1 MiB):

    * ``"tree"``: chunks of :func:`tree_chunk` for a tree ``depth`` hops deep (NCCL's tree);
    * ``"ring"``: chunks of 2 x ``slice_bytes``, each moved as 2 slices, a slice never below ``slice_bytes`` / 32
      (NCCL's ring and the MSCCL interpreter kernel: a chunk of one loop iteration, 2 slices per primitive);
    * ``"step"``: chunks of one step, ``slice_bytes`` / 2 (NCCL's broadcast / reduce chains, point-to-point).
    """
    if rule == "fixed":
        wanted = max(math.ceil(nbytes / slice_bytes), min(min_slices, int(nbytes // MIN_SLICE_BYTES)))
    elif rule == "tree":
        wanted = math.ceil(nbytes / tree_chunk(nbytes, depth, slice_bytes))
    elif rule == "ring":
        chunk = SLICES_PER_CHUNK * slice_bytes
        full, rest = divmod(nbytes, chunk)
        wanted = SLICES_PER_CHUNK * int(full)
        if rest > 0:
            wanted += min(SLICES_PER_CHUNK, math.ceil(rest / (slice_bytes / 32)))
    elif rule == "step":
        wanted = math.ceil(nbytes / (slice_bytes / 2))
    else:
        raise ValueError(f"unknown slicing rule {rule!r}; choose from {', '.join(RULES)}")
    wanted = max(1, wanted)
    return wanted if max_slices is None else min(max_slices, wanted)
