"""An all-to-all schedule as an MSCCL algorithm (``coll="alltoall"``), within a runtime's limits.

Chunks.  With k chunks per pair (the schedule's common denominator),
``nchunksperloop = N * k``: rank s's input chunks ``t*k .. t*k+k-1`` go to rank
t's output chunks ``s*k .. s*k+k-1``.  Each pair's flows take consecutive
ranges (a flow of fraction p/k takes p chunks; ranges over 71 chunks are cut).

Transfers.  A flow's path is cut at the ranks it relays through into hops
(the runtime routes each hop through switches and NICs itself).  The first
hop sends from the input buffer, the last receives into the output buffer,
a relay receives into its scratch buffer and sends on from there once that
receive is done (a dependency).  Every rank copies its own block (``cpy``).

Channels.  Connection a -> b uses ``r + R * (((b - a) mod N) mod P + P * (i mod S))``:
r is the index of the hop's physical route among the pair's R routes (two NIC
ports, two spines: the runtime maps channels to NICs and connections, so
distinct routes get distinct channels, and channel mod R names the route),
P = ceil((N-1)/32) keeps every GPU within 32 peers per channel and direction,
and S, the fewest that keep every block within the runtime's step limit,
spreads the i-th transfer of a connection.

Thread blocks.  One per (peer, direction, channel), plus one that copies; when
that is more than the runtime allows (RCCL: 64 per GPU) or more than a GPU can
keep resident at once (:data:`RESIDENT_TBS`, an A100's 108 SMs: the kernel's
blocks wait on one another, so all must run together), each block sends to
one peer and receives from one peer on the same channel (the peer it sends to
when it can, as RCCL's own all-to-all files do) and the copy joins the first
block, which about halves the count; beyond that the export is refused, naming
the limit.  Every block lists its steps by *level* (hop, position of the
transfer on its connection), a block's send before its receive at the same
level, and a dependency always points to a lower level (an earlier hop).  By
induction over the levels every step completes even with one buffered call
per connection: a send at a level finds its slot free (the connection's
previous transfer, one level lower, was received) and waits on nothing else;
then every receive at that level has its data.  Out-of-place only (in place, a
rank would overwrite input it has not sent yet).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from forestcoll.alltoall.schedule import AlltoallSchedule
from forestcoll.errors import ScheduleError
from forestcoll.msccl.advice import other_runtime
from forestcoll.msccl.export import ExportError, ExportOptions, ExportResult
from forestcoll.msccl.ir import Algo, Gpu, Step, ThreadBlock
from forestcoll.rational import format_rational

__all__ = ["DEFAULT_MAX_K", "export_alltoall_msccl"]

RESIDENT_TBS = 108  # an A100's SMs: a kernel's blocks must all run at once, so blocks share peers above this
DEFAULT_MAX_K = 64  # chunks per pair above which the export is refused (generate with --k K)


@dataclass(eq=False)
class _Xfer:
    key: tuple[int, ...]  # (hop, flow, piece); the block order key is set once channels are known
    src: int  # rank numbers
    dst: int
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    after: _Xfer | None  # the receive on src this send waits for (relays)
    route: tuple[str, ...] = ()  # the physical nodes of this hop (switches, NICs) between src and dst
    chan: int = 0
    order: tuple[int, int] = (0, 0)  # level: (hop, position on its connection)
    recv_tb: int = -1
    recv_s: int = -1


def _rank_hops(path: tuple[str, ...], rank_of: dict[str, int]) -> list[tuple[int, int, tuple[str, ...]]]:
    """The path cut at its ranks: (from rank, to rank, the physical nodes of that hop)."""
    at = [i for i, x in enumerate(path) if x in rank_of]
    return [(rank_of[path[i]], rank_of[path[j]], tuple(path[i:j + 1])) for i, j in zip(at, at[1:])]


def _refuse_options(opts: ExportOptions) -> None:
    if opts.instances != 1:
        raise ExportError("--instances applies to tree schedules; an all-to-all file already spreads its peers over "
                          "channels (use --channels C for more)")
    if not opts.outofplace:
        raise ExportError("an all-to-all runs out of place only (in place, a rank would overwrite data it has not sent)")


def export_alltoall_msccl(sched: AlltoallSchedule, options: ExportOptions | None = None, *, max_k: int = DEFAULT_MAX_K,
                          **kwargs: Any) -> ExportResult:
    """The MSCCL algorithm of ``sched`` (see the module docstring) within ``options.runtime``'s limits;
    :class:`ExportError` (one line naming the limit and what to do) when it cannot be."""
    opts = options or ExportOptions(**kwargs)
    limits = opts.check()
    _refuse_options(opts)
    if opts.max_cnt is None:  # the tree lowering's automatic cut; all-to-all steps move whole pieces up to the cap
        opts = replace(opts, max_cnt=71)
    ranks = list(sched.ranks)
    n = len(ranks)
    rank_of = {r: i for i, r in enumerate(ranks)}
    k = sched.k
    if k > max_k:
        raise ExportError(f"the schedule cuts each pair into k={k} chunks (more than {max_k}): generate it with fewer "
                          "chunks per pair (--k K, or the default automatic choice)")
    try:
        xfers, scratch = _transfers(sched, rank_of, k, opts.max_cnt)
    except ScheduleError as exc:
        raise ExportError(str(exc)) from None
    base = -(-(n - 1) // limits.tbs_per_channel_direction)
    per_route: dict[tuple[int, int], dict[tuple[str, ...], list[_Xfer]]] = defaultdict(lambda: defaultdict(list))
    for x in xfers:
        per_route[(x.src, x.dst)][x.route].append(x)
    routes = max((len(v) for v in per_route.values()), default=1)
    copies = -(-k // opts.max_cnt)
    if copies > limits.steps_per_tb:
        raise ExportError(f"k={k} needs {copies} copy steps in one thread block; {limits.name} allows "
                          f"{limits.steps_per_tb}: use a smaller --k")
    want = -(-opts.channels // (base * routes)) if opts.channels else 1
    most = limits.channels // (base * routes)
    if most < want:
        raise ExportError(f"the schedule needs {base * routes * want} channels ({base} for the peers x {routes} routes "
                          f"between a GPU pair); {limits.name} allows {limits.channels}: use fewer chunks per pair (--k)")
    merged = False
    layout = None
    resident = opts.resident or RESIDENT_TBS
    for sub in range(want, most + 1):
        _assign_channels(per_route, n, base, routes, sub)
        for merge in (False, True):
            tbs = _blocks(xfers, n, copies, merge)
            most_tbs = max(len(t) for t in tbs)
            most_steps = max(len(steps) for t in tbs for _, _, _, steps in t)
            if most_steps > limits.steps_per_tb:
                break  # more channels (sub) spread the steps
            if most_tbs <= min(limits.tbs_per_gpu, resident) or (merge and most_tbs <= limits.tbs_per_gpu):
                layout, merged = tbs, merge
                break
        if layout is not None or most_steps <= limits.steps_per_tb:
            break  # found, or the blocks (not their steps) are over the limit: more channels would only add blocks
    channels = base * routes * sub
    if layout is None:
        if most_steps > limits.steps_per_tb:
            raise ExportError(f"a thread block needs {most_steps} steps even with {channels} channels; {limits.name} allows "
                              f"{limits.steps_per_tb}: use fewer chunks per pair (--k)")
        way = other_runtime(limits.name, opts.vendor) or "a schedule with fewer peers per GPU"
        peers = max(len({x.dst for x in xfers if x.src == g} | {x.src for x in xfers if x.dst == g}) for g in range(n))
        raise ExportError(f"a GPU exchanges data with {peers} peers, which takes {most_tbs} thread blocks even with "
                          f"sends and receives sharing blocks; {limits.name} allows {limits.tbs_per_gpu} per GPU: "
                          f"use {way}")
    gpus = _emit(layout, xfers, n, k, scratch, opts.max_cnt)
    recv_tbs = max(sum(1 for tb in g.tbs if tb.recv >= 0) for g in gpus)
    if recv_tbs > limits.max_depid + 1:
        raise ExportError(f"a GPU needs {recv_tbs} receiving thread blocks; dependencies can only name the first "
                          f"{limits.max_depid + 1} (depid is int8)")
    label = opts.name or f"forestcoll_alltoall_k{k}"
    label = re.sub(r"[^A-Za-z0-9_.:-]", "_", label)[:200]
    comments = [f"forestcoll: alltoall for {sched.topology or 'a custom topology'}, {n} ranks, k={k} chunks per pair",
                f"algbw {format_rational(sched.algbw)} GB/s"
                + (f" (optimum {format_rational(sched.bound_algbw)} GB/s)" if sched.bound_algbw is not None else "")
                + f"; rank i runs the schedule's i-th rank ({ranks[0]}, {ranks[1]}, ...)"]
    algo = Algo(name=label, proto=opts.proto, nchannels=channels, nchunksperloop=n * k, ngpus=n, coll="alltoall",
                inplace=0, outofplace=1, min_bytes=opts.min_bytes, max_bytes=opts.max_bytes, gpus=gpus, comments=comments)
    most_tbs = max(len(g.tbs) for g in gpus)
    most_steps = max(len(tb.steps) for g in gpus for tb in g.tbs)
    total = sum(len(tb.steps) for g in gpus for tb in g.tbs)
    notes = list(opts.notes)
    if opts.inplace:
        notes.append("out-of-place only: an all-to-all cannot run in place")
    if merged:
        notes.append("sends and receives share thread blocks (one peer each way per block) to keep within "
                     f"{min(limits.tbs_per_gpu, resident)} thread blocks per GPU ({limits.name}'s limit, or the "
                     f"blocks {'the GPU' if opts.resident else 'an A100'} keeps resident)")
    if most_tbs > resident:
        notes.append(f"{most_tbs} thread blocks per GPU even with sends and receives sharing blocks: more than "
                     f"{'the GPU' if opts.resident else 'an A100'} has SMs / CUs ({resident}), and all must be "
                     "resident at once (fine on GPUs with more)")
    return ExportResult(algo, channels, most_tbs, most_steps, total, limits, notes)


def _transfers(sched: AlltoallSchedule, rank_of: dict[str, int], k: int, max_cnt: int) -> tuple[list[_Xfer], list[int]]:
    """Every hop of every flow piece as a transfer, and the scratch chunks each GPU needs."""
    n = len(rank_of)
    offset: dict[tuple[int, int], int] = defaultdict(int)
    scratch = [0] * n
    xfers: list[_Xfer] = []
    for fid, f in enumerate(sched.flows):
        if f.src not in rank_of or f.dst not in rank_of:
            raise ScheduleError(f"flow {fid}: {f.src} -> {f.dst} names a node that is not a rank")
        s, t = rank_of[f.src], rank_of[f.dst]
        count = f.fraction * k
        if count.denominator != 1:
            raise ScheduleError(f"flow {fid}: fraction {format_rational(f.fraction)} is not a whole number of 1/{k} chunks")
        hops = _rank_hops(f.path, rank_of)
        start = offset[(s, t)]
        offset[(s, t)] += int(count)
        if offset[(s, t)] > k:
            raise ScheduleError(f"pair {f.src} -> {f.dst}: fractions add up to more than 1")
        for piece, lo in enumerate(range(0, int(count), max_cnt)):
            cnt = min(max_cnt, int(count) - lo)
            prev: _Xfer | None = None
            src_buf, src_off = "i", t * k + start + lo
            for h, (a, b, route) in enumerate(hops):
                last = h == len(hops) - 1
                if last:
                    dst_buf, dst_off = "o", s * k + start + lo
                else:
                    dst_buf, dst_off = "s", scratch[b]
                    scratch[b] += cnt
                x = _Xfer((h, fid, piece), a, b, src_buf, src_off, dst_buf, dst_off, cnt, prev, route)
                xfers.append(x)
                prev = x
                src_buf, src_off = dst_buf, dst_off
    names = list(rank_of)
    for s in range(n):
        for t in range(n):
            if s != t and offset.get((s, t), 0) != k:
                raise ScheduleError(f"pair {names[s]} -> {names[t]}: fractions add up to {offset.get((s, t), 0)}/{k}, "
                                    "not 1")
    return xfers, scratch


def _assign_channels(per_route: dict, n: int, base: int, routes: int, sub: int) -> None:
    """Every transfer's channel (see the module docstring) and its order key within its thread block."""
    for (a, b), by_route in per_route.items():
        for r, (_, lst) in enumerate(sorted(by_route.items())):
            lst.sort(key=lambda x: x.key)
            for i, x in enumerate(lst):
                x.chan = r + routes * (((b - a) % n) % base + base * (i % sub))
    conns: dict[tuple[int, int, int], list[_Xfer]] = defaultdict(list)
    for by_route in per_route.values():
        for lst in by_route.values():
            for x in lst:
                conns[(x.src, x.dst, x.chan)].append(x)
    for lst in conns.values():
        lst.sort(key=lambda x: x.key)
        for i, x in enumerate(lst):
            x.order = (x.key[0], i)


