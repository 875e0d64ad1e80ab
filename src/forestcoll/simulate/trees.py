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
its reduction is complete.
"""

from __future__ import annotations

from forestcoll import collectives
from forestcoll.errors import ScheduleError
from forestcoll.pieces import cut_pieces, piece_rule, schedule_shards, shape_trees, slices_for
from forestcoll.schedule import Schedule
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
    refuse_transfers(count)  # the exact count
    for s, each, trees in cut:
        for _j in range(s):
            reduced: int | None = None  # allreduce: the marker of this slice's reduction at the root
            for inward, root, plan in trees:
                if inward:
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
                else:
                    have: dict[int, int | None] = {root: reduced}
                    for u, v, links, lat, edge in plan:
                        prev = last_on_edge.get(edge)
                        deps = [] if prev is None else [prev << 1 | SENT]
                        if (up := have[u]) is not None:
                            deps.append(up << 1 | DELIVERED)
                        tid = have[v] = last_on_edge[edge] = add(links, each, lat, deps, edge)
    return prog
