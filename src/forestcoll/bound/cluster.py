"""The exact bound of N identical boxes on a rail or switch fabric, computed without building the fabric.

``forestcoll bound dgx-a100:nodes=100000`` names 800,000 GPUs and 1.7 million
nodes; building that graph in Python alone takes about a minute.  This module
computes the same :class:`~forestcoll.bound.optimal.Bound` -- the same rates,
the same certificate cut, node for node -- from the 2-box instance of the spec.

Why this is exact.  Let G be the network of one phase with its super-source
``s`` (an arc ``s -> c`` of capacity ``x*w(c)`` to every rank; see
:mod:`.oracle`) and ``t`` a target rank in box 0.  On a ``switch`` or
``rail`` fabric every permutation of the boxes is an automorphism (port p of
any box joins the same switch), so the group H of box permutations that fix
box 0 acts on G, fixes ``s`` and ``t`` and keeps the capacities.  Its orbits
are: each node of box 0 alone, each node *position* of the other boxes
(``N - 1`` nodes), each fabric switch alone -- a constant number of classes.
The source side of the *minimal* minimum s-t cut (the nodes the residual
graph of any maximum flow reaches from ``s``) is unique, so every element of
H maps it to itself: it is a union of classes.  In the quotient network
(one node per class, an arc per class pair with the summed capacity of the
arcs between the two classes), a set of classes has the capacity of the node
set it stands for.  Hence the quotient's minimum cut value is G's, its
minimal minimum cut is G's minimal minimum cut, and its maximum flow value
is G's maximum flow value.  The quotient is the 2-box instance with box 1
standing for the ``N - 1`` other boxes: every arc that touches box 1 carries
``N - 1`` times its bandwidth, and each rank of box 1 weighs ``N - 1``.

The rest replays :func:`~forestcoll.bound.dinkelbach.optimal_rate` step for
step: the same first single-node cut, the same targets (the first rank of
each orbit of the declared symmetries, or of bliss's whole group when those
leave several orbits and the *cluster* has more than 8 ranks; box 0 holds
one of each, and box 0's orbits are taken from the 2-box instance -- tests
check they do not change with N), the same minimal minimum cut per failing target (OR-Tools returns
the residual-reachable side, computed here exactly with Fractions on the
quotient), and the same choice among failing targets (smallest ratio, then
the node-index tuple).  So the result equals the materialised bound, cut
included.  Cuts of clusters larger than the topology limit keep their node
names lazy (:class:`NodeNames`).

Leaf-spine and mesh fabrics are not covered: the boxes of a leaf or the
neighbours in a mesh are not interchangeable with the others, so box
permutations are not automorphisms there.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import overload

from forestcoll import collectives
from forestcoll.bound.optimal import Bound, PhaseBound
from forestcoll.errors import UsageError
from forestcoll.graph.orbits import orbits
from forestcoll.limits import MAX_BOXES, MAX_NODES, MAX_RANKS
from forestcoll.progress import Progress, report
from forestcoll.topology.model import Topology

__all__ = [
    "CLUSTER_FABRICS", "ClusterModel", "NodeNames", "cluster_bound", "cluster_bound_report", "cluster_for_bound",
    "cluster_model", "too_large",
]

CLUSTER_FABRICS = ("switch", "rail")  # fabrics on which every permutation of the boxes is an automorphism


@dataclass(frozen=True)
class ClusterModel:
    """``boxes`` identical boxes on a rail or switch fabric, described by the same spec with 2 boxes.

    ``sample`` numbers box 0's nodes ``0..K-1``, box 1's ``K..2K-1`` and the
    fabric switches from ``2K``; the cluster numbers box b's nodes ``bK..bK+K-1``
    and switch j ``NK + j`` (as :func:`~forestcoll.topology.cluster.build_cluster` does).
    """

    name: str
    boxes: int
    sample: Topology

    @property
    def per_box(self) -> int:
        return sum(1 for n in self.sample.nodes if n.box == "n0")

    @property
    def fabric_switches(self) -> int:
        return len(self.sample.nodes) - 2 * self.per_box

    @property
    def compute_per_box(self) -> int:
        return sum(self.sample.is_compute[: self.per_box])

    @property
    def num_compute(self) -> int:
        return self.boxes * self.compute_per_box

    @property
    def num_nodes(self) -> int:
        return self.boxes * self.per_box + self.fabric_switches

    @property
    def switch_nodes(self) -> NodeNames:
        """The names of the switch nodes (lazy)."""
        return NodeNames(self, tuple(not c for c in self.sample.is_compute))

    def node_names(self) -> NodeNames:
        """The names of every node in index order (lazy)."""
        return NodeNames(self, (True,) * len(self.sample.nodes))

    def multiplicity(self, i: int) -> int:
        """How many cluster nodes class ``i`` of the quotient stands for."""
        k = self.per_box
        return self.boxes - 1 if k <= i < 2 * k else 1


class NodeNames(Sequence[str]):
    """The names of a union of classes of a :class:`ClusterModel`, in node-index order, built on demand."""

    def __init__(self, model: ClusterModel, mask: Sequence[bool]) -> None:
        self.model = model
        self.mask = tuple(mask)
        k = model.per_box
        names = [n.name for n in model.sample.nodes]
        self._box0 = [names[p] for p in range(k) if self.mask[p]]
        self._other = [names[k + p].split(".", 1)[1] for p in range(k) if self.mask[k + p]]
        self._switches = [names[j] for j in range(2 * k, len(names)) if self.mask[j]]
        self._listed: tuple[str, ...] | None = None  # once listed in full (--json lists a cut up to 3 times)

    def __len__(self) -> int:
        return len(self._box0) + (self.model.boxes - 1) * len(self._other) + len(self._switches)

    def __iter__(self) -> Iterator[str]:
        if self._listed is None:
            self._listed = tuple(self._names())
        return iter(self._listed)

    def _names(self) -> Iterator[str]:
        yield from self._box0
        other = self._other
        if other:
            for b in range(1, self.model.boxes):
                prefix = f"n{b}."
                for name in other:
                    yield prefix + name
        yield from self._switches

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            return list(itertools.islice(self._names(), start, stop, step))
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        if i < len(self._box0):
            return self._box0[i]
        i -= len(self._box0)
        middle = (self.model.boxes - 1) * len(self._other)
        if i < middle:
            b, p = divmod(i, len(self._other))
            return f"n{b + 1}.{self._other[p]}"
        return self._switches[i - middle]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NodeNames):
            return self.model == other.model and self.mask == other.mask
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self._names(), other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.model.name, self.mask))

    def outside(self, limit: int) -> list[str]:
        """The first ``limit`` names (in index order) of the nodes *not* in this set."""
        rest = NodeNames(self.model, tuple(not m for m in self.mask))
        return list(itertools.islice(rest._names(), limit))


# ----- the spec -> a model ----------------------------------------------------------------------


def cluster_model(spec: object, extra: Mapping[str, str] | None = None) -> ClusterModel | None:
    """The :class:`ClusterModel` of a built-in box-family spec with at least 2 boxes on a rail or switch fabric;
    None for anything else (files, generic built-ins, hetero, one box, leaf-spine or mesh fabrics).

    Nothing larger than 2 boxes is built.  Bad options raise the same one-line errors as the built-in
    does; a box count above :data:`~forestcoll.limits.MAX_BOXES` is refused.
    """
    from forestcoll.topology.builtins import build_builtin

    found = _box_family_spec(spec, extra)
    if found is None:
        return None
    label, name, options, boxes = found
    if boxes < 2 or fabric_kind(name, options) not in CLUSTER_FABRICS:
        return None
    sample = build_builtin(name, {**options, "nodes": "2"})
    return ClusterModel(label, boxes, sample)


def fabric_kind(name: str, options: Mapping[str, str]) -> str:
    """The fabric a box-family spec joins its boxes with (``fat-tree`` read as ``leaf-spine``)."""
    from forestcoll.topology.builtins import BOX_FAMILIES

    kind = options.get("fabric") or BOX_FAMILIES[name].fabric.kind
    return "leaf-spine" if kind == "fat-tree" else kind


def _box_family_spec(spec: object, extra: Mapping[str, str] | None) -> tuple[str, str, dict, int] | None:
    """(label, family, options, box count) of a box-family spec, or None for files and other built-ins; the
    box count is checked as the built-in checks ``nodes``, up to :data:`~forestcoll.limits.MAX_BOXES`."""
    from forestcoll.topology.builtins import BOX_FAMILIES, count_option
    from forestcoll.topology.spec import parse_spec, resolve_spec, split_file_spec

    if not isinstance(spec, str) or split_file_spec(spec) is not None:
        return None
    label, _ = resolve_spec(spec, extra)
    name, options = parse_spec(label)
    if name not in BOX_FAMILIES:
        return None
    return label, name, options, count_option(1, MAX_BOXES)(options.get("nodes", "1"), f"{name}:nodes")


def too_large(spec: object, extra: Mapping[str, str] | None = None) -> str | None:
    """For a box-family spec whose cluster exceeds the topology limits but has no cluster path: the one-line
    reason bound refuses it (None otherwise)."""
    found = _box_family_spec(spec, extra)
    if found is None:
        return None
    label, name, options, boxes = found
    kind = fabric_kind(name, options)
    if boxes <= MAX_RANKS or kind in CLUSTER_FABRICS:
        return None
    return (f"{label}: {boxes:,} boxes is above forestcoll's limit of {MAX_RANKS:,} for a fabric it builds; bound "
            f"answers larger clusters without building them only on {' or '.join(CLUSTER_FABRICS)} fabrics, where "
            f"the boxes are interchangeable ({kind} is not; see docs/limits.md)")


def cluster_for_bound(spec: object, extra: Mapping[str, str] | None, collective: str, k: int | None = None,
                      symmetry: bool = True) -> ClusterModel | None:
    """The model ``forestcoll bound`` answers from without building the fabric: :func:`cluster_model`'s, for an
    all-rank collective without ``k`` and with symmetry (the report is then the materialised one, cut included);
    None otherwise.  A cluster over the topology limits that this path cannot answer raises a one-line
    UsageError here, before anything is built."""
    reason = too_large(spec, extra)
    if reason:
        raise UsageError(reason)
    model = cluster_model(spec, extra)
    if model is None:
        return None
    if k is None and symmetry and not collectives.get(collective).rooted:
        return model
    if model.num_compute > MAX_RANKS or model.num_nodes > MAX_NODES:
        raise UsageError(f"{model.name}: {model.num_compute:,} ranks is above forestcoll's limit of {MAX_RANKS:,}; "
                         "bound answers larger rail or switch clusters without building them, but only for allgather, "
                         "reduce_scatter and allreduce, without --k or --no-symmetry (see docs/limits.md)")
    return None


# ----- the quotient network ------------------------------------------------------------------------


class _Quotient:
    """The quotient network of one phase: the sample's classes with summed capacities, plus the super-source."""

    def __init__(self, model: ClusterModel, fabric: Topology) -> None:
        self.model = model
        self.fabric = fabric
        n = len(fabric.nodes)
        self.n = n
        self.source = n
        k = model.per_box
        self.mult = [model.multiplicity(i) for i in range(n)]
        self.weights = [self.mult[i] if fabric.is_compute[i] else 0 for i in range(n)]
        self.total = sum(self.weights)
        arcs = []
        for u, v, bw in fabric.arcs:
            if (u < k and k <= v < 2 * k) or (v < k and k <= u < 2 * k):
                raise AssertionError("a rail or switch fabric has no direct link between two boxes")
            arcs.append((u, v, bw * max(self.mult[u], self.mult[v])))
        self.arcs = arcs

    def cut(self, mask: Sequence[bool]) -> _ClassCut:
        bw = sum((c for u, v, c in self.arcs if mask[u] and not mask[v]), Fraction(0))
        weight = sum(w for w, m in zip(self.weights, mask) if m)
        return _ClassCut(tuple(bool(m) for m in mask), bw, weight)

    def minimal_min_cut(self, x: Fraction, target: int) -> tuple[Fraction, tuple[bool, ...]]:
        """Max-flow value from the super-source (arcs ``x*w``) to ``target`` and the source side of the minimal
        minimum cut (nodes the residual graph reaches), exactly (Edmonds-Karp on Fractions)."""
        n, s = self.n, self.source
        res: list[dict[int, Fraction]] = [dict() for _ in range(n + 1)]

        def add(u: int, v: int, c: Fraction) -> None:
            res[u][v] = res[u].get(v, Fraction(0)) + c
            res[v].setdefault(u, Fraction(0))

        for u, v, c in self.arcs:
            add(u, v, c)
        for i, w in enumerate(self.weights):
            if w:
                add(s, i, x * w)
        flow = Fraction(0)
        while True:
            parent = {s: s}
            queue = deque([s])
            while queue and target not in parent:
                u = queue.popleft()
                for v, c in res[u].items():
                    if c > 0 and v not in parent:
                        parent[v] = u
                        queue.append(v)
            if target not in parent:
                break
            path = []
            v = target
            while v != s:
                path.append((parent[v], v))
                v = parent[v]
            push = min(res[u][v] for u, v in path)
            for u, v in path:
                res[u][v] -= push
                res[v][u] += push
            flow += push
        return flow, tuple(i in parent for i in range(n))


