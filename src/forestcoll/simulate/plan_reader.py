"""What an MSCCL++ plan's operations move, read from the plan: each thread block's compiled program, each operation's
bytes, routes, remote GPUs and channels.

One reader serves both the simulator's program builder (:mod:`forestcoll.simulate.mscclpp`, whose ``_Builder`` turns
the operations into transfers) and the bound that skips plans that cannot win
(:mod:`forestcoll.simulate.plan_bound`, which sums the same bytes over the same routes without building a program),
so the two count the same bytes by construction (tests/test_mscclpp_prune.py holds their link loads equal).

Routes: a port channel between boxes spreads each transfer's bytes evenly over the pair's equal-cost routes through
its GPU's NIC port (another spine of a leaf-spine fabric), the rule the MSCCL model applies to its connections
(:func:`forestcoll.simulate.network.channel_routes`): the model's average of a fabric's ECMP.  A pair with one such
route, and every other transfer, takes one route.
"""

from __future__ import annotations

import math

from forestcoll.errors import UsageError
from forestcoll.mscclpp.plan import BufRef, Op, Plan, PlanError
from forestcoll.mscclpp.semantics import PIPELINED, buffer_sizes, wire
from forestcoll.simulate.network import Network, Route, channel_routes

__all__ = ["PORT_TRANSPORTS", "PlanBlock", "PlanReader", "leaving_route", "port_spread"]

PORT_TRANSPORTS = ("executor", "nic")


def port_spread(net: Network, a: int, b: int, one: Route) -> list[Route]:
    """The routes a port-channel transfer from rank ``a`` to rank ``b`` that would take route ``one`` spreads its
    bytes over, evenly: between boxes, :func:`~forestcoll.simulate.network.channel_routes`' group 0 when it starts
    with ``one`` (the pair's equal-cost routes through ``one``'s NIC ports); else ``one`` alone."""
    box = net.box
    if box[net.index[net.ranks[a]]] != box[net.index[net.ranks[b]]]:
        group = channel_routes(net, net.port_groups, a, b, 0)
        if group[0] == one:
            return group
    return [one]


class PlanBlock:
    """One thread block of a plan: its GPU, its position there and its compiled program (:meth:`PlanReader.compile`'s
    instructions); the rest is the program builder's state as it walks them."""

    __slots__ = ("gpu", "pos", "prog", "pc", "frames", "prev", "pending", "done", "seq")

    def __init__(self, gpu: int, pos: int, prog: list) -> None:
        self.gpu, self.pos, self.prog = gpu, pos, prog
        self.pc = 0
        self.frames: list[list] = []
        self.prev: int | None = None
        self.pending: list[int] = []  # memory-channel writes a release (signal) must wait for
        self.done = False
        self.seq = 0


