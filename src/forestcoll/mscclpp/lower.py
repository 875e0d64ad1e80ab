"""Tree schedules as actions on GPUs, and the channel each tree edge takes (the first stage of the MSCCL++ export).

*Boxes.*  A box is a set of GPUs that map each other's memory (CUDA / HIP IPC:
one host, or one NVLink domain): the topology records it per node
(:attr:`forestcoll.topology.Node.box`, set by the built-in families, the
NCCL/RCCL importer, declarative files and the plain JSON's ``"box"``).  A
topology that records no box is one box.

*Channel per tree edge.*  A tree edge whose physical path (in the schedule)
stays on links between nodes of its box is a memory channel (the GPU's threads
copy over the peer link); an edge whose path leaves the box (another box's
GPU, or two GPUs of one box joined through the network, which optimal trees use
where the box's own links are full) is a port channel (the host proxy posts
the copy).  The executor (1f5f065, ``executor.cc``) carries a port channel
between two IPC domains over the rank's NIC and one inside an IPC domain over
CUDA IPC; docs/mscclpp.md says what that means for such edges.

*Actions* (one data operation per pipeline iteration, on one GPU):

* out-tree edge u -> v: u *puts* the piece into v's output, once it has
  arrived at u (or, at an allreduce root, once its reduction is done); a leaf v
  only *waits* for it;
* in-tree node v with children: v reduces its input with each child's partial
  sum into its own partial: children on memory channels are *read* from their
  memory (``rre``, no scratch), children on port channels first *push* their
  partial into a scratch slot of v; partial sums live in the output (allreduce)
  or in scratch (reduce-scatter, reduce), the root's in its output.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from forestcoll import collectives
from forestcoll.errors import UsageError
from forestcoll.pieces import Piece, TreeShape, shape_trees
from forestcoll.schedule import Schedule
from forestcoll.shard_pieces import refuse_weighted, weighted_pieces
from forestcoll.topology import Topology

__all__ = ["SINK_LEVEL", "Act", "Lowering", "Ref", "box_numbers", "plan_chunks", "port_edges"]

SINK_LEVEL = 1 << 20  # sinks only wait: one group per phase, after every level


# ----- boxes and channels ---------------------------------------------------------------------------


def box_numbers(sched: Schedule, topology: Topology) -> tuple[int, ...]:
    """The box of every rank of ``sched`` (numbered from 0 in rank order) as ``topology`` records it; ranks
    without a box share one."""
    nodes = _nodes(sched, topology)
    ids: dict[str | None, int] = {}
    return tuple(ids.setdefault(nodes[r].box, len(ids)) for r in sched.ranks)


def port_edges(sched: Schedule, topology: Topology) -> list[set[tuple[int, int]]]:
    """Per tree of ``sched`` (in file order), the data-flow rank pairs (sender, receiver) whose physical path
    leaves the sender's box: the edges that take a port channel."""
    nodes = _nodes(sched, topology)
    index = {r: i for i, r in enumerate(sched.ranks)}
    out = []
    for tree in sched.trees:
        leaving = set()
        for e in tree.edges:
            box = nodes[e.src].box
            path = e.path or (e.src, e.dst)
            for name in path:
                if name not in nodes:
                    raise UsageError(f"node {name!r} on the path {e.src} -> {e.dst} is not in "
                                     f"{topology.name or 'the topology'}")
            if any(nodes[name].box != box for name in path):
                leaving.add((index[e.src], index[e.dst]))
        out.append(leaving)
    return out


def plan_chunks(coll: collectives.Collective, n: int, k: int) -> tuple[int, int]:
    """(input_chunks, output_chunks) of every GPU of a plan of ``coll`` on ``n`` GPUs with ``k`` chunks per shard:
    a buffer holding only the rank's own shard has ``k``, one holding every shard ``shards(n) x k`` (weighted
    shards: ``n`` is the sum of the weights, :attr:`Lowering.shares`)."""
    full = coll.chunks_per_loop(n, k)
    return (k if coll.input == "own" else full), (k if coll.output == "own" else full)


def _nodes(sched: Schedule, topology: Topology) -> dict:
    nodes = {n.name: n for n in topology.nodes}
    for r in sched.ranks:
        if r not in nodes or nodes[r].kind != "compute":
            raise UsageError(f"rank {r!r} of the schedule is not a GPU of {topology.name or 'the topology'}: "
                             "pass the topology it was generated for")
    return nodes


# ----- actions ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ref:
    """A chunk range: on this GPU (``gpu`` None) or on GPU ``gpu`` (remote)."""

    type: str
    index: int
    size: int
    gpu: int | None = None


@dataclass(eq=False)
class Act:
    gpu: int
    key: tuple  # thread-block group: (phase, level, role, peer)
    order: tuple  # position inside its group's iteration
    cnt: int
    reduce_srcs: list[Ref] = field(default_factory=list)  # stage 0: dst = partial
    partial: Ref | None = None
    push: tuple[Ref, Ref, str] | None = None  # (src, remote dst, "memory" | "port"): stage 1
    copy: tuple[Ref, Ref] | None = None  # local copy (out-of-place roots)
    producers: list[tuple[Act, str]] = field(default_factory=list)  # (action, "push" | "pull" | "local")
    tb: int = -1  # position of its thread block on its GPU
    input_ref: Ref | None = None  # the reducing node's own contribution


