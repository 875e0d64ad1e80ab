"""A lower bound on a plan's simulated time, from the plan alone (no program is built): what lets a race skip a plan
that cannot win.

:func:`forestcoll.simulate.mscclpp.simulate_plan` runs each thread block's operations one after the other, and no
transfer ever moves faster than the slowest link of its route (the engine's shares never exceed a link's capacity).
So a call takes at least as long as

* each thread block's chain: the bytes of its memory-channel puts and remote writes (sent one destination after the
  other: the block goes on when the last byte has left) over their routes' slowest links, plus for each remote read
  (``get``, ``rre``, ``rres``: the block waits for the data) the slowest of its reads and the shortest latency;
* each port channel's queue (its puts go one after the other);
* each link's bytes over its capacity.

Every term counts the bytes of all a pipeline's iterations, summed in closed form (``min(b, iterations * unit)`` for
an operation that honours the pipeline's unit, ``iterations * b`` otherwise), so the bound costs one pass over the
plan's operations whatever the size.  Operations it does not model (signals, waits, switch and local operations)
count as taking no time, which keeps it a lower bound.
"""

from __future__ import annotations

from collections import defaultdict

from forestcoll.mscclpp.plan import Op, Plan
from forestcoll.mscclpp.semantics import PIPELINED
from forestcoll.simulate.network import Network
from forestcoll.simulate.plan_reader import PlanReader

__all__ = ["plan_link_bytes", "plan_time_bound"]

_WRITES = frozenset({"put", "pws", "pwsf", "ppkt", "rppkt"})
_READS = frozenset({"get", "rre", "rres"})


def plan_time_bound(net: Network, plan: Plan, size: int) -> float:
    """Seconds that :func:`~forestcoll.simulate.mscclpp.simulate_plan` of ``plan`` on ``net`` for a call of ``size``
    bytes takes at least (executor port transport); see the module docstring."""
    worst, load, queue = _walk(net, plan, size)
    links = max((x / c for x, c in zip(load, (float(c) for c in net.capacity)) if c > 0), default=0.0)
    return max(worst, links, max(queue.values(), default=0.0))


def plan_link_bytes(net: Network, plan: Plan, size: int) -> list[float]:
    """The bytes the bound puts on each of ``net``'s links (by link id) for a call of ``size`` bytes: what the
    simulator's program of the plan (:func:`~forestcoll.simulate.mscclpp.mscclpp_program`) moves over each link, as
    both read the plan through :class:`~forestcoll.simulate.plan_reader.PlanReader` (tests/test_mscclpp_prune.py)."""
    return _walk(net, plan, size)[1]


def _walk(net: Network, plan: Plan, size: int) -> tuple[float, list[float], dict[tuple[int, int], float]]:
    """One pass over ``plan``'s operations: (the longest thread block's chain in seconds, bytes per link, seconds
    per port channel's queue)."""
    bld = PlanReader(plan, net, float(size), "plan")
    cap = [float(c) for c in net.capacity]
    load = [0.0] * len(cap)
    queue: dict[tuple[int, int], float] = defaultdict(float)
    worst = 0.0

    def move(a: int, c: int, nbytes: float, ctype: str | None = None) -> tuple[float, float]:
        """Put ``nbytes`` on the routes from ``a`` to ``c``, evenly (:meth:`PlanReader.spread`, as the program
        builder spreads them); (the fastest it can take, the first route's latency)."""
        routes = bld.spread(a, c, ctype) if nbytes > 0 else [bld.route(a, c, ctype)]
        share = nbytes / len(routes)
        fastest = 0.0
        for links, _ in routes:
            for i in links:
                load[i] += share
            slow = min((cap[i] for i in links), default=0.0)
            fastest = max(fastest, share / slow if slow > 0 and links else 0.0)
        return fastest, routes[0][1]

    for b in bld.blocks:
        chain = 0.0
        iters, unit = 1, None
        for ins in b.prog:
            if ins[0] == "pipe":
                iters, unit = ins[1], ins[2]
                continue
            if ins[0] == "end":
                iters, unit = 1, None
                continue
            op: Op = ins[1]

            def total(ref, op=op, inner=ins[2], iters=iters, unit=unit) -> float:
                full = bld.nbytes(ref, op, None, None)
                if not inner or unit is None:
                    return full
                return min(full, iters * unit) if op.name in PIPELINED else iters * full

            name, src, dst, ctype = op.name, op.src or (), op.dst or (), op.channel_type
            factor = 2.0 if name in ("ppkt", "rppkt") else 1.0
            if name in _WRITES and ctype == "memory":
                for i, d in enumerate(dst):
                    s = src[i] if i < len(src) else src[0]
                    chain += move(b.gpu, bld.remote_gpu(b, d, "memory"), total(d if name != "ppkt" else s) * factor)[0]
            elif name in _WRITES and ctype == "port":
                longest = 0.0
                for i, d in enumerate(dst):
                    cids = op.channel_ids or ()
                    nb = total(d if name != "ppkt" else src[min(i, len(src) - 1)]) * factor
                    t = move(b.gpu, bld.remote_gpu(b, d, "port"), nb, "port")[0]
                    if i < len(cids):
                        queue[(b.gpu, bld.channel_end(b, "port", cids[i]).index)] += t
                    longest = max(longest, t)
                if name == "pwsf":
                    chain += longest
            elif name in _READS:
                reads = src if name == "get" else src[1:]
                got = [move(bld.remote_gpu(b, r, "memory" if name == "get" else ctype), b.gpu,
                            total(r if name == "get" else src[0])) for r in reads]
                if got:
                    chain += max(t for t, _ in got) + (iters if ins[2] else 1) * min(lat for _, lat in got)
            if name in ("res", "rres"):
                for d in dst[1:]:
                    chain += move(b.gpu, bld.remote_gpu(b, d, ctype), total(src[0]), ctype)[0]
        worst = max(worst, chain)
    return worst, load, queue
