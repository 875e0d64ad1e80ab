"""An all-to-all schedule as an MSCCL algorithm (``coll="alltoall"``), checked before it is handed out.

Chunks.  With k chunks per pair (the schedule's common denominator),
``nchunksperloop = N * k``: rank s's input chunks ``t*k .. t*k+k-1`` go to rank
t's output chunks ``s*k .. s*k+k-1``.  Each pair's flows take consecutive
ranges (a flow of fraction p/k takes p chunks; ranges over 71 chunks are cut).

Transfers.  A flow's path is cut at the ranks it relays through into hops
(the runtime routes each hop through switches and NICs itself).  The first
hop sends from the input buffer, the last receives into the output buffer,
a relay receives into its scratch buffer and sends on from there once that
receive is done (a dependency).  Every rank copies its own block
(``cpy``) in a local thread block.

Thread blocks.  One per (peer, direction, channel).  Connection a -> b uses
channel ``((b - a) mod N) mod P`` with P = ceil((N-1)/32) (so no GPU has more
than 32 send or receive blocks on one channel), plus P times the index of the
hop's physical route among the pair's routes (two NIC ports, two spines: the
runtime maps channels to NICs and connections, so distinct routes need
distinct channels), plus P x R times the position of the transfer on its
route modulo S, with S the fewest that keep every block within the runtime's
step limit.  Every block lists its steps by one
key (hop index, flow, piece) and a dependency always points to a smaller key,
so the program cannot deadlock even with one buffered call per connection.
Out-of-place only (in place, a rank would overwrite input it has not sent).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from forestcoll.alltoall.schedule import AlltoallSchedule
from forestcoll.errors import ScheduleError
from forestcoll.msccl.ir import PROTOCOLS, Algo, Gpu, Step, ThreadBlock, write_algo
from forestcoll.rational import format_rational

MAX_CNT = 71
LIMITS = {  # runtime -> (steps per tb, tbs per GPU, channels); ../shared/notes/msccl-xml.md
    "msccl-executor-nccl": (64, 1024, 32),
    "rccl": (64, 64, 128),
}
MAX_DEPID = 127
PEERS_PER_CHANNEL = 32


@dataclass
class AlltoallMscclExport:
    """The exported algorithm (None when it cannot be written), its XML text and the figures users check."""

    ok: bool
    message: str
    algo: Algo | None = None
    text: str = ""
    channels: int = 0
    tbs_per_gpu: int = 0
    steps_per_tb: int = 0
    checks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "message": self.message,
            "coll": "alltoall",
            "ngpus": self.algo.ngpus if self.algo else None,
            "nchunksperloop": self.algo.nchunksperloop if self.algo else None,
            "channels": self.channels,
            "tbs_per_gpu": self.tbs_per_gpu,
            "steps_per_tb": self.steps_per_tb,
            "checks": list(self.checks),
        }


@dataclass(eq=False)
class _Xfer:
    key: tuple[int, int, int]  # (hop, flow, piece)
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
    recv_tb: int = -1
    recv_s: int = -1
    hasdep: bool = False


def _rank_hops(path: tuple[str, ...], rank_of: dict[str, int]) -> list[tuple[int, int, tuple[str, ...]]]:
    """The path cut at its ranks: (from rank, to rank, the physical nodes of that hop)."""
    at = [i for i, x in enumerate(path) if x in rank_of]
    return [(rank_of[path[i]], rank_of[path[j]], tuple(path[i:j + 1])) for i, j in zip(at, at[1:])]


def export_alltoall_msccl(sched: AlltoallSchedule, *, proto: str = "Simple",
                          runtime: str = "msccl-executor-nccl", name: str | None = None, min_bytes: int = 0,
                          max_bytes: int = 0, max_k: int = 64, check: bool = True) -> AlltoallMscclExport:
    """The MSCCL algorithm of ``sched`` (see the module docstring); ``check`` lints the text and runs it in
    the interpreter (one buffered call per connection, race detection) before saying ok."""
    if proto not in PROTOCOLS:
        return AlltoallMscclExport(False, f"unknown protocol {proto!r}; choose {', '.join(PROTOCOLS)}")
    if runtime not in LIMITS:
        return AlltoallMscclExport(False, f"unknown runtime {runtime!r}; choose {', '.join(LIMITS)}")
    step_limit, tb_limit, chan_limit = LIMITS[runtime]
    ranks = list(sched.ranks)
    n = len(ranks)
    rank_of = {r: i for i, r in enumerate(ranks)}
    k = sched.k
    if k > max_k:
        return AlltoallMscclExport(False, f"the schedule cuts each pair into k={k} chunks (more than {max_k}): "
                                          "generate it with fewer chunks per pair (generate_alltoall(..., chunks=K))")
    try:
        xfers, scratch = _transfers(sched, rank_of, k)
    except ScheduleError as exc:
        return AlltoallMscclExport(False, str(exc))
    base = -(-(n - 1) // PEERS_PER_CHANNEL)
    per_route: dict[tuple[int, int], dict[tuple[str, ...], list[_Xfer]]] = defaultdict(lambda: defaultdict(list))
    for x in xfers:
        per_route[(x.src, x.dst)][x.route].append(x)
    routes = max((len(v) for v in per_route.values()), default=1)
    longest = max((len(lst) for v in per_route.values() for lst in v.values()), default=0)
    copies = -(-k // MAX_CNT)
    sub = max(1, -(-longest // step_limit))
    if copies > step_limit:
        return AlltoallMscclExport(False, f"k={k} needs {copies} copy steps in one thread block; {runtime} allows {step_limit}")
    channels = base * routes * sub
    if channels > chan_limit:
        return AlltoallMscclExport(False, f"the schedule needs {channels} channels ({base} for the peers x {routes} routes "
                                          f"between a GPU pair x {sub} for the steps); {runtime} allows {chan_limit}: "
                                          "use fewer chunks per pair")
    for (a, b), by_route in per_route.items():
        for r, (_, lst) in enumerate(sorted(by_route.items())):
            lst.sort(key=lambda x: x.key)
            for i, x in enumerate(lst):
                x.chan = ((b - a) % n) % base + base * (r + routes * (i % sub))
    # thread blocks: receivers first (dependency targets need small ids), then the copy block, then senders
    recv_tbs: dict[int, dict[tuple[int, int], list[_Xfer]]] = defaultdict(lambda: defaultdict(list))
    send_tbs: dict[int, dict[tuple[int, int], list[_Xfer]]] = defaultdict(lambda: defaultdict(list))
    for x in xfers:
        recv_tbs[x.dst][(x.src, x.chan)].append(x)
        send_tbs[x.src][(x.dst, x.chan)].append(x)
    gpus = []
    most_tbs = most_steps = 0
    for g in range(n):
        gpu = Gpu(g, n * k, n * k, scratch[g])
        for (peer, chan), lst in sorted(recv_tbs[g].items()):
            lst.sort(key=lambda x: x.key)
            tb = ThreadBlock(len(gpu.tbs), -1, peer, chan)
            for s, x in enumerate(lst):
                x.recv_tb, x.recv_s = tb.id, s
                tb.steps.append(Step(s, "r", "i", 0, x.dstbuf, x.dstoff, x.cnt))
            gpu.tbs.append(tb)
        if len(gpu.tbs) > MAX_DEPID + 1:
            return AlltoallMscclExport(False, f"gpu {g} needs {len(gpu.tbs)} receiving thread blocks; dependencies can "
                                              f"only name the first {MAX_DEPID + 1} (depid is int8)")
        local = ThreadBlock(len(gpu.tbs), -1, -1, 0)
        for c in range(copies):
            lo = c * MAX_CNT
            cnt = min(MAX_CNT, k - lo)
            local.steps.append(Step(c, "cpy", "i", g * k + lo, "o", g * k + lo, cnt))
        gpu.tbs.append(local)
        gpus.append(gpu)
    for g in range(n):
        gpu = gpus[g]
        for (peer, chan), lst in sorted(send_tbs[g].items()):
            lst.sort(key=lambda x: x.key)
            tb = ThreadBlock(len(gpu.tbs), peer, -1, chan)
            for s, x in enumerate(lst):
                dep = x.after
                if dep is not None:
                    dep.hasdep = True
                tb.steps.append(Step(s, "s", x.srcbuf, x.srcoff, "o", 0, x.cnt,
                                     dep.recv_tb if dep is not None else -1, dep.recv_s if dep is not None else -1))
            gpu.tbs.append(tb)
        most_tbs = max(most_tbs, len(gpu.tbs))
        most_steps = max([most_steps] + [len(tb.steps) for tb in gpu.tbs])
    for x in xfers:  # receive steps that a relay's send waits on publish a flag
        if x.hasdep:
            gpus[x.dst].tbs[x.recv_tb].steps[x.recv_s].hasdep = 1
    if most_tbs > tb_limit:
        return AlltoallMscclExport(False, f"the schedule needs {most_tbs} thread blocks on one GPU; {runtime} allows "
                                          f"{tb_limit}" + ("; use --runtime msccl-executor-nccl (up to 1024)" if runtime != "msccl-executor-nccl" else ""))
    label = name or f"forestcoll_alltoall_k{k}"
    label = re.sub(r"[^A-Za-z0-9_.:-]", "_", label)[:200]
    comments = [f"forestcoll: alltoall for {sched.topology or 'a custom topology'}, {n} ranks, k={k} chunks per pair",
                f"algbw {format_rational(sched.algbw)} GB/s"
                + (f" (optimum {format_rational(sched.bound_algbw)} GB/s)" if sched.bound_algbw is not None else "")
                + f"; rank i runs the schedule's i-th rank ({ranks[0]}, {ranks[1]}, ...)"]
    algo = Algo(name=label, proto=proto, nchannels=channels, nchunksperloop=n * k, ngpus=n, coll="alltoall", inplace=0,
                outofplace=1, min_bytes=min_bytes, max_bytes=max_bytes, gpus=gpus, comments=comments)
    text = write_algo(algo)
    out = AlltoallMscclExport(True, "", algo, text, channels, most_tbs, most_steps)
    if check:
        problems, lines = check_alltoall_msccl(text, runtime)
        out.checks = lines
        if problems:
            out.ok = False
            out.message = f"the exported file fails its check: {problems[0]}"
            return out
    out.message = (f"alltoall MSCCL algorithm: {n} GPUs, nchunksperloop {n * k}, {channels} channel(s), "
                   f"{most_tbs} thread blocks per GPU, <= {most_steps} steps per block"
                   + ("; lint clean and runs right in the interpreter" if check else ""))
    return out


def _transfers(sched: AlltoallSchedule, rank_of: dict[str, int], k: int) -> tuple[list[_Xfer], list[int]]:
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
        for piece, lo in enumerate(range(0, int(count), MAX_CNT)):
            cnt = min(MAX_CNT, int(count) - lo)
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
    for (s, t), used in offset.items():
        if used != k:
            raise ScheduleError(f"pair {s} -> {t}: fractions add up to {used}/{k}, not 1")
    return xfers, scratch


def check_alltoall_msccl(text: str, runtime: str = "msccl-executor-nccl") -> tuple[list[str], list[str]]:
    """Lint ``text`` and run it in the interpreter (out of place, one slot per connection, race detection).
    Returns (problems, one line per run)."""
    from forestcoll.msccl.interpreter import run_algo
    from forestcoll.msccl.ir import parse_algo
    from forestcoll.msccl.lint import lint

    algo = parse_algo(text, "alltoall.xml")
    problems = [f.format("alltoall.xml") for f in lint(algo, text, runtime) if f.severity == "error"]
    lines = []
    if not problems:
        run = run_algo(algo, mode="out-of-place", slots=1, nbytes=None)
        if not run.ok:
            problems.append(run.stuck[0].format() if run.stuck else run.errors[0])
        lines.append(f"out-of-place: {run.summary()} ({run.transmissions} transmissions, {run.seconds:.2f} s, one slot per connection)")
    return problems, lines


__all__ = ["AlltoallMscclExport", "check_alltoall_msccl", "export_alltoall_msccl"]

