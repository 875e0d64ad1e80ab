"""The algorithms vendors ship, as simulator programs on the same network model.

* ``ring``: NCCL-style rings.  Inside a box the ring follows a Hamiltonian cycle
  of direct connections (any order under an NVSwitch; the xGMI mesh on MI250);
  across boxes it enters a box at the GPU on the rail it left the previous box
  from (so the hop stays on one NIC rail) and leaves from the next rail.
  Channels, each in both directions, are chosen so that every NIC carries the
  same number; inside boxes successive channels take paths that spread over
  the links (least-used first).  The data is split evenly over the channels.  Allgather and reduce-scatter take N-1 steps, allreduce 2(N-1);
  broadcast and reduce are a pipelined chain from / to the root.
* ``double-binary-tree`` (allreduce): NCCL's two complementary binary trees over
  the boxes, a chain inside each box, half the data on each tree, reduce up then
  broadcast down, pipelined; g/2 pairs of trees (g GPUs per box), pair r
  crossing boxes at GPU r and GPU r + g/2, so every NIC carries one tree.
* ``hierarchical`` (several equal boxes): ring reduce-scatter inside each box,
  ring allreduce across boxes among the GPUs with the same local index, ring
  allgather inside each box (allgather and reduce-scatter: the matching halves).
* ``direct``: every rank sends straight to every other (all-pairs).

Every block is cut into pipeline slices as NCCL cuts it (:func:`forestcoll.pieces.slices_for`): rings
(and hierarchical's rings) in 2 MiB chunks of two 1 MiB slices, the double binary tree by NCCL's tree rule
for its height, chains (broadcast / reduce) in 512 KiB steps (``direct``, which no runtime ships, keeps the earlier
fixed rule: about 1 MiB, at most 16 slices per block).

Routes (:func:`pair_routes`): a transfer inside a box takes :meth:`Network.route`; one between boxes leaves by the
NIC port :meth:`Network.route` leaves by (the GPU's own / nearest NIC, as NCCL gives a channel a NIC local to its
GPU) and spreads its bytes evenly over that port group's equal-cost routes (other spines), the rule of the MSCCL
and MSCCL++ models (:func:`forestcoll.simulate.network.channel_routes`, group 0).  A pair with one such route (every
rail fabric, one switch, one spine) sends exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

from forestcoll import collectives
from forestcoll.collectives import ALLREDUCE
from forestcoll.errors import UsageError
from forestcoll.pieces import slices_for
from forestcoll.schedule import Schedule
from forestcoll.simulate.engine import ProgramBuilder, refuse_transfers
from forestcoll.simulate.network import Network, Route, channel_routes

__all__ = [
    "BASELINES", "Slicing", "applicable", "box_cycle", "boxes", "dbt_program", "direct_program",
    "hierarchical_program", "pair_routes", "ring_orders", "ring_program", "ring_schedule",
]

Slicing = tuple[float, int | None]  # (a ring's slice bytes, max slices per block or None: no cap)
DIRECT_MAX_SLICES = 16  # the direct baseline's cap (see direct_program)


# ----- structure of the fabric -----------------------------------------------------------------


def boxes(net: Network) -> list[list[int]]:
    """Ranks grouped by the box the topology records for them, when every rank has one; else one box."""
    topo = net.topology
    owner = [topo.nodes[topo.index[r]].box for r in net.ranks]
    if any(b is None for b in owner):
        return [list(range(len(owner)))]
    groups: dict[str | None, list[int]] = {}
    for i, b in enumerate(owner):
        groups.setdefault(b, []).append(i)
    return list(groups.values())


class _BoxPaths:
    """Hamiltonian paths and cycles through one box over direct neighbours (a link, or switches of the box).

    Depth-first search tries the widest, least-used links first ((uses + 1) / bandwidth), so paths
    prefer fast links and successive ones spread over them as NCCL spreads channels over NVLinks; after ``budget``
    expansions without success the members are taken in rank order (routes then pass through other ranks).
    """

    def __init__(self, net: Network, members: Sequence[int], budget: int = 20_000) -> None:
        self.members = list(members)
        self.budget = budget
        self.adj = {a: [b for b in self.members if b != a and net.adjacent(a, b)] for a in self.members}
        self.width = {(a, b): min(net.capacity[i] for i in net.route(a, b)[0]) for a in self.members for b in self.adj[a]}
        self.used: dict[tuple[int, int], float] = {}
        self.floor = float("inf")  # the narrowest neighbour a path needed so far (searches start there)

    def _cost(self, a: int, b: int) -> tuple[float, int]:
        return ((self.used.get((a, b), 0.0) + 1.0) / self.width[(a, b)], b)

    def _take(self, order: list[int], closed: bool) -> list[int]:
        for a, b in zip(order, order[1:] + (order[:1] if closed else [])):
            for key in ((a, b), (b, a)):
                self.used[key] = self.used.get(key, 0.0) + 1.0
        return order

    def path(self, start: int, end: int | None, closed: bool = False) -> list[int]:
        """A Hamiltonian path from ``start`` (to ``end``, or back to ``start`` when ``closed``), over the
        widest neighbours that admit one (NVLink before PCIe)."""
        m = self.members
        if len(m) == 1:
            return list(m)
        for floor in sorted(set(self.width.values()), reverse=True):
            if floor > self.floor:
                continue
            found = self._search(start, end, closed, floor)
            if found is not None:
                self.floor = floor
                return self._take(found, closed)
        rest = [x for x in m if x not in (start, end)]
        return [start, *rest] + ([end] if end is not None and end != start else [])

    def _search(self, start: int, end: int | None, closed: bool, floor: float) -> list[int] | None:
        m = self.members
        adj = {a: [b for b in self.adj[a] if self.width[(a, b)] >= floor] for a in m}
        path = [start]
        seen = {start}
        stack = [iter(sorted(adj[start], key=lambda b: self._cost(start, b)))]
        steps = 0
        while stack and steps < self.budget:
            steps += 1
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                seen.discard(path.pop())
                continue
            if nxt in seen or (nxt == end and len(path) < len(m) - 1):
                continue
            path.append(nxt)
            seen.add(nxt)
            if len(path) == len(m):
                if (not closed or start in adj[nxt]) and (end is None or nxt == end):
                    return path
                seen.discard(path.pop())
                continue
            stack.append(iter(sorted(adj[nxt], key=lambda b, a=nxt: self._cost(a, b))))
        return None


def box_cycle(net: Network, members: Sequence[int]) -> list[int]:
    """An order of ``members`` in which each next one, and the first after the last, is a direct neighbour."""
    members = list(members)
    return _BoxPaths(net, members).path(members[0], None, closed=True)


def _cycles(net: Network) -> list[list[int]]:
    return [box_cycle(net, b) for b in boxes(net)]


def ring_orders(net: Network) -> list[list[int]]:
    """The rank order of every ring channel (see the module docstring)."""
    groups = boxes(net)
    finders = [_BoxPaths(net, g) for g in groups]
    rotations = max(len(g) for g in groups)
    rings: list[list[int]] = []
    if len(groups) == 1:
        g, f = groups[0], finders[0]
        for r in range(rotations):
            c = f.path(g[r], None, closed=True)
            rings += [c, c[::-1]]
        return rings
    # rotation r crosses between boxes on rails r-1 and r (both ways, with the reversed ring), so the odd
    # rotations alone already use every NIC once in each direction
    for r in range(1, rotations, 2) if rotations % 2 == 0 else range(rotations):
        # box 0 runs from local GPU r to local GPU r-1; the next box starts at the same local index
        # (the hop between boxes stays on one NIC rail) and runs back to local r, and so on: every GPU
        # enters once and leaves once over the rotations (NIC balance) and the ring closes on rail r
        ring: list[int] = []
        here = r
        for b, (members, f) in enumerate(zip(groups, finders)):
            size = len(members)
            target = (r - 1) % size if b % 2 == 0 else r % size
            start = members[here % size]
            end = members[target] if members[target] != start else None
            order = f.path(start, end)
            ring += order
            here = members.index(order[-1])
        rings += [ring, ring[::-1]]
    return rings


# ----- building blocks -------------------------------------------------------------------------


def pair_routes(net: Network, a: int, b: int) -> list[Route]:
    """The routes a baseline's transfer from rank ``a`` to rank ``b`` spreads its bytes over, evenly: between boxes
    port group 0 of the pair's equal-cost routes (:func:`channel_routes`: the GPU's own NIC port, every spine
    beyond it), else :meth:`Network.route` alone."""
    box, index, ranks = net.box, net.index, net.ranks
    if box[index[ranks[a]]] == box[index[ranks[b]]]:
        return [net.route(a, b)]
    return channel_routes(net, net.port_groups, a, b, 0)


def _cost(net: Network) -> Callable[[int, int], int]:
    """``cost(a, b)``: the program entries one :meth:`_Streams.send` from a to b adds (one per route, and a marker
    joining them when there are several), for the guard's exact counts."""
    seen: dict[tuple[int, int], int] = {}

    def cost(a: int, b: int) -> int:
        if (a, b) not in seen:
            r = len(pair_routes(net, a, b))
            seen[(a, b)] = r + (r > 1)
        return seen[(a, b)]

    return cost


