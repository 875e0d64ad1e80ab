"""All-to-all schedules: every ordered pair's data split over paths; their place in the schedule file.

A schedule lists *flows* ``{src, dst, fraction, path}``: ``fraction`` (an exact
``p/q``) of the size/N bytes that rank ``src`` sends to rank ``dst`` go along
``path``, a walk over the fabric's links from src to dst (through switches,
which forward, or through other ranks, which relay).  Every pair's fractions
sum to 1.  ``k`` is the common denominator: cut each pair's block into k chunks
and a flow of fraction p/k carries p of them (the MSCCL export does so).  All
flows run at once; the time of a call is the largest ``load / bandwidth`` over
the links, with a link's load the sum of (size/N) x fraction over the flows
crossing it, so algbw = N * min over links of bandwidth / (sum of fractions).

In the schedule file (version 1, the one :mod:`forestcoll.schedule` reads; it
dispatches here on ``"collective": "alltoall"``) the object carries ``"flows"``
instead of ``"trees"``::

    {"format": "forestcoll-schedule", "version": 1, "collective": "alltoall",
     "topology": "...", "k": 2, "algbw_gbps": "50", "bound_algbw_gbps": "50",
     "optimal": true, "certified": true, "ranks": ["n0.gpu0", ...],
     "flows": [{"src": "n0.gpu0", "dst": "n0.gpu1", "fraction": "1/2",
                "path": ["n0.gpu0", "n0.nvswitch", "n0.gpu1"]}, ...]}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from forestcoll.errors import ForestCollError, ScheduleError
from forestcoll.rational import format_rational, parse_rational

__all__ = ["FORMAT", "VERSION", "AlltoallSchedule", "Flow", "schedule_from_dict"]

FORMAT = "forestcoll-schedule"
VERSION = 1
COLLECTIVE = "alltoall"


@dataclass(frozen=True)
class Flow:
    """``fraction`` of the pair (src, dst)'s data along ``path`` (node names, src first, dst last)."""

    src: str
    dst: str
    fraction: Fraction
    path: tuple[str, ...]


@dataclass(frozen=True)
class AlltoallSchedule:
    """Flows for every ordered pair, the algbw they reach (GB/s) and the optimum they are measured against.

    A result (:mod:`forestcoll.results`): ``ok`` always (a schedule's verdict is the verifier's)."""

    topology: str
    ranks: tuple[str, ...]
    flows: tuple[Flow, ...]
    algbw: Fraction
    bound_algbw: Fraction | None  # the certified optimum (None when not certified)
    certified: bool = False

    @property
    def k(self) -> int:
        """Chunks per pair: the common denominator of the fractions."""
        return math.lcm(*(f.fraction.denominator for f in self.flows)) if self.flows else 1

    @property
    def optimal(self) -> bool:
        return self.bound_algbw is not None and self.algbw == self.bound_algbw

    @property
    def collective(self) -> str:
        return COLLECTIVE

    @property
    def root(self) -> None:
        """All-to-all has no root (the attribute tree schedules carry)."""
        return None

    @property
    def ok(self) -> bool:
        return True

    @property
    def message(self) -> str:
        if self.optimal:
            status = "optimal (certified)"
        elif self.bound_algbw is not None:
            status = f"{float(self.algbw / self.bound_algbw):.1%} of the optimum {format_rational(self.bound_algbw)} GB/s"
        else:
            status = "optimum not certified"
        return (f"alltoall on {self.topology or 'a custom topology'}: k={self.k}, {len(self.flows)} flows, algbw "
                f"{format_rational(self.algbw)} GB/s; {status}")

    def to_dict(self) -> dict[str, Any]:
        """The schedule-file object (see the module docstring)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "collective": COLLECTIVE,
            "topology": self.topology,
            "k": self.k,
            "algbw_gbps": format_rational(self.algbw),
            "bound_algbw_gbps": format_rational(self.bound_algbw) if self.bound_algbw is not None else None,
            "optimal": self.optimal,
            "certified": self.certified,
            "ranks": list(self.ranks),
            "flows": [{"src": f.src, "dst": f.dst, "fraction": format_rational(f.fraction), "path": list(f.path)}
                      for f in self.flows],
        }


def _req(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise ScheduleError(f"{where}: missing '{key}'")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ScheduleError(f"{where}: '{key}' has the wrong type ({type(value).__name__})")
    return value


def _rational(value: Any, where: str) -> Fraction:
    try:
        return parse_rational(value, where)
    except ForestCollError as exc:
        raise ScheduleError(str(exc)) from None


def schedule_from_dict(data: Any, where: str = "schedule") -> AlltoallSchedule:
    """Parse the schedule-file object; malformed input raises :class:`ScheduleError` (one line)."""
    if not isinstance(data, Mapping):
        raise ScheduleError(f"{where}: expected a JSON object")
    if data.get("format", FORMAT) != FORMAT:
        raise ScheduleError(f"{where}: format {data.get('format')!r} is not {FORMAT!r}")
    if data.get("version", VERSION) != VERSION:
        raise ScheduleError(f"{where}: version {data.get('version')!r} is not supported (expected {VERSION})")
    if data.get("collective") != COLLECTIVE:
        raise ScheduleError(f"{where}: collective {data.get('collective')!r} is not {COLLECTIVE!r}")
    topology = data.get("topology") or ""
    if not isinstance(topology, str):
        raise ScheduleError(f"{where}: 'topology' must be a string")
    ranks = _req(data, "ranks", list, where)
    if not all(isinstance(r, str) for r in ranks) or len(set(ranks)) != len(ranks):
        raise ScheduleError(f"{where}: 'ranks' must be distinct names")
    if len(ranks) < 2:
        raise ScheduleError(f"{where}: an all-to-all needs at least two ranks")
    flows = []
    for i, f in enumerate(_req(data, "flows", list, where)):
        w = f"{where}: flow {i}"
        if not isinstance(f, Mapping):
            raise ScheduleError(f"{w}: expected an object")
        path = _req(f, "path", list, w)
        if not all(isinstance(x, str) for x in path):
            raise ScheduleError(f"{w}: 'path' must list node names")
        fraction = _rational(_req(f, "fraction", (str, int, Decimal), w), w)
        if fraction <= 0:
            raise ScheduleError(f"{w}: 'fraction' must be positive, got {format_rational(fraction)}")
        flows.append(Flow(_req(f, "src", str, w), _req(f, "dst", str, w), fraction, tuple(path)))
    algbw = _rational(_req(data, "algbw_gbps", (str, int, Decimal), where), f"{where}: algbw_gbps")
    raw_bound = data.get("bound_algbw_gbps")
    bound = _rational(raw_bound, f"{where}: bound_algbw_gbps") if raw_bound is not None else None
    return AlltoallSchedule(topology, tuple(ranks), tuple(flows), algbw, bound, bool(data.get("certified", False)))
