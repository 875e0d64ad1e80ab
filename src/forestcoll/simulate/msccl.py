"""MSCCL algorithm files as simulator programs: thread blocks run their steps in order, once per iteration.

Each thread block's transmissions (after the runtime's rewriting, see
:func:`forestcoll.msccl.semantics.compile_tb`) run one after another; the k-th
send on a connection meets the k-th receive at the other end.  A send starts
when its block has finished the previous step and every step it depends on;
forwarding steps (``rcs``, ``rrs``, ``rrcs``) also wait for their data; a
receive finishes when its data has arrived and its block has reached it.  Every
chunk is cut as the runtime's kernel loops over it (``slices_for(..., rule="ring")``:
iterations of 2 MiB per chunk, each primitive moving its data as two 1 MiB slices,
modelled as two iterations; no cap), and the whole program replays once per
iteration, as in the runtime.  Rank i of the file is
the topology's i-th compute node.

Routes.  A connection (GPU a to GPU b on channel c) uses the pair's equal-cost
routes (:meth:`Network.equal_routes`: :meth:`Network.route` and the routes
that differ from it only in switches), grouped by the links where they leave
a's box and enter b's (the NIC ports): the connection takes port group
c mod P, as the runtime picks a NIC (port) per channel, and spreads its bytes
evenly over that group's routes, as a fabric's ECMP hashing spreads
connections over its spines (the model takes the average, as the all-to-all
model does; :func:`forestcoll.simulate.network.channel_routes`, the one rule
the MSCCL++ model's port channels use too).  A pair with one route, or a file
whose pairs use one channel on a NIC with one port, behaves as before: one
route per connection.
"""

from __future__ import annotations

import math
from fractions import Fraction

from forestcoll import collectives
from forestcoll.errors import SimulationTooLarge, UsageError
from forestcoll.msccl.ir import RECVS, SENDS, Algo, MscclError
from forestcoll.msccl.semantics import by_rank, compile_tb, size_notes
from forestcoll.pieces import slices_for
from forestcoll.simulate.engine import ProgramBuilder, refuse_transfers
from forestcoll.simulate.network import Network, channel_routes

__all__ = ["FileRate", "channel_routes", "file_rate", "link_seconds", "msccl_collective", "msccl_lowering", "msccl_program", "serialisation_notes",
           "simulate_msccl", "size_notes"]


def msccl_collective(algo: Algo, source: str = "algo.xml") -> tuple[str, Fraction]:
    """The collective a file runs (forestcoll's name) and its nccl-tests bus factor; UsageError when unknown."""
    coll = collectives.from_msccl(algo.coll)
    if coll is not None:
        return coll.name, coll.bus_factor(algo.ngpus)
    raise UsageError(f"{source}: no simulation for coll {algo.coll!r}")


def simulate_msccl(algo: Algo, net: Network, size: int, *, slice_bytes: int | None = None, max_slices: int | None = None,
                   fairness: str = "max-min", source: str = "algo.xml", slice_cost_s: float = 0.0,
                   routes: dict | None = None):
    """Simulate one call of ``size`` bytes (nccl-tests size) of an MSCCL algorithm on ``net``; ``slice_cost_s``
    (default 0: the default model) charges every slice a block sends that many seconds more (a what-if, see
    :func:`msccl_program`); ``routes``: the pairs' routes on ``net``, kept between calls (:func:`channel_routes`)."""
    from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE, simulate_program

    name, bus = msccl_collective(algo, source)
    slice_bytes, max_slices = slice_bytes or DEFAULT_SLICE, max_slices or DEFAULT_MAX_SLICES
    prog = msccl_program(algo, net, float(size), float(slice_bytes), max_slices, source, slice_cost_s, routes)
    res = simulate_program(prog, net, algo.name or "msccl", name, size, None, "weighted", fairness, bus_factor=bus)
    iterations = slices_for(size / algo.nchunksperloop, slice_bytes, max_slices, rule="ring")
    res.extra["notes"] = size_notes(algo, size) + serialisation_notes(algo, res.time_s, prog.link_time(net.capacity),
                                                                       size, iterations)
    return res


_EPS = 1e-6  # the engine merges events within a relative 1e-9: a file is called slower only clearly so