class _Streams:
    """Transfers that keep each (label, src, dst) stream in order, each spread over its pair's routes
    (:func:`pair_routes`: one transfer per route, its own stream, joined by a marker of their delivery)."""

    def __init__(self, net: Network, prog: ProgramBuilder) -> None:
        self.net, self.prog = net, prog
        self.last: dict[tuple, tuple[int, ...]] = {}
        self.routes: dict[tuple[int, int], list[Route]] = {}

    def send(self, label: object, a: int, b: int, nbytes: float, after: Sequence[int | None] = ()) -> int:
        """A transfer of ``nbytes`` from a to b after ``after`` were delivered, behind the stream's last; the id of
        its delivery."""
        routes = self.routes.get((a, b))
        if routes is None:
            routes = self.routes[(a, b)] = pair_routes(self.net, a, b)
        key = (label, a, b)
        last = self.last.get(key, ())
        prog = self.prog
        if len(routes) == 1:
            links, lat = routes[0]
            tid = prog.transfer(links, nbytes, lat, after_sent=last, after_delivered=after, stream=key)
            self.last[key] = (tid,)
            return tid
        share = nbytes / len(routes)
        ids = tuple(prog.transfer(links, share, lat, after_sent=last[j:j + 1], after_delivered=after, stream=(key, j))
                    for j, (links, lat) in enumerate(routes))
        self.last[key] = ids
        return prog.marker(after_delivered=ids)


