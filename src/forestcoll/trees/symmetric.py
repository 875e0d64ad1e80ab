"""Packing spanning out-trees under a group of automorphisms: one base tree per orbit of roots, the rest its images
(:class:`SymmetricPacker`); what symmetry cannot place is packed without it by :mod:`forestcoll.trees.packing`'s
:class:`~forestcoll.trees.packing.Packer` (:func:`pack_trees_symmetric`).  The invariant and the max-flow test are
:mod:`forestcoll.trees.packing`'s, counted over all images of the partial tree.
"""

from __future__ import annotations

from collections.abc import Sequence

from forestcoll.graph.maxflow import FlowNetwork, check_capacities
from forestcoll.progress import Progress, report
from forestcoll.trees.packing import Packer, PackResult, Tree

__all__ = ["SymmetricPacker", "SymmetryStuck", "pack_trees_symmetric"]


class SymmetryStuck(RuntimeError):
    """The symmetric growth found no arc orbit to add; the caller falls back to fewer symmetries."""


class SymmetricPacker:
    """Packs trees for one root per orbit of a group H of automorphisms; the rest are their images.

    H (rows of ``group``: permutations of 0..N-1, the identity first) must act
    freely on the nodes and preserve capacities and demands.  A base tree T of
    multiplicity C stands for the |H| trees gT.  Each step adds a batch of arcs
    (a breadth-first layer) to T, hence their images to every gT, and keeps the
    invariant of :class:`Packer` with all |H| partial trees present:

        rho_res(X) >= sum_{r not in X} pool[r] + C * #{g : gV and X disjoint}.

    It is tested with one max-flow per node orbit (the network, with a node s_g
    feeding gV for every g, is H-invariant).  After adding the batch with
    multiplicity c (the rest of C rewound to the pool), a set's slack is linear
    in c, so a violated cut gives the next c directly (Newton); when even c = 1
    fails, the arcs of the batch that enter the violated set are thinned out.
    No theorem promises that a symmetric packing exists: when no single arc
    orbit can be added, :class:`SymmetryStuck` is raised and the caller
    continues with fewer symmetries from the same (valid) state.
    """

    COLUMN_BLOCK = 1 << 22  # bools made at once by _columns
    FEED_BLOCKS_FROM = 2048  # plain feeding arcs from which _feeds weighs the block partitions

    def __init__(self, n: int, caps: dict[tuple[int, int], int], demand: Sequence[int], group: Sequence[Sequence[int]],
                 blocks: Sequence[Sequence[int]] = ()):
        import numpy as np

        self.np = np
        self.n = n
        self.G = np.asarray(group, dtype=np.int32)  # |H| x N: 64 MB at 4,096 ranks
        self.h = len(self.G)
        self.free = not bool((self.G[1:] == np.arange(n, dtype=np.int32)).any())  # no element fixes a rank
        arcs = sorted(a for a, c in caps.items() if c > 0)
        self.tails = np.array([a for a, _ in arcs], dtype=np.int64)
        self.heads = np.array([b for _, b in arcs], dtype=np.int64)
        self.res = np.array([caps[a] for a in arcs], dtype=np.int64)
        self.arc_id = {a: i for i, a in enumerate(arcs)}
        self.arc_tuples = [(int(a), int(b)) for a, b in arcs]
        self.id_matrix = np.full((n, n), -1, dtype=np.int32)
        self.id_matrix[self.tails, self.heads] = np.arange(len(arcs))
        # every arc's image under every element, a block of elements at a time (|H| x arcs at once: 1.7 GB at
        # 2,048 ranks): the group must map arcs to arcs; an arc's orbit is named by its smallest image's id
        self.arc_orbit = np.full(len(arcs), len(arcs), dtype=np.int64)
        flat = self.id_matrix.ravel()
        step = max(1, (1 << 22) // max(1, len(arcs)))
        for lo in range(0, self.h, step):
            block = self.G[lo:lo + step]
            images = flat[block[:, self.tails].astype(np.int64) * n + block[:, self.heads]]
            if (images < 0).any():
                raise ValueError("the group does not preserve the arcs")
            np.minimum(self.arc_orbit, images.min(axis=0), out=self.arc_orbit)
        self.orbit_of = self.arc_orbit.tolist()  # the same, as Python ints (read per arc in the layer loop)
        self.head_list = self.heads.tolist()
        first = np.searchsorted(self.tails, np.arange(n + 1)).tolist()  # arcs sorted by tail: x's ids are a range
        self.out_span = list(zip(first[:-1], first[1:]))
        self.pool = np.array(demand, dtype=np.int64)
        node_orbit = self.G.min(axis=0)
        self.targets = sorted(set(node_orbit.tolist()))
        self.big = int(self.res.sum() + self.pool.sum() + 1)
        check_capacities([self.big])
        self.maxflows = 0
        self.checks = 0
        # (X mask, columns): sets that refused a batch, with their images as one int per rank v whose bit g says
        # whether gX holds v (|H| x N bits each); at most 256 of them (16 at 4,096 ranks, as when they were
        # |H| x N bytes and about 256 MB in all: the count decides the trees, so it stays)
        self.learned: list = []
        self.max_learned = max(8, min(256, (256 << 20) // max(1, self.h * n)))
        self._learned_keys: set[bytes] = set()
        # candidate partitions of the ranks into blocks (a block id per rank), e.g. the orbits of one generator:
        # a check feeds a block that lies whole in an image gV through one shared node (see _check)
        self.blocks = []
        for labels in blocks:
            _, bid = np.unique(np.asarray(labels, dtype=np.int64), return_inverse=True)
            sizes = np.bincount(bid)
            if len(bid) == n and sizes.max() > 1:
                self.blocks.append((bid.astype(np.int64), sizes))

    # ----- tentative state and its test ----------------------------------------------------------
    def _image_ids(self, arcs: list[tuple[int, int]]):
        np = self.np
        if not arcs:
            return np.zeros((self.h, 0), dtype=np.int64)
        xs = np.array([a for a, _ in arcs], dtype=np.int64)
        ys = np.array([b for _, b in arcs], dtype=np.int64)
        return self.id_matrix[self.G[:, xs], self.G[:, ys]]

    def _uses(self, arcs: list[tuple[int, int]]):
        """How many of the |H| images of ``arcs`` run on each network arc (int64, one count per arc)."""
        np = self.np
        if not arcs:
            return np.zeros(len(self.res), dtype=np.int64)
        return np.bincount(self._image_ids(arcs).ravel(), minlength=len(self.res)).astype(np.int64)

    def _check(self, root, tree_arcs, batch, verts, big_c, c):
        """Violated cuts after adding ``batch`` with multiplicity c: list of (slack, sink mask)."""
        np = self.np
        res = self.res.copy()
        if big_c != c and tree_arcs:
            res += (big_c - c) * self._uses(tree_arcs)
        res -= c * self._uses(batch)
        if (res < 0).any():
            return None
        pool = self.pool.copy()
        pool[self.G[:, root]] += big_c - c
        n, h = self.n, self.h
        z = n
        live = np.nonzero(res > 0)[0]
        roots = np.nonzero(pool > 0)[0]
        classes = self._image_classes(verts)  # one source per distinct image gV, feeding it c per element
        m = len(classes)
        vimg = self.G[classes[:, 0]][:, np.asarray(verts, dtype=np.int64)]  # m x |V|: the images gV
        src, dst, nodes = self._feeds(vimg, n + 1)
        del vimg
        tails = np.concatenate([self.tails[live], np.full(len(roots), z), np.full(m, z), src]).astype(np.int32)
        heads = np.concatenate([self.heads[live], roots, np.arange(m) + n + 1, dst]).astype(np.int32)
        del src, dst
        caps = np.concatenate([res[live], pool[roots], np.full(m, c * classes.shape[1]),
                               np.full(len(heads) - len(live) - len(roots) - m, self.big)])
        net = FlowNetwork(nodes, tails, heads)
        del tails, heads
        total = int(pool.sum()) + h * c
        found = []
        self.checks += 1
        for i, v in enumerate(self.targets):
            self.maxflows += 1
            value = net.value(caps if i == 0 else None, z, v)  # the capacities stay set between the targets
            if value < total:
                side = np.asarray(net.last_source_side(), dtype=np.int64)
                self.maxflows += 1  # counted as the max-flow it once was (the lowering's budget is 4x the packing's)
                sink = np.ones(n, dtype=bool)
                sink[side[side < n]] = False
                found.append((value - total, sink))
                self._learn(sink)
        return found

    def _feeds(self, vimg, first: int):
        """Unbounded arcs from source j (node first + j) into every rank of row j of ``vimg``, and the node count.

        Plainly one arc per rank.  With a block partition, a block lying whole in the row's image is fed
        through one shared node a_B (arcs a_B -> each rank of B): a source on the source side of a finite cut
        pulls a_B and so all of B there, and a_B is free to follow when B is already there, so every rank set
        keeps its cut value (the same flows and minimal min cut) with about (full blocks + other ranks) arcs
        per source instead of |V|.  The partition giving the fewest arcs is used, and only when the plain arcs
        are many (:data:`FEED_BLOCKS_FROM`): on a few hundred arcs weighing the partitions costs more than the
        arcs they save (the answers are the same either way)."""
        np = self.np
        m, width = vimg.shape
        rows = np.repeat(np.arange(m, dtype=np.int64), width)
        plain = (first + rows, vimg.ravel().astype(np.int64), first + m)
        best, cost = None, m * width
        for bid, sizes in (self.blocks if cost >= self.FEED_BLOCKS_FROM else ()):
            b = bid[vimg]  # m x |V| block of each image rank
            nb = len(sizes)
            counts = np.bincount((np.arange(m, dtype=np.int64)[:, None] * nb + b).ravel(), minlength=m * nb)
            full = (counts.reshape(m, nb) == sizes[None, :])
            whole = full[np.arange(m)[:, None], b]  # rank of an image lying in a whole block
            used = full.any(axis=0)
            arcs = int(full.sum()) + int(np.count_nonzero(~whole)) + int(sizes[used].sum())
            if arcs < cost:
                best, cost = (bid, sizes, full, whole, used), arcs
        if best is None:
            return plain
        bid, sizes, full, whole, used = best
        nb = len(sizes)
        aux = first + m  # node of block B: aux + B
        fj, fb = np.nonzero(full)
        loose = ~whole.ravel()
        members = np.nonzero(used[bid])[0]  # ranks of the blocks some source feeds whole
        src = np.concatenate([first + fj, (first + rows)[loose], aux + bid[members]])
        dst = np.concatenate([aux + fb, vimg.ravel()[loose].astype(np.int64), members])
        return src, dst, aux + nb

    def _image_classes(self, verts):
        """The elements grouped by the image gV they give: a row per distinct gV, its elements (int64, m x |K|).

        gV = g'V iff g^-1 g' lies in K = {k : kV = V}, so the classes are the cosets gK.  The network gives
        each s_g arcs into gV; sources with the same arcs act as one source of their summed capacity (a cut
        leaves such a source on the source side iff all of gV is there, for each of them alike), so one per
        class with c*|K| has the same cut on every set of ranks: the same max-flow values and the same
        minimal min cut.  At the last layer V is every rank, K is all of H and the |H| x N arcs become N."""
        np = self.np
        v = np.asarray(verts, dtype=np.int64)
        inside = np.zeros(self.n, dtype=bool)
        inside[v] = True
        stab = np.ones(self.h, dtype=bool)
        step = max(1, (1 << 22) // max(1, len(v)))
        for lo in range(0, self.h, step):
            stab[lo:lo + step] = inside[self.G[lo:lo + step][:, v]].all(axis=1)
        kernel = np.nonzero(stab)[0]
        if len(kernel) == 1 or not self.free:
            return np.arange(self.h, dtype=np.int64)[:, None]
        # H acts freely on the ranks: an element is known by the image of one rank, so gK by the images
        # of v0 under gK, i.e. by the smallest g(k(v0)) over k in K
        spots = self.G[kernel, v[0]].astype(np.int64)
        key = self.G[:, spots].min(axis=1)
        order = np.lexsort((np.arange(self.h), key))
        members = order.reshape(-1, len(kernel))
        return members[np.argsort(members[:, 0], kind="stable")]

    def _learn(self, sink) -> None:
        if (key := sink.tobytes()) not in self._learned_keys and len(self.learned) < self.max_learned:
            self._learned_keys.add(key)
            self.learned.append((sink, self._columns(sink), *self._cut(sink)))

    def _cut(self, sink):
        """The ids of the arcs into a set X (sink mask) and of the ranks outside it."""
        return self.np.nonzero(~sink[self.tails] & sink[self.heads])[0], self.np.nonzero(~sink)[0]

    def _columns(self, sink) -> list[int]:
        """The images gX of a set X (sink mask) by rank: entry v is the int whose bit g is set iff G[g, v] is in X
        (Python ints, so the layer loop tests a set with a few integer operations instead of numpy calls)."""
        np = self.np
        columns = []
        step = max(8, (self.COLUMN_BLOCK // max(1, self.h)) // 8 * 8)  # ranks at a time: |H| x step bools at once
        for lo in range(0, self.n, step):
            bits = np.packbits(sink[self.G[:, lo:lo + step]], axis=0, bitorder="little")  # ceil(|H|/8) x step
            width, raw = bits.shape[0], np.ascontiguousarray(bits.T).tobytes()
            columns.extend(int.from_bytes(raw[i:i + width], "little") for i in range(0, len(raw), width))
        return columns

    def _slack(self, met: int, big_c, entering, outside) -> int:
        """Exact slack of a set X in the committed state with the partial tree at big_c: ``met``, the images gX the
        tree's vertex set meets (bit g, see :meth:`_columns`); ``entering`` / ``outside``: :meth:`_cut`."""
        return int(self.res[entering].sum()) - int(self.pool[outside].sum()) - big_c * (self.h - met.bit_count())

    def _slope(self, root, tree_arcs, batch, verts, sink) -> int:
        """beta(X): how fast the slack of sink side X falls per unit of multiplicity."""
        np = self.np
        G = self.G

        def entering(arcs):
            if not arcs:
                return 0
            xs = G[:, [a for a, _ in arcs]]
            ys = G[:, [b for _, b in arcs]]
            return int(np.count_nonzero(~sink[xs] & sink[ys]))

        q = int(np.count_nonzero(~sink[G[:, root]]))
        p = int(np.count_nonzero(~sink[G[:, np.array(verts, dtype=np.int64)]].any(axis=1)))
        return entering(tree_arcs) + entering(batch) - q + p

    def _budget(self, tree_arcs, batch, big_c) -> int:
        """Largest c for which every arc still has residual >= 0 after the change."""
        used_t: dict[int, int] = {}
        used_b: dict[int, int] = {}
        for arcs, used in ((tree_arcs, used_t), (batch, used_b)):
            for x, y in arcs:
                o = self.orbit_of[self.arc_id[(x, y)]]
                used[o] = used.get(o, 0) + 1
        c = big_c
        for o, ub in used_b.items():
            ut = used_t.get(o, 0)
            c = min(c, (int(self.res[o]) + big_c * ut) // (ut + ub))
        return c

    def _largest(self, root, tree_arcs, batch, verts, big_c):
        """Largest c <= big_c keeping the invariant after adding ``batch`` (Newton); and the last violated set."""
        c = self._budget(tree_arcs, batch, big_c)
        last = None
        while c > 0:
            violated = self._check(root, tree_arcs, batch, verts, big_c, c)
            if violated is None:
                return 0, None
            if not violated:
                return c, None
            new = c
            for slack, sink in violated:
                beta = self._slope(root, tree_arcs, batch, verts, sink)
                assert beta > 0, "a violated set must lose slack with multiplicity"
                alpha = slack + c * beta
                new = min(new, alpha // beta)
                last = sink
            assert new < c
            c = max(new, 0)
        return 0, last

    # ----- growing one base tree -----------------------------------------------------------------
    def _layer(self, in_tree, order, depth, tree_arcs, big_c, forbidden):
        """One breadth-first layer: the shallowest parent with room for every reachable new node.

        Room means residual for the whole multiplicity; when no arc has that,
        room for one unit (the multiplicity then drops to what fits).
        """
        for need in ((big_c, 1) if big_c > 1 else (1,)):
            batch = self._layer_at(in_tree, order, depth, tree_arcs, need, forbidden)
            if batch:
                return batch
        return []

    def _layer_at(self, in_tree, order, depth, tree_arcs, need, forbidden):
        big_c = self._current
        guards = []  # learned sets: images the tree meets (bit g: gX holds a tree vertex), slack in units of C
        if need == big_c:
            for _sink, columns, entering, outside in self.learned:
                met = 0
                for v in order:
                    met |= columns[v]
                guards.append([columns, met, self._slack(met, big_c, entering, outside) // big_c])
        res = self.res.tolist()  # Python ints: the loop below reads them per arc (res is fixed during a layer)
        arc_id, orbit_of, heads, span = self.arc_id, self.orbit_of, self.head_list, self.out_span
        # out-arcs by residual, largest first, then head: arc ids follow (tail, head), so this keeps x's id range
        ranked = self.np.lexsort((self.heads, -self.res, self.tails)).tolist()
        in_tree_use: dict[int, int] = {}
        for x, y in tree_arcs:
            o = orbit_of[arc_id[(x, y)]]
            in_tree_use[o] = in_tree_use.get(o, 0) + 1
        batch_use: dict[int, int] = {}
        batch = []
        claimed = set()
        for _, _, x in sorted((depth[v], i, v) for i, v in enumerate(order)):
            lo, hi = span[x]
            for a in ranked[lo:hi]:
                y = heads[a]
                if in_tree[y] or y in claimed or (x, y) in forbidden:
                    continue
                o = orbit_of[a]
                ut = in_tree_use.get(o, 0)
                ub = batch_use.get(o, 0)
                # residual after rewinding the tree to `need` and adding one more arc of this orbit
                if res[o] + (big_c - need) * ut < need * (ub + 1):
                    continue
                deltas = []
                for columns, met, room in guards:
                    # images of the set that the arc enters cost a unit; images the tree meets anew give one
                    inside = columns[y]
                    delta = (inside & ~met).bit_count() - (inside & ~columns[x]).bit_count()
                    if room + delta < 0:
                        break
                    deltas.append(delta)
                else:
                    for guard, delta in zip(guards, deltas):
                        guard[1] |= guard[0][y]
                        guard[2] += delta
                    deltas = None
                if deltas is not None:
                    continue
                batch_use[o] = ub + 1
                claimed.add(y)
                batch.append((x, y))
        return batch

    def grow(self, root: int) -> Tree:
        np = self.np
        big_c = int(self.pool[root])
        self.pool[self.G[:, root]] = 0
        in_tree = [False] * self.n
        in_tree[root] = True
        order = [root]
        depth = {root: 0}
        tree_arcs: list[tuple[int, int]] = []
        forbidden: set[tuple[int, int]] = set()
        while len(order) < self.n:
            self._current = big_c
            batch = self._layer(in_tree, order, depth, tree_arcs, big_c, forbidden)
            if not batch:
                self._rewind(root, tree_arcs, big_c)
                raise SymmetryStuck(f"no arc orbit extends the tree of root {root}")
            while batch:
                verts = order + [y for _, y in batch]
                c, sink = self._largest(root, tree_arcs, batch, verts, big_c)
                if c > 0:
                    break
                if sink is None:
                    culprits = list(range(len(batch)))
                else:
                    culprits = [i for i, (x, y) in enumerate(batch)
                                if np.count_nonzero(~sink[self.G[:, x]] & sink[self.G[:, y]])]
                    if not culprits:
                        culprits = list(range(len(batch)))
                if len(culprits) > 1:
                    # the tree enters the violated set too often: keep its first way in only
                    drop = set(culprits[1:])
                else:
                    drop = set(culprits)
                    forbidden.update(batch[i] for i in drop)
                batch = [a for i, a in enumerate(batch) if i not in drop]
            if not batch:
                continue
            # commit: rewind the part of the multiplicity that does not fit, then take the batch
            if c < big_c:
                if tree_arcs:
                    self.res += (big_c - c) * self._uses(tree_arcs)
                self.pool[self.G[:, root]] += big_c - c
                big_c = c
            self.res -= big_c * self._uses(batch)
            for x, y in batch:
                tree_arcs.append((x, y))
                in_tree[y] = True
                depth[y] = depth[x] + 1
                order.append(y)
            forbidden.clear()
        return Tree(root, big_c, tuple(tree_arcs))

    def _rewind(self, root: int, tree_arcs, big_c: int) -> None:
        if tree_arcs:
            self.res += big_c * self._uses(tree_arcs)
        self.pool[self.G[:, root]] += big_c

    def residual(self) -> dict[tuple[int, int], int]:
        return {(int(a), int(b)): int(r) for a, b, r in zip(self.tails, self.heads, self.res) if r > 0}

    def images(self, tree: Tree) -> list[Tree]:
        """The |H| trees a base tree stands for.  Their arcs are shared (x, y) tuples, one per arc of the
        network, so |H| trees of N-1 arcs cost a reference per arc, not a tuple and two ints."""
        ids = self._image_ids(list(tree.arcs))
        shared = self.arc_tuples
        roots = self.G[:, tree.root].tolist()
        out = []
        step = 256  # rows to Python ints a block at a time (|H| x N ints at once: 600 MB at 4,096 ranks)
        for lo in range(0, self.h, step):
            for g, row in enumerate(ids[lo:lo + step].tolist(), lo):
                out.append(Tree(roots[g], tree.multiplicity, tuple(map(shared.__getitem__, row))))
        return out

    def run(self, progress: Progress | None = None) -> tuple[list[Tree], bool]:
        """Base trees' images for as much demand as symmetry allows; True when all demand is met.  ``progress``
        hears ``"packing trees"``: demand placed out of the total."""
        trees: list[Tree] = []
        base_roots = [r for r in self.targets if self.pool[r] > 0]
        total = int(self.pool.sum())
        try:
            while self.pool.sum() > 0:
                for r in base_roots:
                    if self.pool[r] > 0:
                        report(progress, "packing trees", total - int(self.pool.sum()), total)
                        trees.extend(self.images(self.grow(r)))
        except SymmetryStuck:
            return trees, False
        report(progress, "packing trees", total, total)
        return trees, True


def pack_trees_symmetric(
    n: int, caps: dict[tuple[int, int], int], demand: Sequence[int], group: Sequence[Sequence[int]], accept: int = 1,
    progress: Progress | None = None, blocks: Sequence[Sequence[int]] = (),
) -> PackResult:
    """Pack with symmetry first; whatever symmetry cannot place is packed without it (``progress``: each part's
    demand placed).  ``blocks``: partitions of the ranks the checks may use (:meth:`SymmetricPacker._feeds`;
    the same trees with or without)."""
    sym = SymmetricPacker(n, caps, demand, group, blocks)
    trees, done = sym.run(progress)
    stats = {"maxflows": sym.maxflows, "symmetric_checks": sym.checks, "symmetric_trees": len(trees)}
    if not done:
        rest = Packer(n, sym.residual(), [int(p) for p in sym.pool], accept)
        tail = rest.run(progress, "packing the rest without symmetry")
        trees.extend(tail.trees)
        stats["maxflows"] += rest.maxflows
    return PackResult(trees, stats)