def file_rate(topology, slice_bytes: int | None = None, slice_cost_s: float = 0.0,
              shared: dict | None = None) -> FileRate:
    """``rate(algo, size)``: the algbw (GB/s) of an MSCCL algorithm simulated at ``size`` on ``topology`` (default
    model, or the runtime buffer's ``slice_bytes`` and a per-slice cost, see :func:`simulate_msccl`); what
    ``generate --format msccl`` ranks the files that fit by (a file whose simulation is refused, above the transfer
    limit: :class:`~forestcoll.simulate.race.Unsimulated`, it loses).  Its ``bound(algo, size)`` is an upper bound on that
    rate, found without simulating (:func:`link_seconds`), with which the choice skips files that cannot win.
    ``shared``: a dict the caller keeps across the rates of one topology (``generate --buffsize``): the network is
    built once, and a file is simulated once per (size, loop iterations per chunk, cost): the slice enters the
    program only through those iterations (:func:`msccl_program`), so where every buffer cuts the chunks alike one
    simulation serves every buffer, exactly; with it, ``race(algo, size, best)`` also rates a file only as far as it
    takes to tell that it is slower than ``best`` GB/s, and ``promise(algo, size)`` counts a simulation as done for
    the race without doing it (both None without ``shared``)."""
    return FileRate(topology, slice_bytes, slice_cost_s, shared)


class FileRate:
    """:func:`file_rate`'s rate (call it), upper bound (:meth:`bound`) and, with a shared store, cut-short rate
    (``race``) on one topology's network."""

    def __init__(self, topology, slice_bytes: int | None, slice_cost_s: float, shared: dict | None = None) -> None:
        from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE
        from forestcoll.simulate.network import build_network

        self.race = self._race if shared is not None else None
        self.promise = self._promise if shared is not None else None
        self.shared = {} if shared is None else shared
        self.promised: dict = self.shared.setdefault("promised", {})  # keys a full rating would have simulated
        if "network" not in self.shared:
            self.shared["network"] = build_network(topology)
        self.net = self.shared["network"]
        self.routes: dict = self.shared.setdefault("routes", {})
        self.slice_bytes, self.slice_cost_s = slice_bytes, slice_cost_s
        self.slicing = (float(slice_bytes or DEFAULT_SLICE), DEFAULT_MAX_SLICES)

    def _key(self, algo: Algo, size: int) -> tuple:
        return id(algo), size, slices_for(size / algo.nchunksperloop, *self.slicing, rule="ring"), self.slice_cost_s

    def __call__(self, algo: Algo, size: int) -> float:
        """The algbw (GB/s) simulated (once per file, size, iterations and cost in the store)."""
        from forestcoll.simulate.race import losing

        key = self._key(algo, size)
        if key not in self.shared:  # the file is kept with its rate: its id stays unique (refused: Unsimulated)
            self.shared[key] = (algo, losing(lambda: simulate_msccl(
                algo, self.net, size, slice_bytes=self.slice_bytes, slice_cost_s=self.slice_cost_s,
                routes=self.routes).algbw_gbps)())
        return self.shared[key][1]

    def bound(self, algo: Algo, size: int) -> float:
        """The algbw (GB/s) the busiest link allows (inf without sends): no simulation of ``algo`` is faster, with
        any slice size or per-slice cost."""
        seconds = link_seconds(algo, self.net, size, self.routes)
        return size / seconds / 1e9 if seconds > 0 else float("inf")

    def _promise(self, algo: Algo, size: int) -> None:
        """Count ``algo`` at ``size`` as simulated, without simulating it yet: a later ``race`` of it rates it to the
        end, as it would had it been simulated here (a choice that skips a simulation a later choice's notes depend
        on promises it instead; :func:`forestcoll.msccl.generated.generated_msccl`'s ``lazy``)."""
        self.promised.setdefault(self._key(algo, size), algo)

    def _race(self, algo: Algo, size: int, best: float) -> tuple[float, bool]:
        """(rate, True), or (a rate below ``best`` GB/s that the file cannot reach, False) when its lower bound on
        time (the busiest link's bytes, :func:`link_seconds`, then the longest chain of steps at full speed plus
        latencies) or its simulation stopped at that time says it is slower than ``best``: for choosing the fastest
        of several files with fewer simulations (:mod:`forestcoll.simulate.race`'s rule: the same winner)."""
        from forestcoll.simulate.core import simulate_program
        from forestcoll.simulate.engine import path_bound

        if self._key(algo, size) in self.shared or self._key(algo, size) in self.promised or not best > 0:
            return self(algo, size), True
        limit = size / (best * 1e9) * (1 + _EPS)  # a time above it is a rate below best
        bound = link_seconds(algo, self.net, size, self.routes)
        if bound <= limit:
            try:
                program = msccl_program(algo, self.net, float(size), *self.slicing,
                                        slice_cost_s=self.slice_cost_s, routes=self.routes).build("weighted")
            except SimulationTooLarge:  # above the transfer limit: it loses, as its full rating says
                return self(algo, size), True
            bound = max(bound, path_bound(program, self.net.capacity))
            if bound <= limit:
                name, bus = msccl_collective(algo)
                res = simulate_program(program, self.net, algo.name or "msccl", name, size, None, "weighted",
                                       bus_factor=bus, stop_at=limit)
                if res is not None:
                    self.shared[self._key(algo, size)] = (algo, res.algbw_gbps)
                    return res.algbw_gbps, True
                bound = limit
        return min(size / bound / 1e9, math.nextafter(best, 0.0)), False