@dataclass(frozen=True)
class _ClassCut:
    """A union of classes: its mask over the quotient's nodes, B+(S) and w(S) in the cluster."""

    mask: tuple[bool, ...]
    bandwidth: Fraction
    weight: int

    @property
    def ratio(self) -> Fraction:
        return self.bandwidth / self.weight


def _index_order(model: ClusterModel, a: _ClassCut, b: _ClassCut) -> int:
    """-1, 0, 1 as the sorted node-index tuples of ``a`` and ``b`` in the cluster compare (as Python tuples).

    For sorted sequences of two sets X != Y: let m be the smallest element of their symmetric difference; the
    set holding m is smaller unless the other set has no element above m (then the other is a prefix)."""
    if a.mask == b.mask:
        return 0
    k, n_boxes = model.per_box, model.boxes

    def index(i: int) -> int:  # the smallest cluster index of class i, or its only one
        return i if i < k else (k + (i - k)) if i < 2 * k else n_boxes * k + (i - 2 * k)

    def largest(mask: tuple[bool, ...]) -> int:
        best = -1
        for i, m in enumerate(mask):
            if m:
                top = (n_boxes - 1) * k + (i - k) if k <= i < 2 * k else index(i)
                best = max(best, top)
        return best

    diff = [i for i in range(len(a.mask)) if a.mask[i] != b.mask[i]]
    m = min(index(i) for i in diff)
    first = next(i for i in diff if index(i) == m)
    if a.mask[first]:
        return -1 if largest(b.mask) > m else 1
    return 1 if largest(a.mask) > m else -1


