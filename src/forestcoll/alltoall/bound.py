"""The exact optimal all-to-all throughput of a fabric, with its certificate and bottleneck.

Convention (nccl-tests): in a call of ``size`` bytes every rank sends size/N
bytes to every rank; algbw = size / time.  If every ordered pair of distinct
ranks can be served at rate lambda at once (a concurrent multi-commodity
flow; switches forward, ranks may relay), the call takes (size/N)/lambda, so

    algbw* = N * lambda*,   lambda* = max concurrent flow with unit demand on every ordered pair.

lambda* comes from the symmetry-reduced, source-aggregated LP
(:mod:`forestcoll.alltoall.lp`).  It is *certified* when two exact numbers
meet: a lower bound, the rate of an explicit set of paths (the schedule,
rebuilt for every rank and its loads summed exactly), and an upper bound, a
length-function certificate from the LP's dual (:mod:`forestcoll.alltoall.certificate`).
Otherwise both numbers are reported as a certified interval.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from forestcoll.alltoall import certificate, lp, paths
from forestcoll.alltoall.reduction import ArcIndex, Reduction, SourceClass, reduce_topology
from forestcoll.errors import UsageError
from forestcoll.rational import format_rational
from forestcoll.topology.model import Topology

SWEEP_SOURCES = 16  # source classes whose certificate distances are swept for a cut (each sweep is O(arcs))
FLOAT_DENOMINATOR = 1 << 16  # float fallback: each pair's path shares rounded to multiples of 1/65536


@dataclass(frozen=True)
class LinkGroup:
    """Saturated links of one orbit: how many, one example, class and bandwidth each."""

    count: int
    example: tuple[str, str]
    cls: str
    bandwidth: Fraction

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "example": list(self.example), "class": self.cls,
                "bandwidth_gbps": format_rational(self.bandwidth)}

    def describe(self) -> str:
        cls = f" ({self.cls})" if self.cls else ""
        return (f"{self.count} link(s) of {format_rational(self.bandwidth)} GB/s{cls} like "
                f"{self.example[0]} -> {self.example[1]}")


@dataclass(frozen=True)
class Bottleneck:
    """Where the optimum is decided: the best cut found and the saturated links."""

    cut_nodes: tuple[str, ...]
    cut_ranks_inside: int
    cut_ranks_outside: int
    cut_bandwidth: Fraction
    cut_algbw: Fraction  # N * B+(S) / (|S n ranks| |ranks \ S|): an upper bound on algbw
    cut_tight: bool  # the cut alone proves the optimum
    cut_label: str
    saturated: tuple[LinkGroup, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "cut": self.cut_label,
            "cut_nodes": list(self.cut_nodes),
            "cut_bandwidth_gbps": format_rational(self.cut_bandwidth),
            "cut_pairs": [self.cut_ranks_inside, self.cut_ranks_outside],
            "cut_algbw_gbps": format_rational(self.cut_algbw),
            "cut_tight": self.cut_tight,
            "saturated_links": [g.to_dict() for g in self.saturated],
        }

    def describe(self) -> str:
        lines = [f"cut {self.cut_label}: {format_rational(self.cut_bandwidth)} GB/s out for "
                 f"{self.cut_ranks_inside} x {self.cut_ranks_outside} rank pairs -> algbw <= "
                 f"{format_rational(self.cut_algbw)} GB/s" + (" (tight)" if self.cut_tight else " (not tight)")]
        lines += [f"saturated: {g.describe()}" for g in self.saturated]
        return "\n".join(lines)


@dataclass
class Solved:
    """Everything the bound and the schedule share: the reduction, the LP, the representatives' paths."""

    topo: Topology
    red: Reduction
    lp: lp.ReducedLP
    sol: lp.LPSolution
    rep_paths: list[list[tuple[int, Fraction, tuple[int, ...]]]]  # per source class: (dst node, share, arcs)
    loads: list[Fraction]  # per arc: total share of unit pair demands crossing it (all sources)
    lower: Fraction | None  # certified lambda of the paths
    upper: Fraction | None  # certified upper bound on lambda
    lengths: list[Fraction] | None
    rep_dist: list[list[float | int]]
    seconds: dict[str, float] = field(default_factory=dict)