def link_seconds(algo: Algo, net: Network, size: int, cache: dict | None = None) -> float:
    """Seconds the busiest link of ``net`` needs for the bytes ``algo``'s sends put on it in one call of ``size``
    bytes, routed as :func:`msccl_program` routes them (:func:`channel_routes`): a lower bound on the simulated time,
    whatever the order of the transfers, their slices, latencies or sharing (a link moves at most its capacity);
    ``cache``: the pairs' routes, kept between calls on the same ``net``.  The load of a send is its count of
    chunks of ``size / nchunksperloop`` bytes, spread evenly over its connection's routes."""
    cache = {} if cache is None else cache
    counts: dict[tuple[int, int, int], int] = {}
    for g in by_rank(algo, algo.name or "algo.xml").gpus:
        for tb in g.tbs:
            sent = sum(st.cnt for st in tb.steps if st.type in SENDS)
            if sent:
                counts[(g.id, tb.send, tb.chan)] = counts.get((g.id, tb.send, tb.chan), 0) + sent
    load = [0.0] * len(net.capacity)
    chunk = size / algo.nchunksperloop
    for (src, dst, chan), cnt in sorted(counts.items()):
        spread = channel_routes(net, cache, src, dst, chan)
        for links, _lat in spread:
            for i in links:
                load[i] += cnt * chunk / len(spread)
    return max((b / c for b, c in zip(load, net.capacity) if c > 0), default=0.0)


def msccl_lowering(algo: Algo, net: Network, size: float, slice_bytes: float, max_slices: int):
    """An MSCCL file as a contender of :func:`forestcoll.simulate.race.race` (``lowering=``): (program, collective,
    extra fields of its result, bus factor), the program :func:`simulate_msccl` runs."""
    name, bus = msccl_collective(algo, algo.name or "algo.xml")
    return msccl_program(algo, net, size, slice_bytes, max_slices, algo.name or "algo.xml"), name, {}, bus


SLOWER = 1.2  # a simulated time this much above the links' own time is called a serialisation gap


def serialisation_notes(algo: Algo, time_s: float, link_s: float, size: int, iterations: int) -> list[str]:
    """When the simulated time is well above what the links need for the file's bytes (``link_s``): the gap is the
    layout's ordering, each thread block running its steps one after another; the note gives its figures."""
    if link_s <= 0 or time_s <= SLOWER * link_s:
        return []
    steps = max((len(tb.steps) for g in algo.gpus for tb in g.tbs), default=0)
    blocks = max((len(g.tbs) for g in algo.gpus), default=0)
    return [f"the links could move this file's bytes in {link_s * 1e3:.4f} ms ({size / link_s / 1e9:.2f} GB/s "
            f"algbw; the busiest link's bytes plus one latency); it takes {time_s / link_s:.1f}x that because each thread block runs its steps in order (up to "
            f"{steps} steps per block, {blocks} blocks per GPU on {algo.nchannels} channel(s), {iterations} pipeline "
            f"iteration(s) of {algo.nchunksperloop} chunks at this size): a step waits for the one before it and for "
            "its data, so trees sharing a connection wait on each other; the schedule's trees move independently "
            "(`forestcoll simulate SCHEDULE` gives their rate)"]