@dataclass(frozen=True)
class _PhaseResult:
    rate: Fraction
    cut: _ClassCut
    fabric: Topology


def _targets(model: ClusterModel, fabric: Topology) -> tuple[int, ...]:
    """The oracle's targets on the cluster (:func:`~forestcoll.bound.oracle._orbit_targets`): the first rank of each
    orbit of the declared symmetries, or of bliss's whole group when those leave several orbits and the *cluster*
    has more than DETECT_MIN_RANKS ranks -- found on the 2-box instance, whose box-0 orbits are the cluster's."""
    n = len(fabric.nodes)
    compute = [i for i in range(n) if fabric.is_compute[i]]
    gens = list(fabric.symmetries)
    orbit = orbits(n, gens)
    if len({orbit[c] for c in compute}) > 1:  # only then; colour refinement may settle it without bliss or numpy (mi250)
        from forestcoll.bound.automorphisms import DETECT_MIN_RANKS, automorphism_orbits
        from forestcoll.graph.orbits import orbit_cycles

        if model.num_compute > DETECT_MIN_RANKS:
            orbit = orbits(n, gens + [orbit_cycles(automorphism_orbits(fabric))])
    seen: set[int] = set()
    targets = []
    for c in compute:
        if orbit[c] not in seen:
            seen.add(orbit[c])
            targets.append(c)
    return tuple(targets)