def expand_loads(red: Reduction, index: ArcIndex, rep_paths: list[list[tuple[int, Fraction, tuple[int, ...]]]]) -> list[Fraction]:
    """Exact load of every arc when every rank s = g(r) sends g(r's paths): integers after scaling, summed with numpy."""
    m = len(red.caps)
    per_class = []
    scale = 1
    for plist in rep_paths:
        load: dict[int, Fraction] = {}
        for _, share, arcs in plist:
            for e in arcs:
                load[e] = load.get(e, Fraction(0)) + share
        per_class.append(load)
        for v in load.values():
            scale = math.lcm(scale, v.denominator)
    big = max((abs(v.numerator) * (scale // v.denominator) for ld in per_class for v in ld.values()), default=0)
    total_members = sum(len(sc.members) for sc in red.sources)
    dtype = np.int64 if big * max(total_members, 1) < (1 << 62) else object
    total = np.zeros(m, dtype=dtype)
    for sc, load in zip(red.sources, per_class):
        vec = np.zeros(m, dtype=dtype)
        for e, v in load.items():
            vec[e] = v.numerator * (scale // v.denominator)
        for g in sc.transversal:
            img = index.image(g)
            assert img is not None  # transversal elements are products of verified automorphisms
            total[img] += vec
    return [Fraction(int(t), scale) for t in total]


def quantize(s: Solved, chunks: int) -> tuple[list[list[tuple[int, Fraction, tuple[int, ...]]]], list[Fraction], Fraction | None]:
    """The representatives' paths with every pair's shares rounded to multiples of 1/``chunks`` (largest
    remainder), the loads they give and their lambda (symmetry is kept: the rounding is done once per orbit)."""
    if chunks < 1:
        raise UsageError(f"chunks must be >= 1, got {chunks}")
    rep = [paths.pair_fractions([(t, share, arcs) for t, share, arcs in plist], 1, chunks) for plist in s.rep_paths]
    loads = expand_loads(s.red, ArcIndex(s.red.n, s.red.tails, s.red.heads), rep)
    return rep, loads, paths_rate(s.red.caps, loads)


def paths_rate(caps: tuple[Fraction, ...], loads: list[Fraction]) -> Fraction | None:
    """The largest lambda the loads allow: min over loaded arcs of c_e / load_e."""
    rates = [c / ld for c, ld in zip(caps, loads) if ld > 0]
    return min(rates) if rates else None


def solve_alltoall(topo: Topology, *, symmetry: bool = True, exact: bool = True,
                   float_denominator: int = FLOAT_DENOMINATOR) -> Solved:
    """Reduce, solve, decompose the representatives' flows and certify (see the module docstring).
    Without an exact vertex, every pair's path shares are rounded to multiples of 1/``float_denominator``."""
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    red = reduce_topology(topo, symmetry)
    seconds["symmetry"] = time.perf_counter() - t
    t = time.perf_counter()
    model = lp.build_lp(red)
    seconds["build"] = time.perf_counter() - t
    t = time.perf_counter()
    sol = lp.solve(model, exact=exact)
    seconds["lp"] = time.perf_counter() - t
    seconds.update({f"lp_{k}": v for k, v in sol.seconds.items()})
    if sol.status != "optimal":
        raise UsageError(f"the all-to-all LP did not solve: HiGHS says {sol.status}")
    t = time.perf_counter()
    tails = red.tails.tolist()
    heads = red.heads.tolist()
    n = red.n
    rep_paths = []
    for k, sc in enumerate(red.sources):
        cols = model.col_of_arc[k]
        if sol.x is not None:
            flow: list = [sol.x[c] for c in cols.tolist()]
            lam: Any = sol.lam
            tol = 0.0
        else:
            flow = sol.x_float[cols].tolist()
            lam = sol.lam_float
            tol = 1e-9 * max(lam, 1e-300)
        paths.cancel_cycles(n, tails, heads, flow, tol)
        demand = {v: lam for v in range(n) if red.is_compute[v] and v != sc.rep}
        found = paths.decompose(n, tails, heads, flow, sc.rep, demand, tol)
        denominator = None if sol.x is not None else float_denominator
        rep_paths.append(paths.pair_fractions(found, lam, denominator))
    seconds["paths"] = time.perf_counter() - t
    t = time.perf_counter()
    index = ArcIndex(n, red.tails, red.heads)
    loads = expand_loads(red, index, rep_paths)
    lower = paths_rate(red.caps, loads)
    seconds["loads"] = time.perf_counter() - t
    t = time.perf_counter()
    upper, lengths, dists = _upper_bound(red, sol)
    seconds["certificate"] = time.perf_counter() - t
    return Solved(topo, red, model, sol, rep_paths, loads, lower, upper, lengths, dists, seconds)


def _upper_bound(red: Reduction, sol: lp.LPSolution) -> tuple[Fraction | None, list[Fraction] | None, list]:
    """The length-function bound with lengths from the exact dual (else the rationalised float dual)."""
    candidates = []
    if sol.dual:
        candidates.append({o: Fraction(v) for o, v in sol.dual.items()})
    if sol.dual_float:  # small denominators recover exact duals more often; any lengths >= 0 give a valid bound
        for limit in (10**6, 1 << 40):
            candidates.append({o: Fraction(v).limit_denominator(limit) for o, v in sol.dual_float.items()})
    best: tuple[Fraction | None, list[Fraction] | None, list] = (None, None, [])
    sources = [(sc.rep, len(sc.members)) for sc in red.sources]
    for dual in candidates:
        lengths = [dual.get(int(o), Fraction(0)) for o in red.arc_orbit.tolist()]
        if not any(lengths):
            continue
        bound, dists = certificate.length_bound(red.n, red.tails.tolist(), red.heads.tolist(), red.caps,
                                                red.is_compute.tolist(), lengths, sources)
        if bound is not None and (best[0] is None or bound < best[0]):
            best = (bound, lengths, dists)
        if best[0] is not None and sol.lam is not None and best[0] == sol.lam:
            break
    return best


# ----- the result users see ---------------------------------------------------------------------


@dataclass
class AlltoallBound:
    """The optimal all-to-all algbw (GB/s) of a fabric: exact and certified, or a certified interval."""

    ok: bool
    message: str
    topology: str = ""
    ranks: int = 0
    certified: bool = False
    algbw: Fraction | None = None  # the exact optimum when certified
    algbw_float: float = float("nan")  # HiGHS's value
    lower: Fraction | None = None  # certified: lower <= optimum <= upper
    upper: Fraction | None = None
    bottleneck: Bottleneck | None = None
    symmetry: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # where the time went (not in to_dict: outputs are deterministic)
    switch_nodes: int = 0

    @property
    def rate_per_pair(self) -> Fraction | None:
        """lambda*: GB/s between every ordered pair of ranks at once."""
        return self.algbw / self.ranks if self.algbw is not None else None

    @property
    def busbw(self) -> Fraction | None:
        return self.algbw * Fraction(self.ranks - 1, self.ranks) if self.algbw is not None else None

    @property
    def relative_gap(self) -> float | None:
        if self.lower is None or self.upper is None:
            return None
        return float((self.upper - self.lower) / self.upper)

    def to_dict(self) -> dict[str, Any]:
        fr = format_rational
        return {
            "ok": self.ok,
            "message": self.message,
            "topology": self.topology,
            "collective": "alltoall",
            "compute_nodes": self.ranks,
            "switch_nodes": self.switch_nodes,
            "certified": self.certified,
            # "p/q" when certified, else HiGHS's float as a decimal string (with "certified": false)
            "algbw_gbps": fr(self.algbw) if self.algbw is not None else f"{self.algbw_float:.9g}",
            "busbw_gbps": fr(self.busbw) if self.busbw is not None
            else f"{self.algbw_float * (self.ranks - 1) / max(self.ranks, 1):.9g}",
            "algbw_float_gbps": self.algbw_float,
            "rate_per_pair_gbps": fr(self.rate_per_pair) if self.rate_per_pair is not None else None,
            "certified_interval_gbps": [fr(self.lower) if self.lower is not None else None,
                                        fr(self.upper) if self.upper is not None else None],
            "relative_gap": self.relative_gap,
            "bottleneck": self.bottleneck.to_dict() if self.bottleneck else None,
            "symmetry": self.symmetry,
        }


def _link_classes(topo: Topology) -> dict[tuple[int, int], str]:
    classes: dict[tuple[int, int], set[str]] = {}
    idx = topo.index
    for lk in topo.links:
        classes.setdefault((idx[lk.src], idx[lk.dst]), set()).add(lk.cls)
    return {k: "+".join(sorted(c for c in v if c)) for k, v in classes.items()}


def describe_set(topo: Topology, mask: np.ndarray) -> str:
    """A node set in a user's words: whole boxes by name, then the other nodes (a few by name)."""
    boxes = [nd.box for nd in topo.nodes]
    names = [nd.name for nd in topo.nodes]
    members: dict[str, list[bool]] = {}
    for b, m in zip(boxes, mask.tolist()):
        if b is not None:
            members.setdefault(b, []).append(m)
    whole = [b for b, ms in members.items() if all(ms)]
    rest = [names[i] for i in np.flatnonzero(mask) if boxes[i] is None or boxes[i] not in whole]
    parts = []
    if whole:
        parts.append(("box " if len(whole) == 1 else "boxes ") + ", ".join(whole[:6]) + (", ..." if len(whole) > 6 else ""))
    if rest:
        parts.append(", ".join(rest[:4]) + (f" and {len(rest) - 4} more" if len(rest) > 4 else ""))
    return "{" + " + ".join(parts) + "}"


def bottleneck_of(s: Solved, lam: Fraction) -> Bottleneck | None:
    """The best cut among single ranks, boxes and the level sets of the certificate's distances; the saturated links."""
    topo, red = s.topo, s.red
    n = red.n
    names = [nd.name for nd in topo.nodes]
    comp = red.is_compute
    cands: list[tuple[np.ndarray, str]] = []
    for sc in red.sources:
        r = sc.rep
        single = np.zeros(n, dtype=bool)
        single[r] = True
        cands += [(single, f"{{{names[r]}}}"), (~single, f"everything but {names[r]}")]
    boxes = [nd.box for nd in topo.nodes]
    for box in dict.fromkeys(b for b in boxes if b is not None):
        mask = np.array([b == box for b in boxes])
        cands.append((mask, f"box {box}"))
        break  # one box is enough when boxes are alike; others appear through level sets
    tails, heads = red.tails.tolist(), red.heads.tolist()
    if s.lengths is not None:
        ints, _ = certificate.int_lengths(s.lengths)
        for sc, dist in list(zip(red.sources, s.rep_dist))[:SWEEP_SOURCES]:
            inf = math.inf
            key = [(d if d != inf else inf, v) for v, d in enumerate(dist)]
            orders = [[v for _, v in sorted(key)]]
            far = sorted((d, t) for t, d in enumerate(dist) if comp[t] and d != inf)[-4:]
            for _, t in far:  # sweep from r towards a far rank t: by d(r, v) - d(v, t)
                back = certificate.distances(n, heads, tails, ints, t)
                orders.append(sorted(range(n), key=lambda v, b=back: ((dist[v] - b[v]) if inf not in (dist[v], b[v]) else inf, v)))
            for order in orders:
                found = certificate.sweep_cut(order, tails, heads, red.caps, comp.tolist())
                if found is not None:
                    mask = np.zeros(n, dtype=bool)
                    mask[order[:found[1]]] = True
                    cands.append((mask, f"sweep from {names[sc.rep]} by the certificate's lengths"))
    best = None
    for mask, label in cands:
        ratio = certificate.cut_ratio(mask, red.tails, red.heads, red.caps, comp)
        if ratio is not None and (best is None or ratio < best[0]):
            best = (ratio, mask, label)
    if best is None:
        return None
    ratio, mask, _ = best
    label = describe_set(topo, mask) if 1 < mask.sum() < n - 1 else best[2]
    inside = int((mask & comp).sum())
    outside = int((~mask & comp).sum())
    nranks = int(comp.sum())
    cls = _link_classes(topo)
    groups: list[LinkGroup] = []
    orbit_ids = red.arc_orbit.tolist()
    if s.lengths is not None:
        hot = sorted({o for o, ln in zip(orbit_ids, s.lengths) if ln > 0})
        for o in hot:
            arcs = [e for e, oo in enumerate(orbit_ids) if oo == o]
            u, v = int(red.tails[arcs[0]]), int(red.heads[arcs[0]])
            groups.append(LinkGroup(len(arcs), (names[u], names[v]), cls.get((u, v), ""), red.caps[arcs[0]]))
    return Bottleneck(tuple(names[i] for i in np.flatnonzero(mask)), inside, outside, ratio * inside * outside,
                      ratio * nranks, ratio == lam, label, tuple(groups))


def alltoall_bound(topo: Topology, *, symmetry: bool = True, exact: bool = True) -> AlltoallBound:
    """The optimal all-to-all algbw of ``topo`` (see the module docstring); never raises for a valid topology."""
    t0 = time.perf_counter()
    name = topo.name
    try:
        s = solve_alltoall(topo, symmetry=symmetry, exact=exact)
    except UsageError as exc:
        return AlltoallBound(False, str(exc), name, topo.num_compute, switch_nodes=len(topo.switch_nodes))
    return bound_from_solved(s, time.perf_counter() - t0)


def bound_from_solved(s: Solved, seconds: float | None = None) -> AlltoallBound:
    """The user-facing bound of a solved problem."""
    red = s.red
    nr = red.num_ranks
    lower = s.lower * nr if s.lower is not None else None
    upper = s.upper * nr if s.upper is not None else None
    certified = lower is not None and upper is not None and lower == upper
    algbw = lower if certified else None
    sym = {
        "generators": red.generators,
        "group": red.method,
        "source_orbits": len(red.sources),
        "orbit_sizes": [len(sc.members) for sc in red.sources],
        "lp_rows": s.lp.nrows,
        "lp_columns": s.lp.ncols,
        "lp_nonzeros": s.lp.nnz,
        "exact_basis_solve": s.sol.lam is not None,
    }
    if s.sol.exact_note:
        sym["exact_note"] = s.sol.exact_note
    lam_for_cut = s.lower if certified else (s.upper if s.upper is not None else None)
    bottleneck = bottleneck_of(s, lam_for_cut) if lam_for_cut is not None else None
    fr = format_rational
    label = s.topo.name or "the topology"
    if certified:
        msg = f"all-to-all on {label}: algbw {fr(algbw)} GB/s (~{float(algbw):.4g}), certified optimal"
    elif lower is not None and upper is not None:
        msg = (f"all-to-all on {label}: algbw ~{s.sol.lam_float * nr:.6g} GB/s (float); certified within "
               f"[{float(lower):.6g}, {float(upper):.6g}] (relative gap {float((upper - lower) / upper):.2e})")
    else:
        msg = f"all-to-all on {label}: algbw ~{s.sol.lam_float * nr:.6g} GB/s (float, uncertified)"
    secs = dict(s.seconds)
    if seconds is not None:
        secs["total"] = seconds
    return AlltoallBound(True, msg, s.topo.name, nr, certified, algbw, s.sol.lam_float * nr, lower, upper, bottleneck,
                         sym, secs, len(s.topo.switch_nodes))


__all__ = ["AlltoallBound", "Bottleneck", "LinkGroup", "Solved", "SourceClass", "alltoall_bound", "bound_from_solved",
           "expand_loads", "paths_rate", "solve_alltoall"]