def _blocks(xfers: list[_Xfer], n: int, copies: int, merge: bool) -> list[list[tuple[int, int, int, list]]]:
    """Per GPU, its thread blocks as (send peer, recv peer, channel, steps) with steps ("s"|"r"|"cpy", item):
    one per (peer, direction, channel) and a copy block, or with ``merge`` one send and one receive connection
    per block (the same peer where possible) and the copy in the first block."""
    sends: list[dict[tuple[int, int], list[_Xfer]]] = [defaultdict(list) for _ in range(n)]
    recvs: list[dict[tuple[int, int], list[_Xfer]]] = [defaultdict(list) for _ in range(n)]
    for x in xfers:
        sends[x.src][(x.dst, x.chan)].append(x)
        recvs[x.dst][(x.src, x.chan)].append(x)
    out = []
    for g in range(n):
        copy = [("cpy", c) for c in range(copies)]
        if not merge:
            tbs = [(-1, peer, chan, [("r", x) for x in sorted(lst, key=lambda x: x.order)])
                   for (peer, chan), lst in sorted(recvs[g].items())]
            tbs.append((-1, -1, 0, copy))
            tbs += [(peer, -1, chan, [("s", x) for x in sorted(lst, key=lambda x: x.order)])
                    for (peer, chan), lst in sorted(sends[g].items())]
            out.append(tbs)
            continue
        pairs: list[tuple[tuple[int, int] | None, tuple[int, int] | None]] = []
        left_send = set(sends[g])
        for key in sorted(recvs[g]):
            if key in left_send:  # same peer, same channel
                pairs.append((key, key))
                left_send.discard(key)
            else:
                pairs.append((None, key))
        by_chan: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for key in sorted(left_send):
            by_chan[key[1]].append(key)
        filled = []
        for s_key, r_key in pairs:
            if s_key is None and r_key is not None and by_chan[r_key[1]]:
                s_key = by_chan[r_key[1]].pop(0)
            filled.append((s_key, r_key))
        filled += [(key, None) for chan in sorted(by_chan) for key in by_chan[chan]]
        tbs = []
        for s_key, r_key in filled:
            items = [("s", x) for x in sends[g][s_key]] if s_key else []
            items += [("r", x) for x in recvs[g][r_key]] if r_key else []
            items.sort(key=lambda it: (it[1].order, it[0] == "r"))  # at one level: the send, then the receive
            chan = (s_key or r_key)[1]  # type: ignore[index]
            tbs.append((s_key[0] if s_key else -1, r_key[0] if r_key else -1, chan, items))
        if tbs:
            tbs[0] = (tbs[0][0], tbs[0][1], tbs[0][2], copy + tbs[0][3])
        else:
            tbs.append((-1, -1, 0, copy))
        out.append(tbs)
    return out