def _phase_rate(model: ClusterModel, reverse: bool) -> _PhaseResult:
    """x* of one phase on the cluster and its certificate cut, replaying Dinkelbach's iteration on the quotient."""
    fabric = model.sample.reversed() if reverse else model.sample
    quo = _Quotient(model, fabric)
    k = model.per_box
    targets = _targets(model, fabric)
    if any(t >= k for t in targets):
        raise AssertionError("every automorphism orbit of ranks meets box 0")
    # the best single-node cut, first in node order: {c} (its out-bandwidth) or everything but c (its in-bandwidth)
    into, out = fabric.node_bandwidth
    best: tuple[Fraction, int, bool] | None = None
    for c in range(k):
        if fabric.is_compute[c]:
            for ratio, alone in ((out[c], True), (into[c] / (quo.total - 1), False)):
                if best is None or ratio < best[0]:
                    best = (ratio, c, alone)
    assert best is not None
    _, c0, alone = best
    cut = quo.cut([(i == c0) == alone for i in range(quo.n)])
    order = functools.cmp_to_key(lambda a, b: _index_order(model, a, b))
    while True:
        x = cut.ratio
        need = x * quo.total
        violated = []
        for t in targets:
            value, mask = quo.minimal_min_cut(x, t)
            if value < need:
                violated.append(quo.cut(mask))
        if not violated:
            return _PhaseResult(x, cut, fabric)
        found = min(violated, key=lambda c: (c.ratio, order(c)))
        assert found.ratio < x, "Dinkelbach step must decrease the rate"
        cut = found


