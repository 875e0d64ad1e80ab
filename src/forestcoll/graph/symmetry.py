"""Automorphisms of a fabric: closure of declared generators, orbits, detection with bliss, free subgroups.

A permutation is a tuple ``p`` with ``p[i]`` the image of node ``i``.  Every
automorphism maps compute nodes to compute nodes and preserves each arc's
bandwidth, so max-flow values from a symmetric super-source to ``v`` and to
``p[v]`` are equal; algorithms therefore test one node per orbit.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from forestcoll.graph.igraph_import import import_igraph
from forestcoll.graph.orbits import Perm, colour_refinement, orbit_cycles, orbits  # the numpy-free part, here too

__all__ = [
    "Perm", "automorphism_rows", "canonical_order", "centralizer_automorphisms", "colour_refinement",
    "detect_automorphisms", "element_orbits", "free_subgroup", "group_elements", "group_table", "orbit_cycles",
    "orbits",
]

FIRST_ELEMENTS = 4  # first elements free_subgroup grows a group from (one above 5,000 nodes)
STEP_CHOICES = 6  # groups compared at each step of free_subgroup (the largest is kept)
RANDOM_ELEMENTS = 120  # random group elements tried per step of free_subgroup when the structured ones fail


def group_elements(generators: Sequence[Perm], n: int, limit: int) -> list[Perm] | None:
    """All elements of the generated group (identity first), or None when there are more than ``limit``."""
    table = group_table(generators, n, limit)
    return None if table is None else [tuple(g) for g in table.tolist()]


def group_table(generators: Sequence[Perm], n: int, limit: int) -> np.ndarray | None:
    """:func:`group_elements` as one int32 array (a row per element, same order), or None above ``limit``.

    Breadth first from the identity: for each element g in order, each generator s in order, s o g is appended
    when new.  Rows are told apart by a 64-bit hash of their bytes and compared in full on a hash match, so the
    search holds the table and a small dict, not a bytes copy of every element (4,096 elements of 8,700 nodes:
    140 MB, where tuples of ints took 1.3 GB)."""
    gens = [np.asarray(g, dtype=np.int32) for g in generators]
    table = np.empty((min(limit, 64) + 1, n), dtype=np.int32)
    table[0] = np.arange(n, dtype=np.int32)
    size = 1
    seen: dict[int, list[int]] = {hash(table[0].tobytes()): [0]}
    head = 0
    while head < size:
        g = table[head]
        head += 1
        for s in gens:
            h = s[g]  # i -> s[g[i]]
            key = hash(h.tobytes())
            rows = seen.get(key)
            if rows is not None and any(np.array_equal(table[r], h) for r in rows):
                continue
            if size == limit:
                return None
            if size == len(table):
                table = np.concatenate([table, np.empty((min(limit + 1, 2 * len(table)) - len(table), n),
                                                        dtype=np.int32)])
            table[size] = h
            seen.setdefault(key, []).append(size)
            size += 1
    return table[:size].copy() if size < len(table) else table


def element_orbits(elements: Sequence[Perm]) -> list[int]:
    """Orbit id (smallest member) of each point, given *all* elements of a group."""
    import numpy as np

    return np.asarray(elements, dtype=np.int64).min(axis=0).tolist()


def _coloured_graph(is_compute: Sequence[bool], arcs: Sequence[tuple[int, int, Fraction]]):
    """The fabric for bliss: nodes coloured by kind, every arc subdivided by a vertex coloured by its bandwidth
    (colours numbered by sorted bandwidth, so the graph does not depend on the arcs' order)."""
    bw_colour = {bw: i for i, bw in enumerate(sorted({bw for _, _, bw in arcs}))}
    colours = [0 if c else 1 for c in is_compute]
    edges = []
    arc_colour = []
    for u, v, bw in arcs:
        mid = len(colours)
        colour = bw_colour[bw]
        arc_colour.append(colour)
        colours.append(2 + colour)
        edges.append((u, mid))
        edges.append((mid, v))
    return import_igraph().Graph(n=len(colours), edges=edges, directed=True), colours, arc_colour, len(bw_colour)


def canonical_order(n: int, is_compute: Sequence[bool], arcs: Sequence[tuple[int, int, Fraction]]) -> list[int]:
    """A relabelling ``new[i]`` of the nodes that is the same for every numbering of an isomorphic fabric
    (bliss's canonical labelling, restricted to the nodes): searches run on it do not depend on how a file
    happened to order or name its nodes."""
    # every arc u -> v becomes u - a - b - v with a and b coloured (bandwidth, tail side / head side), so the
    # direction survives in the undirected graph the labelling is computed on
    bw_colour = {bw: i for i, bw in enumerate(sorted({bw for _, _, bw in arcs}))}
    colours = [0 if c else 1 for c in is_compute]
    edges = []
    for u, v, bw in arcs:
        a = len(colours)
        colours += [2 + 2 * bw_colour[bw], 3 + 2 * bw_colour[bw]]
        edges += [(u, a), (a, a + 1), (a + 1, v)]
    graph = import_igraph().Graph(n=len(colours), edges=edges, directed=False)
    # canonical_permutation()[j] is the vertex that gets canonical position j (what permute_vertices expects)
    at = np.asarray(graph.canonical_permutation(sh="fl", color=colours), dtype=np.int64)
    position = np.empty(len(at), dtype=np.int64)
    position[at] = np.arange(len(at))
    labels = position[:n]
    new = np.empty(n, dtype=np.int64)
    new[np.argsort(labels, kind="stable")] = np.arange(n)
    return new.tolist()


def detect_automorphisms(
    n: int, is_compute: Sequence[bool], arcs: Sequence[tuple[int, int, Fraction]]
) -> list[Perm]:
    """Generators of the automorphism group found with bliss (via igraph).

    Arcs are subdivided by a vertex coloured by the arc's bandwidth, so the
    automorphisms found preserve bandwidths; each is re-checked before use.
    """
    return [tuple(row) for row in automorphism_rows(n, is_compute, arcs).tolist()]


def automorphism_rows(n: int, is_compute: Sequence[bool], arcs: Sequence[tuple[int, int, Fraction]]) -> np.ndarray:
    """:func:`detect_automorphisms` as one int64 array, a row per generator (same order): thousands of
    generators of thousands of nodes stay one array instead of millions of Python ints."""
    graph, colours, arc_colour, ncol = _coloured_graph(is_compute, arcs)
    tails = np.array([u for u, _, _ in arcs], dtype=np.int64)
    heads = np.array([v for _, v, _ in arcs], dtype=np.int64)
    ncol = max(ncol, 1)
    col = np.array(arc_colour, dtype=np.int64)
    kind = np.array(is_compute, dtype=bool)
    # the arcs at each node (CSR): a permutation maps the arcs touching the points it moves onto arcs touching
    # them and fixes every other arc, so it preserves the arcs iff it preserves those (as a multiset)
    ends = np.concatenate([tails, heads])
    sorted_ends = np.argsort(ends, kind="stable")
    by_node = sorted_ends % max(len(tails), 1)
    start = np.searchsorted(ends[sorted_ends], np.arange(n + 1))
    found = graph.automorphism_group(sh="fl", color=colours)
    rows = np.array([gen[:n] for gen in found], dtype=np.int64).reshape(len(found), n)
    del found
    moved_mask = rows != np.arange(n, dtype=np.int64)
    keep = []
    for r, perm in enumerate(rows):
        moved = np.flatnonzero(moved_mask[r])
        if len(moved) == 0 or not np.array_equal(kind[perm[moved]], kind[moved]):
            continue
        touched = np.unique(np.concatenate([by_node[start[m]:start[m + 1]] for m in moved.tolist()]))
        t, h, c = tails[touched], heads[touched], col[touched]
        if np.array_equal(np.sort((perm[t] * n + perm[h]) * ncol + c), np.sort((t * n + h) * ncol + c)):
            keep.append(r)
    return rows[keep]


def _moved(p: np.ndarray) -> np.ndarray:
    return np.flatnonzero(p != np.arange(len(p)))


def _semiregular_on(p: np.ndarray, points: np.ndarray) -> bool:
    """True when ``p`` moves every point of ``points`` in cycles of one common length (so <p> acts freely)."""
    if len(points) == 0:
        return False
    length = np.ones(len(points), dtype=np.int64)
    cur = p[points]
    while True:
        done = cur == points
        if done.all():
            return bool(length[0] > 1) and bool((length == length[0]).all())
        if done.any() and not done.all():
            return False
        cur = p[cur]
        length += 1


def _cycle_lengths(p: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Length of the cycle of ``p`` through each point of ``points``."""
    length = np.zeros(len(points), dtype=np.int64)
    cur = p[points]
    steps = 1
    open_ = np.ones(len(points), dtype=bool)
    while open_.any():
        back = open_ & (cur == points)
        length[back] = steps
        open_ &= ~back
        cur = p[cur]
        steps += 1
    return length


def _semiregularize(c: np.ndarray, fixers: Sequence[np.ndarray], compute: np.ndarray, budget: int = 64) -> np.ndarray:
    """Multiply ``c`` by automorphisms of smaller support (e.g. swaps of two GPUs on one PCIe switch) while that
    puts more compute nodes on cycles of the longest length: a product of block swaps whose inner matchings
    disagree becomes semiregular."""
    def score(p: np.ndarray) -> tuple[int, int]:
        lengths = _cycle_lengths(p, compute)
        top = int(lengths.max())
        return int((lengths == top).sum()), top

    best = score(c)
    while best[0] < len(compute) and budget > 0:
        improved = False
        for f in fixers:
            budget -= 1
            trial = f[c]
            sc = score(trial)
            if sc > best:
                c, best, improved = trial, sc, True
                break
            if budget <= 0:
                break
        if not improved:
            break
    return c


def _product(perms: Sequence[np.ndarray], n: int) -> np.ndarray:
    out = np.arange(n, dtype=np.int64)
    for p in perms:
        out = p[out]  # apply out first, then p
    return out


def _free_order(gens: Sequence[np.ndarray], n: int, compute: np.ndarray) -> int | None:
    """The order of <gens> when the group acts freely on ``compute``, else None.

    In a free action the elements are told apart by the image of one rank c, so the group is enumerated by
    that image: s o g is new when it sends c somewhere new (it must then fix no rank), and must equal the
    element already recorded there otherwise (else their quotient, not the identity, fixes c).  The recorded
    elements are closed under the generators, so they are the whole group: no hashing of whole permutations."""
    if len(compute) == 0:
        return None
    c = int(compute[0])
    identity = np.arange(n, dtype=np.int64)
    at: dict[int, np.ndarray] = {c: identity}
    frontier = [identity]
    while frontier:
        nxt = []
        for g in frontier:
            for s in gens:
                h = s[g]
                image = int(h[c])
                known = at.get(image)
                if known is None:
                    if (h[compute] == compute).any():
                        return None  # a new element that fixes a rank
                    at[image] = h
                    nxt.append(h)
                elif known.tobytes() != h.tobytes():  # same dtype and length: byte equality is equality
                    return None  # two elements agree on c: their quotient fixes it
        frontier = nxt
    return len(at)


def _find(parent: list[int], i: int) -> int:
    """Union-find root of ``i`` (with path halving)."""
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return i


def _candidates(gens: list[np.ndarray], n: int, compute: np.ndarray) -> list[np.ndarray]:
    """Elements likely to be semiregular on the compute nodes, best first: the product of each class of
    generators (equal number of moved points, connected supports; a product of transpositions along a tree is
    one long cycle), corrected by smaller generators towards equal cycle lengths; the generators; for small
    generating sets (rings, tori, cubes: rotations are products of reflections) products of pairs."""
    by_size: dict[int, list[np.ndarray]] = {}
    for g in gens:
        by_size.setdefault(len(_moved(g)), []).append(g)
    cands: list[np.ndarray] = []
    for size in sorted(by_size, reverse=True):
        group = by_size[size]
        parent = list(range(len(group)))
        owner: dict[int, int] = {}
        for i, g in enumerate(group):
            for pt in _moved(g).tolist():
                if pt in owner:
                    parent[_find(parent, i)] = _find(parent, owner[pt])
                else:
                    owner[pt] = i
        comps: dict[int, list[np.ndarray]] = {}
        for i, g in enumerate(group):
            comps.setdefault(_find(parent, i), []).append(g)
        smaller = [g for size2, gs in by_size.items() if size2 < size for g in gs]
        for members in comps.values():
            prod = _product(members, n)
            where = np.intersect1d(_moved(prod), compute)
            if len(where) and smaller and not _semiregular_on(prod, where):
                prod = _semiregularize(prod, smaller, where)
            cands.append(prod)
    cands.sort(key=lambda c: (-int(np.isin(_moved(c), compute).sum()), -int(_cycle_lengths(c, compute).max())))
    cands.extend(gens)
    # parts that are semiregular on disjoint sets of ranks with one cycle length (e.g. a rotation of the A100
    # boxes and one of the H100 boxes) combine into one element moving every rank
    parts = []
    for c in cands[:40]:
        where = np.intersect1d(_moved(c), compute)
        if 0 < len(where) < len(compute) and _semiregular_on(c, where):
            parts.append((c, set(where.tolist()), int(_cycle_lengths(c, where[:1])[0])))
    for i, (a, sa, la) in enumerate(parts):
        for b, sb, lb in parts[i + 1:]:
            if la == lb and not sa & sb and len(sa) + len(sb) == len(compute):
                cands.insert(0, b[a])
    if len(gens) <= 16:
        cands.append(_product(gens, n))
        for i, a in enumerate(gens):
            for b in gens[i + 1:]:
                cands.append(_product([a, b], n))
                inv = np.empty(n, dtype=np.int64)
                inv[b] = np.arange(n)
                cands.append(b[a[inv]])
    return cands


def centralizer_automorphisms(
    n: int, is_compute: Sequence[bool], arcs: Sequence[tuple[int, int, Fraction]], commuting: Sequence[Perm]
) -> list[Perm]:
    """Generators of the automorphisms that commute with every permutation in ``commuting``: bliss on the fabric
    decorated with an arc i -> h(i) for each h, coloured by h (an automorphism of that graph maps h-arcs to
    h-arcs, i.e. satisfies g(h(i)) = h(g(i)))."""
    return [tuple(row) for row in _centralizer_rows(n, is_compute, arcs, commuting).tolist()]


def _centralizer_rows(n: int, is_compute: Sequence[bool], arcs: Sequence[tuple[int, int, Fraction]],
                      commuting: Sequence[Perm]) -> np.ndarray:
    """:func:`centralizer_automorphisms` as one int64 array (a row per generator)."""
    extra = [(u, v, Fraction(-1 - j)) for j, h in enumerate(commuting) for u, v in enumerate(h) if u != v]
    found = automorphism_rows(n, is_compute, list(arcs) + extra)
    hs = [np.asarray(h, dtype=np.int64) for h in commuting]
    keep = [r for r, g in enumerate(found) if all(np.array_equal(g[h], h[g]) for h in hs)]
    return found[keep]


def _random_elements(gens: list[np.ndarray], n: int, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` pseudo-random group elements by product replacement (Celler, Leedham-Green, Murray, Niemeyer,
    O'Brien 1995), seeded: deterministic for a given generating set."""
    rng = np.random.default_rng(seed)
    slots = [g.copy() for g in gens]
    while len(slots) < 10:
        slots.append(gens[len(slots) % len(gens)].copy())
    acc = np.arange(n, dtype=np.int64)
    out = []
    for step in range(count + 50):
        i, j = rng.choice(len(slots), size=2, replace=False)
        slots[i] = slots[j][slots[i]] if rng.random() < 0.5 else slots[i][slots[j]]
        acc = slots[i][acc]
        if step >= 50:
            out.append(acc.copy())
    return out


def free_subgroup(n: int, is_compute: Sequence[bool], generators: Sequence[Perm],
                  arcs: Sequence[tuple[int, int, Fraction]] | None = None, max_tries: int = 200) -> list[Perm]:
    """Generators of an abelian subgroup H of the automorphisms that acts freely on the compute nodes, as large
    as the heuristic finds (the splitter and the symmetric packer need a free action; bliss returns the whole
    group, e.g. every transposition of identical GPUs).

    H grows one semiregular element at a time (:func:`_candidates`).  With ``arcs`` (the fabric) each next
    element is sought among the automorphisms that commute with H (:func:`centralizer_automorphisms`), which
    keeps the inner matchings of boxes aligned; without, among ``generators``.  An element is kept when the
    group it spans with H still acts freely and is larger; H is checked element by element, so whatever is
    returned is correct even when the heuristic misses a larger H.
    """
    compute = np.flatnonzero(np.asarray(is_compute, dtype=bool))
    if len(generators) == 0 or len(compute) < 2:
        return []
    gens0 = [np.asarray(g, dtype=np.int64) for g in generators]

    def pool_of(gens: list[np.ndarray]) -> list[np.ndarray]:
        # structured candidates and random elements that are semiregular on the compute nodes (every element of
        # a free group moves every compute node), longest cycles first; structured ones first on ties
        pool = [c for c in _candidates(gens, n, compute) + _random_elements(gens, n, RANDOM_ELEMENTS)
                if _semiregular_on(c, compute)]
        pool.sort(key=lambda r: -int(_cycle_lengths(r, compute[:1])[0]))
        return pool

    def grow(first: np.ndarray, budget: int) -> list[np.ndarray]:
        chosen = [first]
        elems = _free_order(chosen, n, compute)
        assert elems is not None
        tries = 0
        while elems < len(compute) and tries < budget:
            if arcs is not None:
                gens = list(_centralizer_rows(n, is_compute, arcs, [tuple(h.tolist()) for h in chosen]))
            else:
                gens = [g for g in gens0 if all(np.array_equal(g[h], h[g]) for h in chosen)]
            if not gens:
                break
            pick = None  # the largest of the first few groups that stay free
            seen = 0
            for c in pool_of(gens):
                if tries >= budget or seen >= STEP_CHOICES:
                    break
                if any(not np.array_equal(c[h], h[c]) for h in chosen):
                    continue
                tries += 1
                bigger = _free_order(chosen + [c], n, compute)
                if bigger is not None and bigger > elems:
                    seen += 1
                    if pick is None or bigger > pick[1]:
                        pick = (c, bigger)
                    if bigger >= len(compute):
                        break
            if pick is None:
                break
            chosen.append(pick[0])
            elems = pick[1]
        return chosen

    def order(chosen: list[np.ndarray]) -> int:
        found = _free_order(chosen, n, compute)
        return 0 if found is None else found

    # a few first elements (the longest-cycled that act freely), each grown greedily; the largest group wins
    firsts = [c for c in pool_of(gens0)[:max_tries] if _free_order([c], n, compute) is not None]
    best: list[np.ndarray] = []
    best_order = 1
    for first in firsts[:FIRST_ELEMENTS if n < 5000 else 1]:
        chosen = grow(first, max_tries)
        found = order(chosen)
        if found > best_order:
            best, best_order = chosen, found
        if best_order >= len(compute):
            break
    return [tuple(int(x) for x in g) for g in best]
