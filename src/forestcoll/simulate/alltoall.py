"""All-to-all on the simulator: forestcoll schedules and the two algorithms vendors ship.

A call of ``size`` bytes moves size/N bytes from every rank to every other
(nccl-tests convention; busbw = algbw x (N-1)/N).

* ``forestcoll``: every flow of an :class:`~forestcoll.alltoall.schedule.AlltoallSchedule`
  moves ``fraction x size/N`` bytes along its path, all flows at once.  A path
  is cut at the ranks it relays through into hops (switches cut through);
  with relays the bytes move in pipeline slices, store-and-forward at each
  relay.  Weighted sharing gives every flow its schedule rate.
* ``direct`` (NCCL's alltoall): every pair at once, its bytes spread evenly
  over the widest of the fewest-hop routes through switches (NCCL spreads its
  channels over a GPU's NICs, the fabric spreads flows over spines by ECMP);
  without such a route, over the widest fewest-hop routes through other ranks
  (torus / mesh routing); where the simulator's route (which prefers relays
  inside the box, as PXN does) is shorter or wider, that route.
* ``hierarchical`` (PXN-style, several equal boxes): a rank first hands what it
  has for the ranks with local index j in other boxes to its own box's rank j
  (intra-box exchange), which sends it, with its own, over its rail to each
  of them; pairs inside a box go direct.  Pipelined in slices.

Slices follow the simulator's rule: about ``slice_bytes`` each, at least 8
while they stay >= 64 KiB, at most ``max_slices``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forestcoll.alltoall.boxes import rank_boxes
from forestcoll.alltoall.schedule import AlltoallSchedule
from forestcoll.errors import UsageError
from forestcoll.simulate.core import SimResult
from forestcoll.simulate.engine import ProgramBuilder, run
from forestcoll.simulate.network import Network

ALLTOALL_ALGORITHMS = ("forestcoll", "direct", "hierarchical")
MIN_SLICES = 8
MIN_SLICE_BYTES = 64 << 10


def slices_for(nbytes: float, slice_bytes: float, max_slices: int) -> int:
    """Pipeline slices for a block of ``nbytes`` (the simulator's rule, see the module docstring)."""
    wanted = max(math.ceil(nbytes / slice_bytes), min(MIN_SLICES, int(nbytes // MIN_SLICE_BYTES)))
    return max(1, min(max_slices, wanted))


def _hops(net: Network, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The path cut at every rank it passes through (each piece: rank, switches..., rank)."""
    compute = net.topology.is_compute
    index = net.index
    hops, cur = [], [path[0]]
    for node in path[1:]:
        cur.append(node)
        if compute[index[node]]:
            hops.append(tuple(cur))
            cur = [node]
    return hops


def schedule_program(sched: AlltoallSchedule, net: Network, size: float, slice_bytes: float, max_slices: int) -> ProgramBuilder:
    """The transfers of ``sched`` for a call of ``size`` bytes."""
    n = len(sched.ranks)
    missing = sorted(set(sched.ranks) - set(net.ranks))
    if missing:
        raise UsageError(f"the schedule's rank {missing[0]} is not a compute node of {net.topology.name or 'the topology'}")
    block = size / n
    prog = ProgramBuilder()
    routes: dict[tuple[str, ...], tuple[tuple[int, ...], float]] = {}
    for fid, f in enumerate(sched.flows):
        nbytes = block * float(f.fraction)
        hops = _hops(net, f.path)
        for h in hops:
            if h not in routes:
                routes[h] = net.path_links(h)
        s = 1 if len(hops) == 1 else slices_for(nbytes, slice_bytes, max_slices)
        last: list[int | None] = [None] * len(hops)
        for _ in range(s):
            prev = None
            for i, h in enumerate(hops):
                links, lat = routes[h]
                prev = prog.transfer(links, nbytes / s, lat, after_sent=[last[i]], after_delivered=[prev], stream=(fid, i))
                last[i] = prev
    return prog


class _Spread:
    """Equal-cost multipath routes between ranks: every widest fewest-hop route through switches (up to ``limit``),
    else the simulator's single route."""

    def __init__(self, net: Network, limit: int = 16) -> None:
        self.net, self.limit = net, limit
        self.cache: dict[tuple[int, int], list[tuple[tuple[int, ...], float]]] = {}

    def __call__(self, a: int, b: int) -> list[tuple[tuple[int, ...], float]]:
        key = (a, b)
        if key not in self.cache:
            self.cache[key] = self._find(a, b)
        return self.cache[key]

    def _find(self, a: int, b: int) -> list[tuple[tuple[int, ...], float]]:
        net = self.net
        src, dst = net.index[net.ranks[a]], net.index[net.ranks[b]]
        compute = net.topology.is_compute
        single = net.route(a, b)
        found = self._shortest(src, dst, lambda u: not compute[u]) or self._shortest(src, dst, lambda u: True)
        if not found:
            return [single]
        routes = [net.path_links(tuple(net.names[x] for x in p)) for p in found]
        width = [min(net.capacity[i] for i in links) for links, _ in routes]
        best = max(width)
        if len(single[0]) < len(found[0]) - 1 or min(net.capacity[i] for i in single[0]) > best:
            return [single]  # the simulator's route is shorter or wider (e.g. xGMI inside a box, not the NICs)
        return [r for r, w in zip(routes, width) if w >= best * (1 - 1e-12)][: self.limit]

    def _shortest(self, src: int, dst: int, relay) -> list[list[int]]:
        """Fewest-hop paths src -> dst whose inner nodes pass ``relay`` (at most 4 x limit of them)."""
        out = self.net.out
        dist = {src: 0}
        frontier = [src]
        while frontier and dst not in dist:
            nxt = []
            for u in frontier:
                if u != src and not relay(u):
                    continue
                for v in out.get(u, []):
                    if v not in dist:
                        dist[v] = dist[u] + 1
                        nxt.append(v)
            frontier = nxt
        if dst not in dist:
            return []
        found: list[list[int]] = []
        stack = [[src]]
        while stack and len(found) < 4 * self.limit:
            path = stack.pop()
            u = path[-1]
            if u == dst:
                found.append(path)
                continue
            if u != src and not relay(u):
                continue
            for v in sorted(out.get(u, []), reverse=True):
                if dist.get(v) == dist[u] + 1 and (v == dst or dist[v] < dist[dst]):
                    stack.append(path + [v])
        return found


def direct_program(net: Network, size: float) -> ProgramBuilder:
    """Every ordered pair at once, size/N bytes spread over its equal-cost routes."""
    n = len(net.ranks)
    prog = ProgramBuilder()
    spread = _Spread(net)
    for a in range(n):
        for b in range(n):
            if a != b:
                routes = spread(a, b)
                for i, (links, lat) in enumerate(routes):
                    prog.transfer(links, size / n / len(routes), lat, stream=("d", a, b, i))
    return prog


def hierarchical_program(net: Network, size: float, slice_bytes: float, max_slices: int) -> ProgramBuilder:
    """PXN-style: intra-box hand-over to the rank on the destination's rail, then rail-aligned sends (pipelined)."""
    boxes = rank_boxes(net.topology)
    g = len(boxes[0])
    if len(boxes) < 2 or any(len(b) != g for b in boxes):
        raise UsageError("hierarchical all-to-all needs several boxes with the same number of ranks")
    n = len(net.ranks)
    nb = len(boxes)
    block = size / n
    prog = ProgramBuilder()
    s = slices_for(g * block, slice_bytes, max_slices)
    last: dict[tuple, int] = {}
    spread = _Spread(net)

    def send(key: tuple, a: int, b: int, nbytes: float, after: list[int]) -> int:
        """One slice from a to b spread over the equal-cost routes; returns a marker of its arrival."""
        routes = spread(a, b)
        ids = []
        for i, (links, lat) in enumerate(routes):
            k = (*key, i)
            tid = prog.transfer(links, nbytes / len(routes), lat, after_sent=[last.get(k)], after_delivered=after, stream=k)
            last[k] = tid
            ids.append(tid)
        return ids[0] if len(ids) == 1 else prog.marker(after_delivered=ids)

    for members in boxes:  # inside a box: direct
        for a in members:
            for c in members:
                if a != c:
                    send(("intra", a, c), a, c, block, [])
    for _ in range(s):
        arrived: dict[int, list[int]] = {}
        for members in boxes:
            for a in members:
                for relay in members:
                    if relay != a:  # a's data for rank j of every other box, handed to its own rank j
                        arrived.setdefault(relay, []).append(send(("pxn1", a, relay), a, relay, (nb - 1) * block / s, []))
        for bi, members in enumerate(boxes):
            for j, relay in enumerate(members):
                for bj, other in enumerate(boxes):
                    if bj != bi:  # everything box bi has for rank j of box bj, over rail j
                        send(("pxn2", relay, other[j]), relay, other[j], g * block / s, arrived.get(relay, []))
    return prog


@dataclass
class AlltoallSim:
    """One simulated all-to-all call: ok, a message, and the simulator's result."""

    ok: bool
    message: str
    result: SimResult | None = None

    @property
    def algbw_gbps(self) -> float:
        return self.result.algbw_gbps if self.result else float("nan")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "message": self.message}
        if self.result is not None:
            out.update(self.result.to_dict())
        return out


def simulate_alltoall(net: Network, algorithm: str | AlltoallSchedule, size: int = 1 << 30, *, slice_bytes: int = 1 << 20,
                      max_slices: int = 16, name: str | None = None, sharing: str = "weighted",
                      fairness: str = "max-min") -> AlltoallSim:
    """Simulate one all-to-all call of ``size`` bytes with a schedule or a baseline name (``direct``, ``hierarchical``)."""
    try:
        if size < 1:
            raise UsageError(f"size must be >= 1 byte, got {size}")
        if slice_bytes < 1 or max_slices < 1:
            raise UsageError("slice size and slices per block must be >= 1")
        t0 = time.perf_counter()
        if isinstance(algorithm, AlltoallSchedule):
            prog = schedule_program(algorithm, net, float(size), float(slice_bytes), int(max_slices))
            label = name or "forestcoll"
        elif algorithm == "direct":
            prog, label = direct_program(net, float(size)), name or "direct"
        elif algorithm == "hierarchical":
            prog = hierarchical_program(net, float(size), float(slice_bytes), int(max_slices))
            label = name or "hierarchical"
        else:
            raise UsageError(f"unknown all-to-all algorithm {algorithm!r}; choose a schedule, direct or hierarchical")
        program = prog.build(sharing)
        res = run(program, net.capacity, fairness)
    except UsageError as exc:
        return AlltoallSim(False, str(exc))
    unfinished = int(np.isnan(res.delivered).sum())
    if unfinished:
        return AlltoallSim(False, f"{label}: {unfinished} of {program.size} transfers never ran")
    n = len(net.ranks)
    wall = time.perf_counter() - t0
    algbw = size / res.time / 1e9 if res.time > 0 else float("inf")
    sim = SimResult(label, "alltoall", int(size), n, res.time, algbw, algbw * (n - 1) / n, program.size, res.events, wall,
                    {"rate_recomputations": res.recomputes})
    return AlltoallSim(True, f"{label}: {algbw:.2f} GB/s algbw at {size} bytes ({res.time * 1e3:.3f} ms)", sim)


@dataclass
class AlltoallComparison:
    """Simulated algbw (GB/s) of forestcoll and the baselines at each size, next to the bound."""

    ok: bool
    message: str
    bound_gbps: float
    sizes: list[int] = field(default_factory=list)
    rows: dict[str, list[float | None]] = field(default_factory=dict)  # algorithm -> algbw per size (None: n/a)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "message": self.message, "collective": "alltoall", "bound_algbw_gbps": self.bound_gbps,
                "sizes": self.sizes, "algbw_gbps": self.rows}


def compare_alltoall(net: Network, schedule: AlltoallSchedule, sizes: list[int], *, bound_gbps: float | None = None,
                     **kwargs: Any) -> AlltoallComparison:
    """forestcoll (``schedule``), direct and hierarchical (where the fabric has equal boxes) at every size."""
    rows: dict[str, list[float | None]] = {a: [] for a in ALLTOALL_ALGORITHMS}
    notes = []
    for size in sizes:
        for algo in ALLTOALL_ALGORITHMS:
            sim = simulate_alltoall(net, schedule if algo == "forestcoll" else algo, size, **kwargs)
            rows[algo].append(sim.result.algbw_gbps if sim.ok and sim.result else None)
            if not sim.ok and sim.message not in notes:
                notes.append(sim.message)
    bound = float(bound_gbps if bound_gbps is not None else (schedule.bound_algbw or schedule.algbw))
    msg = "compared " + ", ".join(a for a in ALLTOALL_ALGORITHMS if any(v is not None for v in rows[a]))
    if notes:
        msg += "; " + "; ".join(notes)
    return AlltoallComparison(True, msg, bound, list(sizes), rows)