def _names(model: ClusterModel, mask: Sequence[bool]) -> Sequence[str]:
    names = NodeNames(model, mask)
    return tuple(names) if model.num_nodes <= MAX_NODES else names


def _unbalanced(model: ClusterModel, fabric: Topology) -> tuple[str, ...]:
    """Switches of the cluster that can send more than they receive (as unbalanced_switches names them)."""
    quo = _Quotient(model, fabric)
    into = [Fraction(0)] * quo.n
    out = [Fraction(0)] * quo.n
    for u, v, c in quo.arcs:
        out[u] += c
        into[v] += c
    mask = [not fabric.is_compute[i] and out[i] > into[i] for i in range(quo.n)]
    return tuple(NodeNames(model, mask)) if any(mask) else ()


def cluster_bound(model: ClusterModel, collective: str = "allgather",
                  _cache: dict | None = None) -> Bound:
    """:func:`~forestcoll.bound.optimal.optimal_bound` of the cluster ``model`` stands for (every rank a root).

    Rooted collectives (broadcast, reduce) are refused: their targets depend on the generators bliss returns
    for the whole fabric, which this path never builds."""
    coll = collectives.tree_collective(collective)
    if coll.rooted:
        raise UsageError(f"{coll.name} on a cluster this large: the cluster bound covers allgather, reduce_scatter "
                         "and allreduce only")
    cache = {} if _cache is None else _cache
    symmetric = model.sample.is_symmetric()

    def phase(reverse: bool) -> tuple[_PhaseResult, tuple[str, ...], Sequence[str]]:
        if reverse not in cache:
            res = _phase_rate(model, reverse)
            cache[reverse] = (res, _unbalanced(model, res.fabric), _names(model, res.cut.mask))
        return cache[reverse]

    found: dict[str, PhaseBound] = {}
    for ph in coll.phases:
        twin = coll.mirror_of(ph) if symmetric else None
        res, unbalanced, names = phase(twin.reversed if twin is not None else ph.reversed)
        found[ph.name] = PhaseBound(ph.name, res.rate, names, res.cut.bandwidth,  # type: ignore[arg-type]
                                    res.cut.weight, ph.reversed, unbalanced)
    phases = tuple(found[ph.name] for ph in coll.phases)
    n = model.num_compute
    algbw = n / sum(1 / p.rate for p in phases)
    return Bound(coll.name, n, algbw, algbw * coll.bus_factor(n), phases, None)


def cluster_bound_report(model: ClusterModel, collective: str = "allgather", progress: Progress | None = None):
    """:func:`~forestcoll.bound.report.bound_report` of the cluster (no ``k``, no root): the same report."""
    from forestcoll.bound.report import BoundReport

    coll = collectives.get(collective)
    others = [c for c in collectives.COLLECTIVES.values() if not c.rooted and c.tree_based]
    cache: dict = {}
    companions: dict[str, Bound] = {}
    main: Bound | None = None
    for done, other in enumerate(others):
        report(progress, f"bound: {other.name}", done, len(others) + (coll not in others))
        companions[other.name] = cluster_bound(model, other.name, cache)
        if other is coll:
            main = companions[other.name]
    if main is None:
        main = cluster_bound(model, coll.name, cache)
    return BoundReport(model.name, model.num_compute, len(model.switch_nodes), main, companions)