def _emit(layout: list[list[tuple[int, int, int, list]]], xfers: list[_Xfer], n: int, k: int, scratch: list[int],
          max_cnt: int) -> list[Gpu]:
    """The GPUs of the file: receiving blocks get the low ids (dependency targets must fit depid in int8); a
    relay's send names its receive when that runs in another block (in the same block, order suffices)."""
    gpus = []
    sent: dict[int, tuple[int, int]] = {}  # id(transfer) -> (tb, step) of its send
    for g in range(n):
        gpu = Gpu(g, n * k, n * k, scratch[g])
        ordered = sorted(layout[g], key=lambda t: (t[1] < 0, t[0] >= 0 and t[1] < 0))
        for send, recv, chan, items in ordered:
            tb = ThreadBlock(len(gpu.tbs), send, recv, chan)
            for s, (kind, x) in enumerate(items):
                if kind == "r":
                    x.recv_tb, x.recv_s = tb.id, s
                    tb.steps.append(Step(s, "r", "i", 0, x.dstbuf, x.dstoff, x.cnt))
                elif kind == "cpy":
                    lo = x * max_cnt
                    tb.steps.append(Step(s, "cpy", "i", g * k + lo, "o", g * k + lo, min(max_cnt, k - lo)))
                else:
                    sent[id(x)] = (tb.id, s)
                    tb.steps.append(Step(s, "s", x.srcbuf, x.srcoff, "o", 0, x.cnt))
            gpu.tbs.append(tb)
        gpus.append(gpu)
    for x in xfers:
        dep = x.after
        if dep is None:
            continue
        tb, s = sent[id(x)]
        if dep.recv_tb != tb:
            step = gpus[x.src].tbs[tb].steps[s]
            step.depid, step.deps = dep.recv_tb, dep.recv_s
            gpus[dep.dst].tbs[dep.recv_tb].steps[dep.recv_s].hasdep = 1
    return gpus