def _ring_steps(st: _Streams, label: object, ring: Sequence[int], steps: int, block: float, slicing: Slicing,
                ready: dict[int, int | None] | None = None) -> dict[int, list[int]]:
    """``steps`` ring steps moving one block per step per rank, pipelined in slices.

    Step s at position i forwards what arrived at step s-1 from position i-1 (step 0
    sends local data, available after ``ready[rank]`` if given).  Returns, per
    rank, the transfers that bring it data in the last step (one per slice)."""
    n = len(ring)
    sl = slices_for(block, *slicing, rule="ring")
    each = block / sl
    arrived_last: dict[int, list[int]] = {r: [] for r in ring}
    prev: dict[tuple[int, int], int] = {}  # (position, slice) -> transfer into that position at the previous step
    for s in range(steps):
        cur: dict[tuple[int, int], int] = {}
        for j in range(sl):
            for i in range(n):
                a, b = ring[i], ring[(i + 1) % n]
                dep = prev.get((i, j)) if s else (ready or {}).get(a)
                cur[((i + 1) % n, j)] = st.send(label, a, b, each, after=[dep])
        prev = cur
    for (pos, _j), tid in prev.items():
        arrived_last[ring[pos]].append(tid)
    return arrived_last


def _chain(st: _Streams, label: object, order: Sequence[int], nbytes: float, slicing: Slicing) -> None:
    """A pipelined chain order[0] -> order[1] -> ... (broadcast from order[0]; reduce toward order[-1])."""
    sl = slices_for(nbytes, *slicing, rule="step")
    each = nbytes / sl
    for _ in range(sl):
        dep = None
        for a, b in zip(order, order[1:]):
            dep = st.send(label, a, b, each, after=[dep])