class Lowering:
    """Builds the actions of a schedule (Simple protocol)."""

    def __init__(self, sched: Schedule, topology: Topology, outofplace: bool, lanes: int = 1) -> None:
        self.sched = sched
        self.topology = topology
        self.lanes = lanes
        self.taken = False  # an export took these actions over (it re-keys them): no other export may use them
        self.coll = sched.collective
        self.entry = collectives.get(sched.collective)
        self.boxes = box_numbers(sched, topology)
        self.outofplace = outofplace
        self.n = len(sched.ranks)
        self.trees = shape_trees(sched)
        self.ports = {id(t): edges for t, edges in zip(self.trees, port_edges(sched, topology))}
        if why := refuse_weighted(sched, "an MSCCL++ plan"):
            raise UsageError(why)
        # root r's k*w_r chunks from starts[r] (forestcoll.shard_pieces; equal shards: r*k)
        k, starts, pieces = weighted_pieces(sched, self.trees, 10**9)
        # lanes: every piece becomes ``lanes`` pieces (chunks ``lanes`` times finer) moved by blocks of their own
        self.k = k * lanes
        self.starts = tuple(s * lanes for s in starts)  # first buffer chunk of each rank's shard
        # units of shard weight (n with equal shards): the plan's chunk counts are those of this many equal shards
        self.shares = sum(sched.weights)
        self.pieces = [Piece(pc.root, pc.start * lanes + j * pc.cnt, pc.cnt, pc.trees)
                       for pc in pieces for j in range(lanes)]
        self.per_root = not self.entry.rooted
        self.scratch = [0] * self.n
        self.acts: list[Act] = []
        self.final: dict[tuple[int, int], Act] = {}  # (root, start) -> the in-tree root's reduction
        self._built = False

    def via(self, t: TreeShape, a: int, b: int) -> str:
        """The channel type of tree ``t``'s edge a -> b (data-flow direction): see the module docstring."""
        return "port" if (a, b) in self.ports[id(t)] or self.boxes[a] != self.boxes[b] else "memory"

    def slot(self, g: int, cnt: int) -> int:
        s = self.scratch[g]
        self.scratch[g] += cnt
        return s

    def base(self, pc: Piece) -> int:
        return self.starts[pc.root] + pc.start if self.per_root else pc.start

    def build(self) -> list[Act]:
        """The schedule's actions, built on the first call; later calls return the same list (as an export left it)."""
        if self._built:
            return self.acts
        self._built = True
        for pc in self.pieces:
            for t in pc.trees:
                if t.direction == "in":
                    self._in_tree(pc, t)
                else:
                    self._out_tree(pc, t)
        return self.acts

    def _add(self, act: Act) -> Act:
        self.acts.append(act)
        return act

    def _in_tree(self, pc: Piece, t: TreeShape) -> None:
        coll, cnt, base = self.coll, pc.cnt, self.base(pc)
        part: dict[int, Ref] = {}
        node: dict[int, Act] = {}
        kids = t.children
        for v in sorted(t.level, key=lambda x: (t.level[x], x)):
            children = kids.get(v, [])
            if v == t.root:
                part[v] = Ref("o", pc.start if coll in ("reduce_scatter", "reduce") else base, cnt)
            elif not children:
                part[v] = Ref("i", base, cnt)
            elif coll == "allreduce":
                part[v] = Ref("o", base, cnt)
            else:
                part[v] = Ref("s", self.slot(v, cnt), cnt)
            parent = t.parent.get(v)
            role_peer = parent if parent is not None else -1
            act = Act(v, (t.phase, t.level[v], "up", role_peer), (t.order, pc.root, pc.start), cnt)
            if children:
                srcs = []
                for c in children:
                    if self.via(t, c, v) == "memory":
                        srcs.append(Ref(part[c].type, part[c].index, cnt, gpu=c))
                        act.producers.append((node[c], "pull"))
                    else:
                        slot = self.slot(v, cnt)
                        srcs.append(Ref("s", slot, cnt))
                        src = part[c]
                        node[c].push = (Ref(src.type, src.index, cnt), Ref("s", slot, cnt, gpu=v), "port")
                        act.producers.append((node[c], "push"))
                act.reduce_srcs = srcs
                act.partial = part[v]
            node[v] = self._add(act)
        self.final[(pc.root, pc.start)] = node[t.root]

    def _out_tree(self, pc: Piece, t: TreeShape) -> None:
        coll, cnt, base = self.coll, pc.cnt, self.base(pc)
        arrive: dict[int, Act] = {}
        root = t.root
        if coll == "allreduce":
            root_src = Ref("o", base, cnt)
        else:
            root_src = Ref("i", pc.start, cnt)
            if self.outofplace:
                self._add(Act(root, (t.phase, 0, "copy", -1), (t.order, pc.root, pc.start), cnt,
                               copy=(Ref("i", pc.start, cnt), Ref("o", base, cnt))))
        for v in sorted(t.level, key=lambda x: (t.level[x], x)):
            if v == root:
                continue
            u = t.parent[v]
            src = root_src if u == root else Ref("o", base, cnt)
            act = Act(u, (t.phase, t.level[u], "down", v), (t.order, pc.root, pc.start), cnt,
                       push=(src, Ref("o", base, cnt, gpu=v), self.via(t, u, v)))
            if u == root:
                if coll == "allreduce":
                    act.producers.append((self.final[(pc.root, pc.start)], "local"))
            else:
                act.producers.append((arrive[u], "push"))
            arrive[v] = self._add(act)
        for v in sorted(t.level):
            if v != root and not t.children.get(v):
                self._add(Act(v, (t.phase, SINK_LEVEL, "sink", -1), (t.order, pc.root, pc.start), cnt,
                               producers=[(arrive[v], "push")]))
