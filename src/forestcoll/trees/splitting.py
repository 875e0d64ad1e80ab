"""Switch removal by edge splitting, keeping the physical path behind every new arc.

Input: integer capacities ``c`` on the fabric's arcs (trees per link), root
demands ``k*w(c)`` and the rooted condition

    for every compute node v:  max-flow(s -> v) >= k*D     (s -> c has capacity k*w(c))

Splitting off ``g`` units of the pair (u->w, w->t) lowers both arcs by ``g`` and
raises u->t by ``g``.  It only lowers the capacity of a cut (source side S' with
s in S') when it is *dangerous* for it: u,t in S' and w not, or w in S' and u,t
not.  If the split of ``g0`` leaves max-flow(s, v) = f < k*D, the minimum over
dangerous cuts for v is f + g0, so the largest safe amount is exactly
``min over v of (f_v + g0 - k*D)``: one max-flow per target, no search
(:func:`_largest_safe_split`).  By Bang-Jensen, Frank and Jackson, when a
switch's in-capacity does not exceed its out-capacity, its in-arcs can be split
off completely; extra in-capacity is paired with a virtual arc w -> s, which no
cut counts, and is dropped.  Switches with just two neighbours are split
without any test (every s-v flow survives), and dead-end switches (one
neighbour) are simply dropped.

Which pairs are split is free (any complete splitting keeps the condition,
so the bound and its certificate do not depend on it); the choice shapes the
trees.  Given each node's box, a pair that would join two compute nodes of
one box over a path leaving the box (GPU -> NIC -> network switch -> NIC ->
GPU of the same box) comes last: a runtime's peer-to-peer connection between
two GPUs of one box takes the in-box link (NVLink, xGMI), not the network, so
a tree edge on such a path loads links its trees never counted.  Such pairs
are split only when no other pair of the switch can take the capacity.

With a group H of automorphisms (the topology's declared symmetries, restricted
to those that fix the root weights), every split is applied to a whole H-orbit
of (u, w, t) triples at once, so the graph stays H-invariant and one target per
H-orbit suffices; the amount comes from a Newton iteration on violated cuts.
When no orbit can be split any further, H shrinks to a subgroup (down to the
trivial one, where the theorem guarantees progress).

References: J. Bang-Jensen, A. Frank, B. Jackson, "Preserving and increasing
local edge-connectivity in mixed graphs", SIAM J. Discrete Math. 8(2), 1995
(splitting off at a node whose in-degree is at most its out-degree keeps rooted
connectivity); ForestColl (arXiv 2402.06787), switch removal.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from forestcoll.graph.maxflow import FlowNetwork, check_capacities
from forestcoll.graph.symmetry import Perm, group_table

__all__ = ["Path", "SplitResult", "SplittingError", "split_switches", "trim_switch_excess"]


class SplittingError(RuntimeError):
    """Internal: the splitting theorem was contradicted (a bug, never a user error)."""


Path = tuple[int, ...]


@dataclass
class SplitResult:
    """Arcs between compute nodes after every switch is gone.

    ``caps[(u, t)]`` is the number of trees the logical arc u->t may carry and
    ``paths[(u, t)]`` splits that number over physical routes (node-index tuples
    from u to t, through switches only).
    """

    caps: dict[tuple[int, int], int]
    paths: dict[tuple[int, int], dict[Path, int]]
    group: np.ndarray  # the group used, a row per element (identity first): int32, |H| x (nodes + 1)
    stats: dict[str, int] = field(default_factory=dict)


def _shortcut(path: Path) -> Path:
    """Remove cycles from a walk so every node appears once."""
    out: list[int] = []
    pos: dict[int, int] = {}
    for v in path:
        if v in pos:
            cut = pos[v]
            for x in out[cut + 1 :]:
                del pos[x]
            del out[cut + 1 :]
        else:
            pos[v] = len(out)
            out.append(v)
    return tuple(out)


class _State:
    """Mutable splitting state: capacities, adjacency, path bundles."""

    def __init__(self, n: int, arcs: Sequence[tuple[int, int, int]], is_compute: Sequence[bool],
                 box: Sequence[str | None] | None = None) -> None:
        self.n = n
        self.source = n
        self.is_compute = list(is_compute)
        self.box = list(box) if box is not None else [None] * n
        self.caps: dict[tuple[int, int], int] = {}
        self.out: list[set[int]] = [set() for _ in range(n + 1)]
        self.inn: list[set[int]] = [set() for _ in range(n + 1)]
        self.paths: dict[tuple[int, int], dict[Path, int]] = {}
        self.touched: set[int] = set()  # nodes whose neighbour sets may have changed (Splitter.run's degree heap)
        for u, v, c in arcs:
            if c > 0:
                self._add(u, v, c, {(u, v): c})

    def _add(self, u: int, v: int, amount: int, bundle: dict[Path, int]) -> None:
        key = (u, v)
        self.caps[key] = self.caps.get(key, 0) + amount
        self.out[u].add(v)
        self.inn[v].add(u)
        self.touched.add(u)
        self.touched.add(v)
        mine = self.paths.setdefault(key, {})
        for p, a in bundle.items():
            mine[p] = mine.get(p, 0) + a

    def _take(self, u: int, v: int, amount: int) -> list[tuple[Path, int]]:
        """Remove ``amount`` units from arc u->v and return the paths they came with."""
        key = (u, v)
        left = self.caps[key] - amount
        assert left >= 0
        taken: list[tuple[Path, int]] = []
        bundle = self.paths.get(key)
        if bundle is not None:
            need = amount
            for p in sorted(bundle):
                if need == 0:
                    break
                a = min(bundle[p], need)
                taken.append((p, a))
                need -= a
                if a == bundle[p]:
                    del bundle[p]
                else:
                    bundle[p] -= a
        if left == 0:
            del self.caps[key]
            self.paths.pop(key, None)
            self.out[u].discard(v)
            self.inn[v].discard(u)
            self.touched.add(u)
            self.touched.add(v)
        else:
            self.caps[key] = left
        return taken

    def split(self, u: int, w: int, t: int, amount: int) -> None:
        """Split ``amount`` units off (u->w, w->t); loops and arcs into the super-source are dropped."""
        first = self._take(u, w, amount)
        second = self._take(w, t, amount)
        if u == t or t == self.source:
            return
        merged: dict[Path, int] = {}
        i = j = 0
        ra = first[0][1] if first else 0
        rb = second[0][1] if second else 0
        while i < len(first) and j < len(second):
            a = min(ra, rb)
            p = _shortcut(first[i][0] + second[j][0][1:])
            merged[p] = merged.get(p, 0) + a
            ra -= a
            rb -= a
            if ra == 0:
                i += 1
                ra = first[i][1] if i < len(first) else 0
            if rb == 0:
                j += 1
                rb = second[j][1] if j < len(second) else 0
        self._add(u, t, amount, merged)

    def leaves_box(self, u: int, w: int, t: int) -> bool:
        """Whether splitting (u->w, w->t) makes an arc between two compute nodes of one box whose paths leave
        the box (through w or a node on the paths the two arcs stand for)."""
        b = self.box[u]
        if b is None or self.box[t] != b or not (self.is_compute[u] and self.is_compute[t]):
            return False
        if self.box[w] != b:
            return True
        return any(self.box[x] != b for arc in ((u, w), (w, t)) for p in self.paths.get(arc, ()) for x in p)

    def remove_node(self, w: int) -> None:
        for t in list(self.out[w]):
            self._take(w, t, self.caps[(w, t)])
        for u in list(self.inn[w]):
            self._take(u, w, self.caps[(u, w)])


def _free_on(elements: np.ndarray, points: Sequence[int]) -> bool:
    pts = np.asarray(points, dtype=np.int64)
    return bool((elements[1:][:, pts] != pts).all())


def _subgroups(generators: Sequence[Perm], n: int, compute: Sequence[int], limit: int) -> list[np.ndarray]:
    """Groups to try, largest first: spans of generator prefixes that act freely on compute nodes (each an int32
    table, a row per element: |H| x n integers, never |H| x n Python objects)."""
    chain = []
    for end in range(len(generators), 0, -1):
        elems = group_table(list(generators[:end]), n, limit)
        if elems is not None and len(elems) > 1 and _free_on(elems, compute):
            chain.append(elems)
    chain.append(np.arange(n, dtype=np.int32)[None, :])
    return chain


class Splitter:
    """Removes every switch of a capacitated fabric while keeping the rooted condition."""

    def __init__(
        self,
        n: int,
        arcs: Sequence[tuple[int, int, int]],
        is_compute: Sequence[bool],
        root_caps: Sequence[int],
        need: int,
        generators: Sequence[Perm] = (),
        group_limit: int = 4096,
        box: Sequence[str | None] | None = None,
    ) -> None:
        self.state = _State(n, arcs, is_compute, box)
        self.n = n
        self.root_caps = list(root_caps)  # per node (0 for non-roots)
        self.need = need
        self.compute = [i for i in range(n) if is_compute[i]]
        caps0 = {(u, v): c for u, v, c in arcs if c > 0}
        # only symmetries that preserve the integer capacities are usable
        generators = [p for p in generators if all(caps0.get((p[u], p[v])) == c for (u, v), c in caps0.items())]
        ext = [tuple(p) + (n,) for p in generators]
        self.groups = _subgroups(ext, n + 1, self.compute, group_limit)
        self.level = 0
        self.unit = max(1, max(self.root_caps, default=1))
        self._targets_cache: dict[int, list[int]] = {}
        self._splitting: set[int] = set()
        self.maxflows = 0
        self.attempts = 0

    # ----- group helpers --------------------------------------------------
    @property
    def group(self) -> np.ndarray:
        return self.groups[self.level]

    def _targets(self) -> list[int]:
        """One compute node per orbit of the current group."""
        if self.level not in self._targets_cache:
            orbit = self.group.min(axis=0).tolist()
            seen: set[int] = set()
            out = []
            for c in self.compute:
                if orbit[c] not in seen:
                    seen.add(orbit[c])
                    out.append(c)
            self._targets_cache[self.level] = out
        return self._targets_cache[self.level]

    # ----- flow checks -----------------------------------------------------
    def _violations(self, delta: dict[tuple[int, int], int]) -> list[tuple[int, list[bool]]]:
        """Min cuts below the demand, one per failing target, with ``delta`` added to the capacities."""
        st = self.state
        caps = dict(st.caps)
        for arc, d in delta.items():
            caps[arc] = caps.get(arc, 0) + d
        keys = [k for k, c in caps.items() if c > 0]
        tails = [u for u, _ in keys] + [st.source] * len(self.compute)
        heads = [v for _, v in keys] + self.compute
        values = [caps[k] for k in keys] + [self.root_caps[c] for c in self.compute]
        check_capacities(values)
        net = FlowNetwork(self.n + 1, tails, heads)
        found = []
        for v in self._targets():
            self.maxflows += 1
            if net.value(values, st.source, v) < self.need:
                self.maxflows += 1
                found.append(net.min_cut(values, st.source, v))
        return found

    # ----- one orbit of triples ---------------------------------------------
    def _orbit(self, u: int, w: int, t: int) -> list[tuple[int, int, int]]:
        seen = set()
        out = []
        G = self.group
        for trip in zip(G[:, u].tolist(), G[:, w].tolist(), G[:, t].tolist()):
            if trip not in seen:
                seen.add(trip)
                out.append(trip)
        return out

    def _delta(self, triples: list[tuple[int, int, int]], amount: int) -> dict[tuple[int, int], int]:
        s = self.state.source
        delta: dict[tuple[int, int], int] = defaultdict(int)
        for a, b, c in triples:
            delta[(a, b)] -= amount
            delta[(b, c)] -= amount
            if a != c and c != s:
                delta[(a, c)] += amount
        return delta

    def _try(self, u: int, w: int, t: int, cap_limit: int) -> int:
        """Split as much as is safe (at most ``cap_limit`` per triple) off the orbit of (u, w, t); return it."""
        st = self.state
        triples = self._orbit(u, w, t)
        usage: dict[tuple[int, int], int] = defaultdict(int)
        for a, b, c in triples:
            usage[(a, b)] += 1
            usage[(b, c)] += 1
        amount = min([cap_limit] + [st.caps.get(arc, 0) // k for arc, k in usage.items()])
        while amount > 0:
            self.attempts += 1
            violated = self._violations(self._delta(triples, amount))
            if not violated:
                break
            # a cut's value falls by m per unit split, m = number of triples dangerous for it
            new = amount
            for value, mask in violated:
                m = sum(self._dangerous(mask, trip) for trip in triples)
                assert m > 0, "a violated cut must be dangerous for the split"
                new = min(new, (value + amount * m - self.need) // m)
            amount = max(new, 0)
            if len(triples) == 1:
                break  # exact in one step: the min over dangerous cuts is known per target
        for a, b, c in triples if amount > 0 else ():
            st.split(a, b, c, amount)
        return amount

    def _dangerous(self, mask: Sequence[bool], trip: tuple[int, int, int]) -> int:
        a, b, c = trip
        s = self.state.source
        loss = (mask[a] and not mask[b]) + (mask[b] and not mask[c])
        gain = 1 if (a != c and c != s and mask[a] and not mask[c]) else 0
        return loss - gain

    # ----- driver -----------------------------------------------------------
    def run(self) -> SplitResult:
        st = self.state
        remaining = {w for w in range(self.n) if not st.is_compute[w]}
        two_neighbour = 0

        def degree(x: int) -> int:
            return len(st.inn[x] | st.out[x])

        # lowest-degree switch first (cheap ones early keep later graphs small), ties by index: a heap of
        # (degree, switch) refreshed for the switches whose neighbours changed; an entry whose degree is no
        # longer the switch's is dropped when it comes up, so the top is min over the remaining switches
        heap = [(degree(x), x) for x in remaining]
        heapq.heapify(heap)
        st.touched.clear()
        while remaining:
            for x in st.touched & remaining:
                heapq.heappush(heap, (degree(x), x))
            st.touched.clear()
            while heap[0][1] not in remaining or heap[0][0] != degree(heap[0][1]):
                heapq.heappop(heap)
            w = heap[0][1]
            if self._split_two_neighbour(w):
                two_neighbour += 1
                st.remove_node(w)
                remaining.discard(w)
                continue
            members = sorted(set(self.group[:, w].tolist()) & remaining)
            self._split_orbit(members)
            for x in members:
                st.remove_node(x)
                remaining.discard(x)
        caps = {k: c for k, c in st.caps.items() if st.is_compute[k[0]] and st.is_compute[k[1]]}
        paths = {k: dict(st.paths[k]) for k in caps}
        stats = {"maxflows": self.maxflows, "attempts": self.attempts, "two_neighbour": two_neighbour,
                 "group_order": len(self.group)}
        return SplitResult(caps, paths, self.group, stats)

    def _split_two_neighbour(self, w: int) -> bool:
        st = self.state
        nbrs = st.inn[w] | st.out[w]
        if len(nbrs) > 2:
            return False
        if len(nbrs) < 2:
            return True  # a dead end: anything through it comes straight back
        a, b = sorted(nbrs)
        for x, y in ((a, b), (b, a)):
            amount = min(st.caps.get((x, w), 0), st.caps.get((w, y), 0))
            if amount > 0:
                st.split(x, w, y, amount)
        return True

    def _split_orbit(self, members: list[int]) -> None:
        """Split off all in-capacity of the switches ``members`` (an orbit of the current group)."""
        st = self.state
        s = st.source
        self._splitting = set(members)
        for w in members:
            cin = sum(st.caps[(u, w)] for u in st.inn[w])
            cout = sum(st.caps[(w, t)] for t in st.out[w])
            if cin > cout:
                st._add(w, s, cin - cout, {})
        while any(st.inn[w] for w in members):
            progressed = False
            for w in members:
                for u in sorted(st.inn[w]):
                    if (u, w) in st.caps:
                        progressed |= self._split_in_arc(u, w)
            if not progressed:
                if self.level + 1 < len(self.groups):
                    self.level += 1
                    continue
                raise SplittingError(f"no admissible split at switch {members[0]}")
        for w in members:
            if (w, s) in st.caps:
                st._take(w, s, st.caps[(w, s)])

    def _hops(self, u: int, w: int) -> dict[int, int]:
        """Hop distances from u in the current graph without w's orbit (and without the super-source)."""
        st = self.state
        skip = self._splitting | {w, st.source}
        dist = {u: 0}
        frontier = [u]
        while frontier:
            nxt = []
            for x in frontier:
                for y in st.out[x]:
                    if y not in dist and y not in skip:
                        dist[y] = dist[x] + 1
                        nxt.append(y)
            frontier = nxt
        return dist

    def _split_in_arc(self, u: int, w: int) -> bool:
        """Share in-arc u->w out over w's out-arcs, farthest targets first; True if anything was split.

        Targets whose arc from u would leave and re-enter u's box
        (:meth:`_State.leaves_box`) come after all others; then targets are
        ranked by hop distance from u without w and the switches
        being split with it (so the switch
        joins what is otherwise far apart), then by unused capacity (so targets
        are spread), then cyclically after u.  Each target gets at most a share
        of about cap/min(#targets, max(8, log2 #targets)) and never less than one root's k trees,
        which keeps logical arcs thick enough for whole trees while giving
        every node a few far-reaching arcs (short trees).
        """
        st = self.state
        s = st.source
        cands = sorted(t for t in st.out[w] if t != s and t != u)
        if not cands and u not in st.out[w] and (w, s) not in st.caps:
            return False
        spread = max(1, len(cands) if len(cands) <= 8 else max(8, len(cands).bit_length()))
        share = max(self.unit, -(-st.caps[(u, w)] // spread))
        pos = {t: (i - sum(1 for c in cands if c <= u)) % max(1, len(cands)) for i, t in enumerate(cands)}
        last = {t: st.leaves_box(u, w, t) for t in cands}
        progressed = False
        tried: set[int] = set()
        while (u, w) in st.caps:
            dist = self._hops(u, w)
            far = len(dist) + 1
            left = [t for t in cands if t not in tried and (w, t) in st.caps]
            if not left:
                break
            t = min(left, key=lambda t: (last[t], -dist.get(t, far), -st.caps[(w, t)], pos[t]))
            tried.add(t)
            if self._try(u, w, t, share) > 0:
                progressed = True
        # a loop through w or the virtual sink only as a last resort
        for t in (u, s):
            if (u, w) in st.caps and (w, t) in st.caps:
                progressed |= self._try(u, w, t, st.caps[(u, w)]) > 0
        return progressed


def trim_switch_excess(
    n: int,
    arcs: Sequence[tuple[int, int, int]],
    is_compute: Sequence[bool],
    root_caps: Sequence[int],
    need: int,
) -> tuple[list[tuple[int, int, int]] | None, int | None]:
    """Lower the out-arcs of switches whose out-capacity exceeds their in-capacity.

    A switch cannot copy, so trees use no more of its out-arcs than of its
    in-arcs; and only when in >= out at every switch is a complete splitting
    guaranteed.  Rounding capacities down (floor(U*b)), or one-way links, can
    break that.  The excess is removed one out-arc at a time, each by the
    largest amount that keeps the rooted condition (exact: a cut loses what
    is removed from its arcs), repeating until every switch is balanced (a trim
    lowers the in-capacity of the switch downstream).  Returns the trimmed
    arcs and None, or None and the first switch whose excess could not go.
    """
    caps = {(u, v): c for u, v, c in arcs if c > 0}
    compute = [i for i in range(n) if is_compute[i]]
    source = n
    while True:
        into = [0] * n
        out = [0] * n
        for (u, v), c in caps.items():
            out[u] += c
            into[v] += c
        excess = {w: out[w] - into[w] for w in range(n) if not is_compute[w] and out[w] > into[w]}
        if not excess:
            return [(u, v, caps.get((u, v), 0)) for u, v, _ in arcs], None
        for w, extra in sorted(excess.items()):
            for t in sorted(t for (a, t) in caps if a == w):
                if extra == 0:
                    break
                cut = min(extra, caps[(w, t)])
                caps[(w, t)] -= cut
                keys = [a for a, c in caps.items() if c > 0]
                net = FlowNetwork(n + 1, [a for a, _ in keys] + [source] * len(compute), [b for _, b in keys] + compute)
                values = [caps[a] for a in keys] + [root_caps[c] for c in compute]
                short = max(need - net.value(values, source, v) for v in compute)
                restore = max(0, min(cut, short))  # each unit removed lowers a cut through w->t by one
                caps[(w, t)] += restore
                extra -= cut - restore
            if extra > 0:
                return None, w


def split_switches(
    n: int,
    arcs: Sequence[tuple[int, int, int]],
    is_compute: Sequence[bool],
    root_caps: Sequence[int],
    need: int,
    generators: Sequence[Perm] = (),
    box: Sequence[str | None] | None = None,
) -> SplitResult:
    """Remove every switch; see the module docstring for the contract (``box``: each node's box, or None, so
    that pairs leaving and re-entering a box come last)."""
    return Splitter(n, arcs, is_compute, root_caps, need, generators, box=box).run()