# ----- the algorithms --------------------------------------------------------------------------


def ring_program(net: Network, collective: str, size: float, slicing: Slicing, root: int = 0) -> ProgramBuilder:
    coll = collectives.get(collective)
    if not coll.phases:
        raise UsageError(f"ring: no {coll.name} form")
    prog = ProgramBuilder()
    st = _Streams(net, prog)
    rings = ring_orders(net)
    n = len(net.ranks)
    per = size / len(rings)
    cost = _cost(net)
    chains = [_chain_order(ring, root, coll.phases[0].reversed) for ring in rings] if coll.rooted else []
    if coll.rooted:  # the exact count, so that the guard refuses before building
        refuse_transfers(sum(slices_for(per, *slicing, rule="step") * sum(cost(a, b) for a, b in zip(order, order[1:]))
                             for order in chains))
    else:
        refuse_transfers(sum((n - 1) * len(coll.phases) * slices_for(per / n, *slicing, rule="ring") * _hops(cost, ring)
                             for ring in rings))
    for c, ring in enumerate(rings):
        if coll.rooted:  # a chain from the root (out-tree phase) or into it (in-tree phase)
            _chain(st, c, chains[c], per, slicing)
        else:  # N-1 steps per phase (allreduce: reduce-scatter then allgather)
            _ring_steps(st, c, ring, (n - 1) * len(coll.phases), per / n, slicing)
    return prog


def _chain_order(ring: list[int], root: int, into_root: bool) -> list[int]:
    """The ring as a chain from ``root`` (or, ``into_root``, ending at it)."""
    p = ring.index(root)
    order = ring[p:] + ring[:p]
    return order[1:] + order[:1] if into_root else order


def _hops(cost: Callable[[int, int], int], ring: Sequence[int]) -> int:
    """The program entries of one step of ``ring`` (each rank sends to the next, the last to the first)."""
    return sum(cost(a, b) for a, b in zip(ring, [*ring[1:], *ring[:1]]))


def _btree(count: int) -> dict[int, int]:
    """Parent of each of ``count`` nodes in a balanced in-order binary tree (the middle is the root)."""
    parent: dict[int, int] = {}

    def build(lo: int, hi: int, up: int | None) -> None:
        if lo >= hi:
            return
        mid = (lo + hi) // 2
        if up is not None:
            parent[mid] = up
        build(lo, mid, mid)
        build(mid + 1, hi, mid)

    build(0, count, None)
    return parent