class PlanReader:
    """``plan`` read for one call of ``size`` bytes on ``net`` (``source`` names it in errors; ``port_transport`` as
    :func:`forestcoll.simulate.mscclpp.simulate_plan`'s): ``blocks`` (:class:`PlanBlock`, GPU by GPU), ``chunk``
    (bytes per chunk), and per operation :meth:`route` / :meth:`spread`, :meth:`nbytes`, :meth:`remote_gpu`, :meth:`channel_end`,
    :meth:`span`."""

    def __init__(self, plan: Plan, net: Network, size: float, source: str, port_transport: str = "executor") -> None:
        self.plan, self.net, self.source = plan, net, source
        if port_transport not in PORT_TRANSPORTS:
            raise UsageError(f"unknown port transport {port_transport!r}; choose {' or '.join(PORT_TRANSPORTS)}")
        self.port_nic = port_transport == "nic"
        n = len(plan.gpus)
        if n != len(net.ranks):
            raise UsageError(f"{source} is for {n} GPUs but the topology has {len(net.ranks)} compute nodes")
        self.w = wire(plan)
        ins, outs = buffer_sizes(plan, int(size))
        g0 = plan.gpus[0]
        if plan.collective == "allgather":
            ins, outs = size / n, size
        elif plan.collective == "reducescatter":
            ins, outs = size, size / n
        else:
            ins = outs = size
        self.chunk = ins / g0.input_chunks if g0.input_chunks else outs / max(g0.output_chunks, 1)
        self.blocks: list[PlanBlock] = []
        for g, gp in enumerate(plan.gpus):
            for t, tb in enumerate(gp.threadblocks):
                self.blocks.append(PlanBlock(g, t, self.compile(tb.ops)))
        self.routes: dict[tuple[int, int, bool, bool], list[Route]] = {}

    def compile(self, ops: tuple[Op, ...]) -> list:
        """A block's operations as instructions: ("op", op, inside a pipeline), and around a pipeline's operations
        ("pipe", iterations, unit bytes, count) ... ("end",)."""
        out: list = []
        for op in ops:
            if op.name == "pipeline":
                unit, nchunks = op.iter_context or (0, 0)
                iters = math.ceil(nchunks * self.chunk / unit) if unit else 0
                inner = op.ops or ()
                out.append(("pipe", iters, unit, len(inner)))
                out.extend(("op", x, True) for x in inner)
                out.append(("end",))
            else:
                out.append(("op", op, False))
        return out

    def route(self, a: int, b: int, ctype: str | None = None) -> Route:
        """Links and latency between ranks a and b for a transfer on a ``ctype`` channel (see the module docstring):
        the first of :meth:`spread`'s routes, what a transfer without bytes (a signal) takes."""
        return self.spread(a, b, ctype)[0]

    def spread(self, a: int, b: int, ctype: str | None = None) -> list[Route]:
        """The routes a transfer from rank a to rank b on a ``ctype`` channel spreads its bytes over, evenly: for a
        port channel between boxes the pair's equal-cost routes through :meth:`Network.route`'s NIC ports
        (:func:`~forestcoll.simulate.network.channel_routes`' group 0, the rule of the MSCCL model), else one route."""
        nic = ctype == "port" and self.port_nic
        key = (a, b, ctype == "port", nic)
        if key not in self.routes:
            net = self.net
            one = leaving_route(net, a, b) if nic else net.route(a, b)
            self.routes[key] = port_spread(net, a, b, one) if ctype == "port" else [one]
        return self.routes[key]

    # -- references -----------------------------------------------------------------------------------

    def nbytes(self, ref: BufRef, op: Op, off: float | None, unit: float | None) -> float:
        b = ref.size * self.chunk
        if op.tbg is not None and op.tbg[1] > 0:
            b /= op.tbg[1]
        if off is None or op.name not in PIPELINED:
            return b
        return max(0.0, min(b - off, unit))

    def remote_gpu(self, b: PlanBlock, ref: BufRef, ctype: str | None) -> int:
        ids = self.w.tb_remote[(b.gpu, b.pos)].get(ctype or "", [])
        if ref.buffer_id is None or ref.buffer_id >= len(ids):
            raise PlanError(f"{self.source}: gpu {b.gpu} tb {b.pos}: remote buffer {ref.buffer_id} is not in its list")
        return self.plan.gpus[b.gpu].remote_buffers[ids[ref.buffer_id]].rank

    def channel_end(self, b: PlanBlock, ctype: str, cid: int):
        table = self.w.tb_channels[(b.gpu, b.pos)].get(ctype, [])
        ends = self.w.channels.get((b.gpu, ctype), [])
        if not 0 <= cid < len(table) or not 0 <= table[cid] < len(ends):
            raise PlanError(f"{self.source}: gpu {b.gpu} tb {b.pos}: {ctype} channel {cid} does not exist "
                            "(`forestcoll mscclpp lint` names every such reference)")
        return ends[table[cid]]

    def span(self, ref: BufRef, op: Op) -> tuple[float, float]:
        lo = ref.index * self.chunk
        hi = (ref.index + ref.size) * self.chunk
        if op.tbg is not None and op.tbg[1] > 0:
            step = (hi - lo) / op.tbg[1]
            lo, hi = lo + op.tbg[0] * step, lo + (op.tbg[0] + 1) * step
        return lo, hi


def leaving_route(net: Network, src: int, dst: int) -> Route:
    """The route from rank ``src`` to rank ``dst`` through switches only that leaves ``src``'s box (fewest hops,
    then widest, then smallest node ids): a port channel over the NICs; the box route when there is none."""
    a, b = net.index[net.ranks[src]], net.index[net.ranks[dst]]
    box, is_compute, out = net.box, net.topology.is_compute, net.out
    start = (a, box[a] != box[a])
    best: dict[tuple[int, bool], tuple[int, float, tuple[int, ...]]] = {start: (0, math.inf, (a,))}
    frontier = [start]
    while frontier and not any(s == (b, True) for s in frontier):
        nxt: dict[tuple[int, bool], tuple[int, float, tuple[int, ...]]] = {}
        for state in frontier:
            u, left = state
            hops, width, path = best[state]
            if u != a and is_compute[u]:
                continue
            for v in out.get(u, []):
                s2 = (v, left or box[v] != box[a])
                if s2 in best or (is_compute[v] and v != b):
                    continue
                cand = (hops + 1, min(width, float(net.capacity[net.link_of[(u, v)]])), path + (v,))
                cur = nxt.get(s2)
                if cur is None or (-cand[1], cand[2]) < (-cur[1], cur[2]):
                    nxt[s2] = cand
        best.update(nxt)
        frontier = sorted(nxt)
    if (b, True) not in best:
        return net.route(src, dst)
    path = best[(b, True)][2]
    ids = tuple(net.link_of[(u, v)] for u, v in zip(path, path[1:]))
    return ids, float(sum(net.latency[i] for i in ids))
