"""Schedule file version 2: template trees plus the automorphisms that map them (linear size on symmetric fabrics).

A symmetric fabric's optimal schedule is a few *template* trees and their images
under a group H of automorphisms (box shifts, rotations inside boxes): on 4,096
GPUs, 4,096 trees of 4,095 edges each in version 1 (over a gigabyte of JSON),
one template and two generators in version 2.  The header (format, collective,
the ``topology`` record with its fingerprint, k, rates, ranks, root, phases) is
version 1's, with ``"version": 2``; ``trees`` is replaced by::

    "nodes": ["n0.gpu0", "n0.nvswitch", ...],   # the names the permutations act on (index = position)
    "generators": [[3, 0, 1, 2, ...], ...],     # permutations of those indices: g maps nodes[i] to nodes[g[i]]
    "templates": [{"root": ..., "chunks": ..., "phase": ..., "direction": ...,
                   "edges": [...as in version 1...],
                   "images": "all" | [0, 5, ...]}]   # which group elements map it (indices below)

**Expansion rule.**  The group elements are enumerated breadth first from the
identity: ``E = [identity]``; for each element g of E in order, for each
generator s in order, ``h = s o g`` (``h[i] = s[g[i]]``) is appended to E unless
it is already there.  A template with ``"images": "all"`` stands for the trees
``e(T)`` for every e in E in that order; with a list, for those elements only
(``[0]``: the template itself).  ``e(T)`` renames every node of T (root, every
edge's src, dst and path) by e.  The expanded trees, templates in order and
each template's images in order, are the schedule's trees; version 1 lists
the same trees (as a multiset).  A node a permutation must rename but that is
not in ``nodes`` is an error, as is a generator that is not a permutation.

When version 2 is written: ``generate --schedule-format v2`` always, ``v1``
never, and ``auto`` (the default) when the schedule has at least
:data:`V2_MIN_RANKS` ranks, carries the automorphisms generate used, and the
templates hold at most a quarter of the trees.  Readers (``verify``, ``export``,
``simulate``, the torch executor) expand version 2 into the version-1 model in
memory (:func:`expand`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from forestcoll.errors import ScheduleError
from forestcoll.graph.symmetry import group_table

__all__ = ["V2_MIN_RANKS", "VERSION_2", "compress", "elements", "expand", "templates_from_dict"]

VERSION_2 = 2
V2_MIN_RANKS = 256
MAX_ELEMENTS = 1 << 16  # group elements a file may ask to enumerate


def elements(generators: Sequence[Sequence[int]], n: int, limit: int = MAX_ELEMENTS) -> np.ndarray:
    """The group elements in the expansion rule's order (rows of an int32 table; the identity first): breadth
    first from the identity, s o g appended when new, for each element g in order and each generator s in order
    (:func:`forestcoll.graph.symmetry.group_table`); ScheduleError past ``limit`` elements."""
    table = group_table(generators, n, limit)
    if table is None:
        raise ScheduleError(f"the generators span more than {limit} elements")
    return table


def _image(tree, perm: np.ndarray, index: Mapping[str, int], names: Sequence[str]):
    from forestcoll.schedule import Edge, ScheduleTree

    def m(x: str) -> str:
        return names[perm[index[x]]]

    return ScheduleTree(m(tree.root), tree.chunks, tree.phase,
                        tuple(Edge(m(e.src), m(e.dst), tuple(m(p) for p in e.path)) for e in tree.edges))


class _Hasher:
    """128-bit hashes of trees that can be computed for all group images at once: a tree's hash is the sum (mod
    2^64, twice) of its edges' hashes, an edge's the sum of random values R[position, node] over (src, dst,
    path...); the image under e replaces each node by e[node], one numpy gather for every element."""

    def __init__(self, names: Sequence[str], width: int, seed: int = 0x5EED) -> None:
        rng = np.random.default_rng(seed)
        self.index = {x: i for i, x in enumerate(names)}
        n = len(names)
        self.width = width
        # column n is the padding of short paths; it hashes to 0 and every permutation fixes it
        self.table = rng.integers(0, 2**63, size=(2, width, n + 1), dtype=np.uint64)
        self.table[:, :, n] = 0
        self.pad = n
        self.edge_cache: dict[int, tuple] = {}

    def rows(self, edges) -> np.ndarray:
        """(edges, width) node indices: src, dst, then the path, padded."""
        out = np.full((len(edges), self.width), self.pad, dtype=np.int64)
        for r, e in enumerate(edges):
            nodes = [e.src, e.dst, *e.path]
            out[r, :len(nodes)] = [self.index[x] for x in nodes]
        return out

    def _sum(self, nodes: np.ndarray) -> np.ndarray:
        pos = np.arange(self.width)
        with np.errstate(over="ignore"):
            return np.stack([self.table[h][pos, nodes].sum(axis=-1, dtype=np.uint64) for h in (0, 1)], axis=-1)

    def tree(self, tree) -> tuple:
        a = b = 0
        cache = self.edge_cache
        for e in tree.edges:  # trees share Edge objects (generate interns them), so this is mostly lookups
            h = cache.get(id(e))
            if h is None:
                x, y = self._sum(self.rows([e]))[0].tolist()
                h = cache[id(e)] = (x, y, e)  # keep e alive: its id stays unique
            a += h[0]
            b += h[1]
        return (tree.phase, tree.root, tree.chunks, a % 2**64, b % 2**64)

    def trees(self, trees: Sequence, distinct: Mapping[int, Any]) -> list[tuple]:
        """:meth:`tree` of every tree at once: each distinct edge (``distinct``: id -> edge, every edge of the
        trees) hashed in one numpy batch, then each tree's sums (mod 2^64) by one reduceat over its edges'
        positions, a block of trees at a time."""
        from itertools import chain

        ids = list(distinct)
        pos = {i: j for j, i in enumerate(ids)}
        hashes = np.empty((len(ids), 2), dtype=np.uint64)
        step = 1 << 16
        for lo in range(0, len(ids), step):
            hashes[lo:lo + step] = self._sum(self.rows([distinct[i] for i in ids[lo:lo + step]]))
        get = pos.__getitem__
        out = []
        block = 256
        for lo in range(0, len(trees), block):
            part = trees[lo:lo + block]
            sizes = np.fromiter(map(len, (t.edges for t in part)), dtype=np.int64, count=len(part))
            at = np.fromiter(map(get, map(id, chain.from_iterable(t.edges for t in part))), dtype=np.int64,
                             count=int(sizes.sum()))
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            sums = np.zeros((len(part), 2), dtype=np.uint64)
            full = sizes > 0
            if full.any():
                with np.errstate(over="ignore"):
                    sums[full] = np.add.reduceat(hashes[at], starts[full], axis=0, dtype=np.uint64)
            for t, (a, b) in zip(part, sums.tolist()):
                out.append((t.phase, t.root, t.chunks, a, b))
        return out

    def images(self, tree, elems: np.ndarray, names: Sequence[str]) -> list[tuple]:
        rows = self.rows(tree.edges)  # (m, width)
        sums = np.empty((len(elems), 2), dtype=np.uint64)
        step = max(1, (1 << 21) // max(1, rows.size))  # a block of elements at a time: |E| x m x width is N^2
        for lo in range(0, len(elems), step):
            block = elems[lo:lo + step]
            ext = np.concatenate([block, np.full((len(block), 1), self.pad, dtype=block.dtype)], axis=1)
            mapped = ext[:, rows]  # (block, m, width)
            with np.errstate(over="ignore"):
                sums[lo:lo + step] = self._sum(mapped).sum(axis=1, dtype=np.uint64)
        roots = elems[:, self.index[tree.root]]
        return [(tree.phase, names[r], tree.chunks, int(a), int(b)) for r, (a, b) in zip(roots.tolist(), sums.tolist())]


def _distinct_edges(trees: Sequence) -> dict[int, Any]:
    """id -> edge for the distinct edge objects of the trees (generate shares one object per distinct edge, so a
    few thousand for millions of tree edges; the dict keeps them alive, so the ids stay unique)."""
    found: dict[int, Any] = {}
    for t in trees:
        found.update(zip(map(id, t.edges), t.edges))
    return found


def compress(trees: Sequence, names: Sequence[str], generators: Sequence[Sequence[int]]) -> list[tuple[Any, Any]]:
    """(template, images) pairs whose expansion is ``trees`` as a multiset: every tree whose whole orbit under the
    group is in ``trees`` becomes one template with ``"all"``, the rest templates of their own (``[0]``).  Trees
    are compared by 128-bit hashes computed for all images at once (a false match has probability about 2^-100;
    ``verify`` reads the expanded file like any other)."""
    if not generators or not trees:
        return [(t, [0]) for t in trees]
    elems = elements(generators, len(names))
    distinct = _distinct_edges(trees)
    width = 2 + max(len(e.path) for e in distinct.values()) if distinct else 2
    hasher = _Hasher(names, width)
    keys = hasher.trees(trees, distinct)
    left = Counter(keys)
    out: list[tuple[Any, Any]] = []
    for t, key in zip(trees, keys):
        if left[key] == 0:
            continue
        need = Counter(hasher.images(t, elems, names))
        if all(left[k] >= c for k, c in need.items()):
            left.subtract(need)
            out.append((t, "all"))
        else:
            left[key] -= 1
            out.append((t, [0]))
    return out


def expand(templates: Sequence[tuple[Any, Any]], names: Sequence[str], generators: Sequence[Sequence[int]]) -> list:
    """The trees a version-2 file stands for (the expansion rule in the module docstring)."""
    elems = elements(generators, len(names)) if generators else np.arange(len(names), dtype=np.int64)[None, :]
    index = {x: i for i, x in enumerate(names)}
    trees = []
    for t, images in templates:
        chosen = range(len(elems)) if images == "all" else images
        for j in chosen:
            if not 0 <= j < len(elems):
                raise ScheduleError(f"template image {j} is not one of the {len(elems)} group elements")
            trees.append(t if j == 0 else _image(t, elems[j], index, names))
    return trees


def templates_from_dict(data: Mapping[str, Any], source: str, parse_tree, expand_trees: bool = True) -> list:
    """The expanded trees of a version-2 object; ``parse_tree(obj, where)`` reads one tree as version 1 does.
    With ``expand_trees`` False: the (template, images) pairs, checked the same way, not expanded."""
    names = data.get("nodes")
    if not isinstance(names, list) or not all(isinstance(x, str) for x in names) or len(set(names)) != len(names):
        raise ScheduleError(f"{source}: 'nodes' must be a list of distinct node names")
    gens = data.get("generators", [])
    if not isinstance(gens, list):
        raise ScheduleError(f"{source}: 'generators' must be a list of permutations")
    n = len(names)
    for i, g in enumerate(gens):
        if (not isinstance(g, list) or len(g) != n or not all(isinstance(x, int) and not isinstance(x, bool) for x in g)
                or sorted(g) != list(range(n))):
            raise ScheduleError(f"{source}: generators[{i}] is not a permutation of the {n} nodes")
    raw = data.get("templates")
    if not isinstance(raw, list):
        raise ScheduleError(f"{source}: 'templates' must be a list")
    index = set(names)
    templates = []
    for i, t in enumerate(raw):
        where = f"{source}: templates[{i}]"
        tree = parse_tree(t, where)
        images = t.get("images", [0])
        if images != "all" and (not isinstance(images, list)
                                or not all(isinstance(x, int) and not isinstance(x, bool) for x in images)):
            raise ScheduleError(f"{where}: 'images' must be \"all\" or a list of element indices")
        if gens and (images == "all" or any(j != 0 for j in images)):
            used = {tree.root} | {x for e in tree.edges for x in (e.src, e.dst, *e.path)}
            missing = sorted(used - index)
            if missing:
                raise ScheduleError(f"{where}: node {missing[0]!r} is not in 'nodes'")
        templates.append((tree, images))
    if not expand_trees:
        count = len(elements(gens, n)) if gens else 1
        for i, (_, images) in enumerate(templates):
            if images != "all" and any(not 0 <= j < count for j in images):
                raise ScheduleError(f"{source}: templates[{i}]: an image is not one of the {count} group elements")
        return templates
    return expand(templates, names, gens)