def dbt_program(net: Network, collective: str, size: float, slicing: Slicing) -> ProgramBuilder:
    if collectives.get(collective) is not ALLREDUCE:
        raise UsageError("double-binary-tree is an allreduce algorithm")
    groups = boxes(net)
    finders = [_BoxPaths(net, g) for g in groups]
    nb = len(groups)
    a_parent = _btree(nb)
    # the second tree: mirrored (even box count) or shifted by one (odd), so leaves of one are inner nodes of the other
    perm = [nb - 1 - i for i in range(nb)] if nb % 2 == 0 else [(i + 1) % nb for i in range(nb)]
    b_parent = {perm[c]: perm[p] for c, p in a_parent.items()}
    # pair r enters boxes at GPU r for one tree and GPU r + g/2 for the other: g/2 pairs use every NIC;
    # the chains inside a box spread over its links like ring channels
    rotations = max(1, max(len(g) for g in groups) // 2) if nb > 1 else 1
    per_tree = size / rotations / 2
    trees = []
    for r in range(rotations):
        for which, box_parent in ((0, a_parent), (1, b_parent)):
            chains = []
            for members, f in zip(groups, finders):
                head = members[(r + which * (len(members) // 2)) % len(members)]
                chains.append(f.path(head, None))
            parent: dict[int, int] = {}
            for b, chain in enumerate(chains):
                for x, y in zip(chain[1:], chain):
                    parent[x] = y
                if b in box_parent:
                    parent[chain[0]] = chains[box_parent[b]][0]
            trees.append(((r, which), parent))
    # the exact count, so that the guard refuses before building: per slice, each edge up and down and a marker
    cost = _cost(net)
    refuse_transfers(sum(slices_for(per_tree, *slicing, rule="tree", depth=max(_depths(parent).values(), default=0))
                         * (sum(cost(c, p) + cost(p, c) for c, p in parent.items()) + 1) for _label, parent in trees))
    prog = ProgramBuilder()
    st = _Streams(net, prog)
    for label, parent in trees:
        _tree_allreduce(st, label, parent, per_tree, slicing)
    return prog


def _depths(parent: dict[int, int]) -> dict[int, int]:
    """Every node of the tree ``parent`` (child -> parent) -> its hops to the root (the root 0; empty for no edge)."""
    depth: dict[int, int] = {}
    for v in parent:
        path = []
        while v in parent and v not in depth:
            path.append(v)
            v = parent[v]
        d = depth.setdefault(v, 0)  # the root, or a node already measured
        for x in reversed(path):
            d += 1
            depth[x] = d
    return depth


def _tree_allreduce(st: _Streams, label: object, parent: dict[int, int], nbytes: float, slicing: Slicing) -> None:
    """Reduce up the tree ``parent``, then broadcast down, pipelined slice by slice."""
    depth = _depths(parent)
    nodes = set(depth)
    root = next(x for x in nodes if x not in parent)
    up_order = sorted(nodes, key=lambda x: (-depth[x], x))
    down_order = sorted(nodes, key=lambda x: (depth[x], x))
    sl = slices_for(nbytes, *slicing, rule="tree", depth=max(depth.values()))
    each = nbytes / sl
    for _j in range(sl):
        came: dict[int, list[int]] = {}
        for v in up_order:
            if v == root:
                continue
            came.setdefault(parent[v], []).append(st.send((label, "up"), v, parent[v], each, after=came.get(v, [])))
        have: dict[int, int | None] = {root: st.prog.marker(after_delivered=came.get(root, []))}
        for v in down_order:
            if v == root:
                continue
            have[v] = st.send((label, "down"), parent[v], v, each, after=[have[parent[v]]])


def hierarchical_program(net: Network, collective: str, size: float, slicing: Slicing) -> ProgramBuilder:
    cycles = _cycles(net)
    g = len(cycles[0])
    if len(cycles) < 2 or any(len(c) != g for c in cycles):
        raise UsageError("hierarchical needs several boxes of the same size")
    coll = collectives.get(collective)
    if coll.rooted or not coll.phases:
        raise UsageError(f"hierarchical: no {coll.name} form (use ring)")
    nb = len(cycles)
    n = nb * g
    prog = ProgramBuilder()
    st = _Streams(net, prog)
    rails = [[c[i] for c in cycles] for i in range(g)]  # GPUs with the same position in their box cycle
    intra = [(c, d) for c in cycles for d in (0, 1)]
    inter = [(rail, d) for rail in rails for d in (0, 1)]

    cost = _cost(net)

    def count(pairs, steps, block) -> int:  # what rings() below builds: the ring steps and a marker per rank
        return sum(steps * slices_for(block, *slicing, rule="ring") * _hops(cost, ring if d == 0 else ring[::-1])
                   for ring, d in pairs) + n

    if coll is ALLREDUCE:  # the exact count, so that the guard refuses before building
        refuse_transfers(2 * count(intra, g - 1, size / 2 / g) + count(inter, 2 * (nb - 1), size / g / 2 / nb))
    elif not coll.phases[0].reversed:
        refuse_transfers(count(inter, nb - 1, size / n / 2) + count(intra, g - 1, size / g / 2))
    else:
        refuse_transfers(count(intra, g - 1, size / g / 2) + count(inter, nb - 1, size / n / 2))

    def rings(pairs, label, steps, block, ready=None):
        done: dict[int, list[int]] = {}
        for ring, d in pairs:
            order = ring if d == 0 else ring[::-1]
            got = _ring_steps(st, (label, tuple(ring), d), order, steps, block, slicing, ready)
            for r, ts in got.items():
                done.setdefault(r, []).extend(ts)
        return {r: prog.marker(after_delivered=ts) for r, ts in done.items()}

    if coll is ALLREDUCE:
        m1 = rings(intra, "rs", g - 1, size / 2 / g, None)
        m2 = rings(inter, "ar", 2 * (nb - 1), size / g / 2 / nb, m1)
        rings(intra, "ag", g - 1, size / 2 / g, m2)
    elif not coll.phases[0].reversed:  # allgather: across boxes first, then inside
        m1 = rings(inter, "ag1", nb - 1, size / n / 2, None)
        rings(intra, "ag2", g - 1, size / g / 2, m1)
    else:  # reduce_scatter: inside boxes first, then across
        m1 = rings(intra, "rs1", g - 1, size / g / 2, None)
        rings(inter, "rs2", nb - 1, size / n / 2, m1)
    return prog


def direct_program(net: Network, collective: str, size: float, slicing: Slicing, root: int = 0) -> ProgramBuilder:
    coll = collectives.get(collective)
    n = len(net.ranks)
    prog = ProgramBuilder()
    st = _Streams(net, prog)
    # one hop per send: slices only let allreduce's second half start early; no runtime ships this form, so it
    # keeps the simulator's earlier rule (about 1 MiB slices, at most 16 per block)
    slicing = (slicing[0], DIRECT_MAX_SLICES if slicing[1] is None else slicing[1])
    cost = _cost(net)
    if coll.rooted:
        sl = slices_for(size, *slicing)
        pairs = [(x, root) if coll.phases[0].reversed else (root, x) for x in range(n) if x != root]
        refuse_transfers(sl * sum(cost(a, b) for a, b in pairs))  # the exact count, so that the guard refuses first
        for _j in range(sl):
            for x in range(n):
                if x != root:
                    a, b = (x, root) if coll.phases[0].reversed else (root, x)
                    st.send("d", a, b, size / sl)
        return prog
    block = size / n
    sl = slices_for(block, *slicing, min_slices=1)
    each = block / sl
    every = sum(cost(a, b) for a in range(n) for b in range(n) if a != b)
    refuse_transfers(sl * (every + (n + every if coll is ALLREDUCE else 0)))  # the exact count, as above
    for _j in range(sl):
        into: dict[int, list[int]] = {}
        for a in range(n):
            for b in range(n):
                if a != b:
                    into.setdefault(b, []).append(st.send("x", a, b, each))
        if coll is ALLREDUCE:  # then every rank sends its reduced block to every other
            for b in range(n):
                ready = prog.marker(after_delivered=into[b])
                for c in range(n):
                    if c != b:
                        st.send("y", b, c, each, after=[ready])
    return prog


BASELINES: dict[str, Callable[..., ProgramBuilder]] = {
    "ring": ring_program,
    "double-binary-tree": dbt_program,
    "hierarchical": hierarchical_program,
    "direct": direct_program,
}


def applicable(name: str, net: Network, collective: str) -> bool:
    """Whether baseline ``name`` has a form for this collective on this fabric (all-to-all: its own baselines,
    :mod:`forestcoll.simulate.alltoall`)."""
    coll = collectives.get(collective)
    if not coll.tree_based:
        from forestcoll.simulate.alltoall import applicable as alltoall_applicable

        return alltoall_applicable(name, net)
    if name == "double-binary-tree":
        return coll is ALLREDUCE
    if name == "hierarchical":
        cycles = boxes(net)
        return not coll.rooted and bool(coll.phases) and len(cycles) > 1 and len({len(c) for c in cycles}) == 1
    return True


# ----- the ring as a tree schedule -------------------------------------------------------------


def ring_schedule(net: Network, collective: str, root: str | None = None) -> Schedule:
    """NCCL's rings written as a forestcoll schedule: every root's shard goes round each channel's ring
    as a chain (an out-tree for allgather / broadcast, an in-tree for reduce-scatter / reduce), one
    chunk per channel.  Exact algbw from the link loads; the bound from :func:`optimal_bound`.  It can
    be verified, simulated and exported to MSCCL like any schedule (routes that pass through other
    ranks make it unverifiable: :class:`UsageError`)."""
    from forestcoll.bound import optimal_bound
    from forestcoll.schedule import Edge, PhaseInfo, ScheduleTree

    coll = collectives.get(collective)
    collective = coll.name
    topo = net.topology
    rings = ring_orders(net)
    k = len(rings)
    n = len(net.ranks)
    roots = [net.ranks.index(root or net.ranks[0])] if coll.rooted else list(range(n))
    bound = optimal_bound(topo, collective, net.ranks[roots[0]] if len(roots) == 1 else None)

    def path(a: int, b: int) -> tuple[str, ...]:
        links, _ = net.route(a, b)
        nodes = [net.names[net.ends[links[0]][0]]] + [net.names[net.ends[lk][1]] for lk in links]
        if any(topo.is_compute[topo.index[x]] for x in nodes[1:-1]):
            raise UsageError(f"the ring hop {nodes[0]} -> {nodes[-1]} passes through another rank; "
                             "no verifiable ring schedule on this fabric")
        return tuple(nodes)

    trees: list[ScheduleTree] = []
    infos: list[PhaseInfo] = []
    total = Fraction(len(roots))
    time_per = Fraction(0)
    for phase, pb in zip(coll.phases, bound.phases):
        load: dict[tuple[str, str], int] = {}
        for ring in rings:
            for r in roots:
                p = ring.index(r)
                order = ring[p:] + ring[:p]
                if not phase.reversed:
                    hops = list(zip(order, order[1:]))
                else:
                    chain = order[1:] + order[:1]  # ends at the root
                    hops = list(zip(chain, chain[1:]))
                edges = tuple(Edge(net.ranks[a], net.ranks[b], path(a, b)) for a, b in hops)
                trees.append(ScheduleTree(net.ranks[r], 1, phase.name, edges))
                for e in edges:
                    for hop in zip(e.path, e.path[1:]):
                        load[hop] = load.get(hop, 0) + 1
        ratio = max(Fraction(amount) / topo.capacity[hop] for hop, amount in load.items())
        time_per += ratio / k
        infos.append(PhaseInfo(phase.name, k, total * k / ratio, total * pb.rate, pb.cut_nodes))
    algbw = total / time_per
    return Schedule(collective, topo.name, tuple(net.ranks), k, algbw, bound.algbw, tuple(infos), tuple(trees),
                    net.ranks[roots[0]] if len(roots) == 1 else None)
