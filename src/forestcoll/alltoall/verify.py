"""Independent check of an all-to-all schedule against its topology (shares no code with the generator).

Checks: the ranks are the topology's compute nodes; every flow joins two
distinct ranks along links of the topology, never visits a node twice and has
a positive fraction; every ordered pair's fractions sum to exactly 1.  Then it
sums each link's load exactly (fractions of size/N) and derives the algbw the
flows reach: N * min over loaded links of bandwidth / load.  That must equal the
schedule's claimed algbw; when the schedule claims to be optimal it must equal
the bound it carries.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from forestcoll.errors import ScheduleError
from forestcoll.rational import format_rational
from forestcoll.topology.model import Topology

MAX_ERRORS = 20


@dataclass
class AlltoallCheck:
    """The verifier's findings: ok, a one-line message, every error found (up to 20), and the figures."""

    ok: bool
    message: str
    errors: list[str] = field(default_factory=list)
    algbw: Fraction | None = None  # what the flows reach (GB/s)
    claimed_algbw: Fraction | None = None
    bound_algbw: Fraction | None = None
    optimal: bool = False
    flows: int = 0
    pairs: int = 0
    k: int = 0
    bottleneck_links: list[tuple[str, str]] = field(default_factory=list)
    max_hops: int = 0

    def to_dict(self) -> dict[str, Any]:
        fr = format_rational
        return {
            "ok": self.ok,
            "message": self.message,
            "errors": list(self.errors),
            "algbw_gbps": fr(self.algbw) if self.algbw is not None else None,
            "claimed_algbw_gbps": fr(self.claimed_algbw) if self.claimed_algbw is not None else None,
            "bound_algbw_gbps": fr(self.bound_algbw) if self.bound_algbw is not None else None,
            "optimal": self.optimal,
            "flows": self.flows,
            "pairs": self.pairs,
            "k": self.k,
            "max_hops": self.max_hops,
            "bottleneck_links": [list(x) for x in self.bottleneck_links],
        }


def _as_plain(schedule: Any) -> Mapping[str, Any]:
    """Accept the schedule object or its dict form; read only plain data from it."""
    if isinstance(schedule, Mapping):
        return schedule
    if hasattr(schedule, "to_dict"):
        return schedule.to_dict()
    raise ScheduleError("expected an all-to-all schedule or its JSON object")


def _fraction(value: Any) -> Fraction | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            if "/" in text:
                num, den = text.split("/", 1)
                return Fraction(int(num), int(den))
            return Fraction(text)
        except (ValueError, ZeroDivisionError):
            return None
    return None


def verify_alltoall(schedule: Any, topo: Topology) -> AlltoallCheck:
    """Check ``schedule`` (object or schedule-file dict) on ``topo``; see the module docstring."""
    data = _as_plain(schedule)
    errors: list[str] = []

    def err(msg: str) -> None:
        if len(errors) < MAX_ERRORS:
            errors.append(msg)

    kinds = {nd.name: nd.kind for nd in topo.nodes}
    bandwidth: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    for lk in topo.links:
        bandwidth[lk.src, lk.dst] += lk.bandwidth
    ranks = list(data.get("ranks") or [])
    compute = [nd.name for nd in topo.nodes if nd.kind == "compute"]
    if sorted(ranks) != sorted(compute):
        missing = sorted(set(compute) - set(ranks))
        extra = sorted(set(ranks) - set(compute))
        err("the schedule's ranks are not the topology's compute nodes"
            + (f"; missing {missing[:3]}" if missing else "") + (f"; not compute nodes: {extra[:3]}" if extra else ""))
    rankset = set(ranks)
    share: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    load: dict[tuple[str, str], Fraction] = defaultdict(Fraction)
    flows = data.get("flows") or []
    denominators = 1
    max_hops = 0
    for i, f in enumerate(flows):
        src, dst, path = f.get("src"), f.get("dst"), f.get("path")
        frac = _fraction(f.get("fraction"))
        where = f"flow {i} ({src} -> {dst})"
        if src not in rankset or dst not in rankset or src == dst:
            err(f"{where}: src and dst must be two different ranks")
            continue
        if frac is None or frac <= 0 or frac > 1:
            err(f"{where}: fraction {f.get('fraction')!r} must be a number in (0, 1]")
            continue
        if not isinstance(path, list) or len(path) < 2 or path[0] != src or path[-1] != dst:
            err(f"{where}: the path must start at {src} and end at {dst}")
            continue
        if len(set(path)) != len(path):
            err(f"{where}: the path visits a node twice")
            continue
        bad = next((x for x in path if x not in kinds), None)
        if bad is not None:
            err(f"{where}: {bad!r} is not a node of the topology")
            continue
        hops = list(zip(path, path[1:]))
        missing_link = next((h for h in hops if h not in bandwidth), None)
        if missing_link is not None:
            err(f"{where}: no link {missing_link[0]} -> {missing_link[1]}")
            continue
        share[src, dst] += frac
        for h in hops:
            load[h] += frac
        denominators = math.lcm(denominators, frac.denominator)
        max_hops = max(max_hops, len(hops))
    for s in ranks:
        for t in ranks:
            if s != t and share.get((s, t), Fraction(0)) != 1:
                got = share.get((s, t), Fraction(0))
                err(f"pair {s} -> {t}: fractions sum to {format_rational(got)}, not 1")
    n = len(ranks)
    algbw = None
    worst: list[tuple[str, str]] = []
    if load:
        rate = min(bandwidth[h] / ld for h, ld in load.items())
        algbw = rate * n
        worst = sorted(h for h, ld in load.items() if bandwidth[h] / ld == rate)
    claimed = _fraction(data.get("algbw_gbps"))
    bound = _fraction(data.get("bound_algbw_gbps")) if data.get("bound_algbw_gbps") is not None else None
    if algbw is not None and claimed is not None and claimed != algbw:
        err(f"the schedule claims algbw {format_rational(claimed)} GB/s but its flows reach {format_rational(algbw)}")
    if bound is not None and algbw is not None and algbw > bound:
        err(f"the flows reach {format_rational(algbw)} GB/s, above the bound {format_rational(bound)} the schedule carries")
    if data.get("optimal") and (bound is None or algbw != bound):
        err("the schedule claims to be optimal but its algbw is not its bound")
    optimal = bound is not None and algbw == bound
    ok = not errors and algbw is not None
    if ok:
        assert algbw is not None
        tail = ("= the certified optimum" if optimal else
                f"({float(algbw / bound):.1%} of the bound {format_rational(bound)})" if bound else "(no bound given)")
        msg = (f"ok: {len(flows)} flows cover all {n * (n - 1)} ordered pairs, k={denominators}, algbw "
               f"{format_rational(algbw)} GB/s {tail}")
    else:
        msg = errors[0] if errors else "the schedule has no flows"
    return AlltoallCheck(ok, msg, errors, algbw, claimed, bound, optimal, len(flows), len(share), denominators,
                         worst[:16], max_hops)