def msccl_program(algo: Algo, net: Network, size: float, slice_bytes: float, max_slices: int | None,
                  source: str = "algo.xml", slice_cost_s: float = 0.0, routes: dict | None = None) -> ProgramBuilder:
    """The transfers of ``algo`` for a call of ``size`` bytes (nccl-tests size).  ``slice_cost_s`` > 0 (a what-if;
    the default model charges nothing beyond each transfer's latency): after each slice it sends, a block spends that
    long before its next step, and the receiver sees the data that much later (the Simple protocol's fence and
    flag store after every slice, ``postPeer`` in NCCL's ``prims_simple.h``; docs/msccl.md "Runtime buffer").
    ``routes``: the pairs' routes on ``net`` (:func:`channel_routes`' cache), kept between calls: the same routes."""
    algo = by_rank(algo, source)
    if algo.ngpus != len(net.ranks):
        raise UsageError(f"{source} is for {algo.ngpus} GPUs but the topology has {len(net.ranks)} compute nodes")
    chunk = size / algo.nchunksperloop  # nccl-tests size = count x sizeMultiplier x element size
    iterations = slices_for(chunk, slice_bytes, max_slices, rule="ring")
    piece = chunk / iterations
    tbs = {(g.id, tb.id): (tb, compile_tb(tb, g.id, source)) for g in algo.gpus for tb in g.tbs}
    prog = ProgramBuilder()
    add = prog.add  # deps encoded as (transfer << 1) | 0 (sent) or | 1 (delivered), as ProgramBuilder.transfer does
    cost = float(slice_cost_s)
    routes = {} if routes is None else routes
    done: dict[tuple[int, int, int, int], int] = {}  # (gpu, tb, iteration, transmission) -> completion marker
    sends: dict[tuple[int, int, int, int], list[int]] = {}  # (src, dst, channel, iteration) -> transfers in order
    flag_steps = {key: [(i, t.step) for i, t in enumerate(trans) if t.hasdep] for key, (_tb, trans) in tbs.items()}
    # per block, per transmission, iteration-free: its dependencies as (block, index of the transmission that first
    # publishes a flag >= the step waited on, or None: never published), its rank among the block's receives, and
    # for a send its routes and the stream key of each (the routes are the connection's, whatever the iteration)
    plan: dict[tuple[int, int], list[tuple]] = {}
    for key, (tb, trans) in tbs.items():
        g, tid = key
        rows, recvs = [], 0
        for t in trans:
            deps = []
            for d, s in t.deps:
                if (g, d) not in tbs:
                    deps.append((d, False, None))  # raised when the build reaches it, as it always was
                    continue
                deps.append((d, True, next((j for j, step in flag_steps[(g, d)] if step >= s), None)))
            is_send = t.type in SENDS
            spread = channel_routes(net, routes, g, tb.send, tb.chan) if is_send else None
            conn = (g, tb.send, tb.chan)
            streams = [(conn, i) if len(spread) > 1 else conn for i in range(len(spread))] if is_send else None
            rows.append((t, deps, t.type in RECVS, recvs, is_send, spread, streams))
            recvs += t.type in RECVS
        plan[key] = rows
    # the exact count, so that the guard refuses before building: per transmission and iteration, a marker, and
    # for a send one transfer per route (joined by one more marker when several)
    refuse_transfers(iterations * sum(1 + (len(r[5]) + (len(r[5]) != 1) if r[4] else 0) for rows in plan.values() for r in rows))

    # blocks are built iteration by iteration in an order where every dependency already exists:
    # repeat passes over the blocks, advancing each while its dependencies are built
    pos = {key: (0, 0) for key in tbs}  # (iteration, transmission index) to build next
    remaining = sum(len(trans) * iterations for _tb, trans in tbs.values())
    while remaining:
        progress = False
        for key, (tb, trans) in tbs.items():
            g, tid = key
            rows = plan[key]
            while True:
                it, i = pos[key]
                if it == iterations or not trans:
                    break
                t, tdeps, is_recv, recv_idx, is_send, spread, streams = rows[i]
                deps = []
                ok = True
                for d, known, owner in tdeps:
                    if not known:
                        raise MscclError(f"{source}:{t.line}: gpu {g} tb {tid} depends on tb {d}, which does not exist")
                    if owner is not None:
                        m = done.get((g, d, it, owner))
                        if m is None:
                            ok = False
                            break
                        deps.append(m)
                prev = done.get((g, tid, it, i - 1)) if i else (done.get((g, tid, it - 1, len(trans) - 1)) if it else None)
                incoming = None
                if is_recv:
                    lst = sends.get((tb.recv, g, tb.chan, it), [])
                    if recv_idx >= len(lst):  # the k-th receive meets the k-th send, not built yet
                        ok = False
                    else:
                        incoming = lst[recv_idx]
                if not ok:
                    break
                before = [x for x in (prev, *deps) if x is not None]
                if is_send:
                    after = [(x << 1) | 1 for x in before] + ([(incoming << 1) | 1] if incoming is not None else [])
                    nbytes = float(t.cnt * piece / len(spread))
                    ids = [add(links, nbytes, float(lat + slice_cost_s), list(after), streams[j])
                           for j, (links, lat) in enumerate(spread)]
                    out = ids[0] if len(ids) == 1 else add((), 0.0, 0.0, [(x << 1) | 1 for x in ids], None)
                    sends.setdefault((g, tb.send, tb.chan, it), []).append(out)
                    marker = add((), 0.0, cost if slice_cost_s > 0 else 0.0, [x << 1 for x in ids], None)
                else:
                    after = [(x << 1) | 1 for x in before] + ([(incoming << 1) | 1] if incoming is not None else [])
                    marker = add((), 0.0, 0.0, after, None)
                done[(g, tid, it, i)] = marker
                remaining -= 1
                progress = True
                pos[key] = (it, i + 1) if i + 1 < len(trans) else (it + 1, 0)
        if not progress:
            raise MscclError(f"{source}: the steps wait on each other in a cycle; run `forestcoll msccl run` to see where")
    return prog
