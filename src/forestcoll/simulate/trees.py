"""forestcoll schedules as simulator programs: pieces of chunks pipelined in slices along the trees.

Every root's shard (M/N bytes of an M-byte allgather, reduce-scatter or
allreduce; the whole M for broadcast and reduce) is k chunks (with shard weights
w, rank i's shard is k*w_i chunks of M/(k*sum(w)) bytes:
:func:`forestcoll.schedule.shard_layout`); the pieces of
:func:`forestcoll.pieces.cut_pieces` are cut into slices by NCCL's tree rule for
the height of the piece's trees (``slices_for(..., rule="tree")``: one step,
halved while the piece has fewer than 8 x height chunks), or NCCL's ring rule when
its trees are chains (:func:`forestcoll.pieces.piece_rule`); at most
``max_slices`` per piece when given.  Each tree edge sends its slices one after
another along the edge's physical path.  Out-tree edges forward a slice once it
has arrived (store-and-forward); in-tree edges send a slice once every child's
slice has arrived.  In allreduce the root starts broadcasting a slice as soon as
its reduction is complete; with weighted shards, from 32 MiB on
(:func:`forestcoll.shard_pieces.root_waits`), it starts broadcasting its shard only
once it has reduced all of it, as the torch executor's plans do.
"""

from __future__ import annotations

from forestcoll import collectives
from forestcoll.errors import ScheduleError
from forestcoll.pieces import cut_pieces, piece_rule, schedule_shards, shape_trees, slices_for
from forestcoll.schedule import Schedule
from forestcoll.shard_pieces import root_waits
from forestcoll.simulate.engine import DELIVERED, SENT, ProgramBuilder, refuse_transfers
from forestcoll.simulate.network import Network

__all__ = ["tree_program"]


def tree_program(sched: Schedule, net: Network, size: float, slice_bytes: float, max_slices: int | None) -> ProgramBuilder:
    """The transfers of ``sched`` for a call of ``size`` bytes."""
    shapes = shape_trees(sched)
    k, pieces = cut_pieces(sched, shapes, 71 * 10**9)  # no step limit here: pieces follow the trees only
    missing = sorted(set(sched.ranks) - set(net.ranks))
    if missing:
        raise ScheduleError(f"the schedule's rank {missing[0]} is not a compute node of {net.topology.name or 'the topology'}")
    routes: dict[tuple[int, int, int], tuple[tuple[int, ...], float]] = {}
    idx = {r: i for i, r in enumerate(sched.ranks)}
    for shape, tree in zip(shapes, sched.trees):
        for e in tree.edges:
            routes[(id(shape), idx[e.src], idx[e.dst])] = net.path_links(e.path)
    coll = collectives.get(sched.collective)
    chunk = size / schedule_shards(sched) / k  # as shard_bytes / k: the same float for equal shards
    rules: dict[tuple[int, ...], tuple[str, int]] = {}
    prog = ProgramBuilder()
    add = prog.add
    last_on_edge: dict[tuple[int, int, int], int] = {}
    # each tree's edges in the order a slice crosses them: (sender, receiver, links, latency, stream key)
    plans: dict[int, list[tuple[int, int, tuple[int, ...], float, tuple[int, int, int]]]] = {}
    for t in shapes:
        plan = plans[id(t)] = []
        for v in sorted(t.level, key=lambda x: (t.level[x], x)):
            if v == t.root:
                continue
            a, b = (v, t.parent[v]) if t.direction == "in" else (t.parent[v], v)
            key = (id(t), a, b)
            links, lat = routes[key]
            plan.append((a, b, links, float(lat), key))
    cut = []  # (slices, bytes of each, trees) per piece; first counted, so that the guard refuses before building
    count = 0
    for pc in pieces:
        piece_bytes = pc.cnt * chunk
        key = tuple(id(t) for t in pc.trees)
        if key not in rules:
            rules[key] = piece_rule(pc.trees, coll.rooted)
        rule, depth = rules[key]
        s = slices_for(piece_bytes, slice_bytes, max_slices, rule=rule, depth=depth)
        trees = [(t.direction == "in", t.root, plans[id(t)]) for t in pc.trees]
        count += s * sum(len(plan) + inward for inward, _root, plan in trees)  # an in-tree adds its root's marker
        cut.append((s, float(piece_bytes / s), trees))
    waits = root_waits(sched, size)  # a root broadcasts once its whole shard is reduced
    refuse_transfers(count + (len({pc.root for pc in pieces}) if waits else 0))  # the exact count
    reductions: dict[int, list[int]] = {}  # waits: each root's reduction markers
    held: list[tuple[int, list, float]] = []  # waits: each slice's allgather (root, tree, bytes), emitted after
    for s, each, trees in cut:
        for _j in range(s):
            reduced: int | None = None  # allreduce: the marker of this slice's reduction at the root
            for inward, root, plan in trees:
                if waits and not inward:
                    held.append((root, plan, each))
                elif inward:
                    arrived: dict[int, list[int]] = {}  # node -> transfers that bring it this slice
                    for v, u, links, lat, edge in plan:
                        prev = last_on_edge.get(edge)
                        deps = [] if prev is None else [prev << 1 | SENT]
                        for x in arrived.get(v, ()):
                            deps.append(x << 1 | DELIVERED)
                        tid = last_on_edge[edge] = add(links, each, lat, deps, edge)
                        if u in arrived:
                            arrived[u].append(tid)
                        else:
                            arrived[u] = [tid]
                    reduced = add((), 0.0, 0.0, [x << 1 | DELIVERED for x in arrived.get(root, ())], None)
                    if waits:
                        reductions.setdefault(root, []).append(reduced)
                else:
                    _broadcast(add, last_on_edge, root, reduced, plan, each)
    if waits:
        gate = {r: add((), 0.0, 0.0, [x << 1 | DELIVERED for x in xs], None) for r, xs in reductions.items()}
        for root, plan, each in held:
            _broadcast(add, last_on_edge, root, gate[root], plan, each)
    return prog


def _broadcast(add, last_on_edge: dict, root: int, ready: int | None, plan: list, each: float) -> None:
    """One slice down an out-tree (``plan``), the root's first sends after event ``ready`` (delivered)."""
    have: dict[int, int | None] = {root: ready}
    for u, v, links, lat, edge in plan:
        prev = last_on_edge.get(edge)
        deps = [] if prev is None else [prev << 1 | SENT]
        if (up := have[u]) is not None:
            deps.append(up << 1 | DELIVERED)
        have[v] = last_on_edge[edge] = add(links, each, lat, deps, edge)
