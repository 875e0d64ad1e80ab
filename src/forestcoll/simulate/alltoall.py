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

Slices follow the simulator's fixed rule (:func:`forestcoll.pieces.slices_for`: about 1 MiB, at least 8 down
to 64 KiB, at most ``max_slices``, :data:`ALLTOALL_MAX_SLICES` when none is given).  NCCL's point-to-point
chunks depend on the transport (``NCCL_P2P_NET_CHUNKSIZE`` and its NVLink / PCIe kin); they are not
modelled here yet, so all-to-all keeps the cap the whole simulator had before the runtimes' rules.
"""

from __future__ import annotations

from forestcoll.alltoall.schedule import AlltoallSchedule
from forestcoll.collectives import ALLTOALL
from forestcoll.errors import UsageError
from forestcoll.pieces import FIXED_MAX_SLICES, slices_for
from forestcoll.simulate.baselines import boxes as baseline_boxes
from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE, SimResult, simulate_program
from forestcoll.simulate.engine import ProgramBuilder
from forestcoll.simulate.network import Network

__all__ = ["ALLTOALL_MAX_SLICES", "BASELINES", "alltoall_program", "applicable", "direct_program", "hierarchical_program", "schedule_program",
           "simulate_alltoall"]

BASELINES = ("direct", "hierarchical")  # the vendors' all-to-all algorithms (compare's rows besides forestcoll)
ALLTOALL_MAX_SLICES = FIXED_MAX_SLICES  # slices per block when the caller gives no cap (module docstring)

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
        found = (net.fewest_hop_paths(src, dst, lambda u: not compute[u], 4 * self.limit)
                 or net.fewest_hop_paths(src, dst, lambda u: True, 4 * self.limit))
        if not found:
            return [single]
        routes = [net.path_links(tuple(net.names[x] for x in p)) for p in found]
        width = [min(net.capacity[i] for i in links) for links, _ in routes]
        best = max(width)
        if len(single[0]) < len(found[0]) - 1 or min(net.capacity[i] for i in single[0]) > best:
            return [single]  # the simulator's route is shorter or wider (e.g. xGMI inside a box, not the NICs)
        return [r for r, w in zip(routes, width) if w >= best * (1 - 1e-12)][: self.limit]


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


def applicable(name: str, net: Network) -> bool:
    """Whether all-to-all baseline ``name`` runs on this fabric (hierarchical needs several equal boxes)."""
    if name == "hierarchical":
        boxes = baseline_boxes(net)
        return len(boxes) > 1 and len({len(b) for b in boxes}) == 1
    return name in BASELINES


def hierarchical_program(net: Network, size: float, slice_bytes: float, max_slices: int) -> ProgramBuilder:
    """PXN-style: intra-box hand-over to the rank on the destination's rail, then rail-aligned sends (pipelined)."""
    if not applicable("hierarchical", net):
        raise UsageError("hierarchical all-to-all needs several boxes with the same number of ranks")
    boxes = baseline_boxes(net)
    g = len(boxes[0])
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


def alltoall_program(net: Network, algorithm: str | AlltoallSchedule, size: float, slice_bytes: float,
                     max_slices: int) -> ProgramBuilder:
    """The transfers of one all-to-all call with a schedule or a baseline (``direct``, ``hierarchical``)."""
    if isinstance(algorithm, AlltoallSchedule):
        return schedule_program(algorithm, net, size, slice_bytes, max_slices)
    if algorithm == "direct":
        return direct_program(net, size)
    if algorithm == "hierarchical":
        return hierarchical_program(net, size, slice_bytes, max_slices)
    raise UsageError(f"unknown all-to-all algorithm {algorithm!r}; choose a schedule, {' or '.join(BASELINES)}")


def simulate_alltoall(net: Network, algorithm: str | AlltoallSchedule, size: int = 1 << 30, *,
                      slice_bytes: int = DEFAULT_SLICE, max_slices: int | None = DEFAULT_MAX_SLICES, name: str | None = None,
                      sharing: str = "weighted", fairness: str = "max-min") -> SimResult:
    """Simulate one all-to-all call of ``size`` bytes (``forestcoll.simulate.simulate`` calls this for all-to-all);
    bad requests raise :class:`UsageError`."""
    if size < 1:
        raise UsageError(f"size must be >= 1 byte, got {size}")
    if max_slices is None:
        max_slices = ALLTOALL_MAX_SLICES
    if slice_bytes < 1 or max_slices < 1:
        raise UsageError("slice size and slices per block must be >= 1")
    prog = alltoall_program(net, algorithm, float(size), float(slice_bytes), int(max_slices))
    if isinstance(algorithm, AlltoallSchedule):
        label = name or ("forestcoll" if algorithm.optimal else f"forestcoll-k{algorithm.k}")
        extra = {"k": algorithm.k}
    else:
        label, extra = name or algorithm, None
    return simulate_program(prog, net, label, ALLTOALL.name, int(size), extra, sharing, fairness)
