"""MSCCL++ execution plans as simulator programs: thread blocks run their operations in order.

Every thread block is sequential: an operation starts when the previous one of
its block is done (a pipeline repeats its inner operations once per iteration,
each moving its share of the iteration's bytes).  What an operation costs:

* memory-channel ``put`` (and the remote writes of ``res`` / ``rres``, packet
  puts): the block's threads push each destination in turn over the route
  between the two GPUs; the block goes on when the last byte has left;
* port-channel ``put``: handed to the proxy; transfers of one channel go one
  after the other, the block goes on at once (``pwsf`` / ``flush`` wait for them:
  through the NICs until the peer's acknowledgement is back, a zero-byte message on
  the reverse route after the channel's last put and signal landed; over CUDA IPC
  until they landed);
* ``get``, ``rre`` / ``rres`` (remote reads): transfers from each peer at once;
  the block waits for the data;
* ``signal``: a latency-only message; a memory-channel signal leaves after the
  block's earlier puts have landed (release order), a port-channel signal behind
  the channel's earlier puts: through the NICs right after their last byte has left
  (the proxy posts it on the same queue pair without waiting), over CUDA IPC after they
  landed (one stream); ``wait`` completes when its signal (the k-th wait
  on a channel meets the k-th signal) has arrived; semaphores and barriers order
  blocks of one GPU the same way;
* packet reads (``upkt``, ``rppkt``, ``respkt``, ...) wait for the packets they
  read to have landed; local copies and reductions take no time (the model
  charges links only).

Rank i of the plan is the topology's i-th compute node.  Routes follow the
channel's transport as the executor picks it (1f5f065, ``executor.cc``): a
memory channel is CUDA IPC (:meth:`Network.route`, which stays inside the box),
a port channel between boxes (IPC domains) goes through the NICs, and a port
channel inside a box is CUDA IPC too, unless ``port_transport="nic"``: then
every port channel takes the shortest route that leaves the box (what an
executor with one IPC domain per GPU would do; docs/mscclpp.md).  A call of
``size`` bytes is the executor's size (the output for allgather, the input
otherwise: the nccl-tests size).  What the operations move (routes, bytes, remote GPUs, channels) is read by
:class:`forestcoll.simulate.plan_reader.PlanReader`, which the bound of :mod:`forestcoll.simulate.plan_bound` shares.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from forestcoll import collectives
from forestcoll.errors import UsageError
from forestcoll.mscclpp.plan import BufRef, Op, Plan, PlanError
from forestcoll.mscclpp.semantics import buffer_sizes, check_message_size
from forestcoll.schedule import Schedule
from forestcoll.simulate.core import SimResult, simulate_program
from forestcoll.simulate.engine import ProgramBuilder, refuse_transfers
from forestcoll.simulate.network import Network
from forestcoll.simulate.plan_reader import PlanBlock, PlanReader


def mscclpp_collective(plan: Plan, source: str = "plan") -> tuple[str, Fraction]:
    """The collective a plan runs (forestcoll's name) and its nccl-tests bus factor; UsageError when unknown."""
    n = len(plan.gpus)
    coll = collectives.from_mscclpp(plan.collective)
    if coll is not None:
        return coll.name, coll.bus_factor(n)
    if plan.collective == "alltoall":  # not in forestcoll's vocabulary yet; nccl-tests counts (N-1)/N of it
        return "alltoall", Fraction(n - 1, n)
    raise UsageError(f"{source}: no simulator model for collective {plan.collective!r}")


class _Builder(PlanReader):
    """A plan's call as a simulator program (:meth:`build`), from what :class:`PlanReader` reads of it."""

    def __init__(self, plan: Plan, net: Network, size: float, source: str, port_transport: str = "executor") -> None:
        super().__init__(plan, net, size, source, port_transport)
        self.prog = ProgramBuilder()
        self.tokens: dict[tuple[int, str, int], list[int]] = defaultdict(list)
        self.consumed: dict[tuple[int, str, int], int] = defaultdict(int)
        self.port_last: dict[tuple[int, int], int] = {}
        self.port_signal_last: dict[tuple[int, int], int] = {}  # (gpu, channel) -> its last signal's transfer
        self.sem_rel: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.sem_acq: dict[tuple[int, int], int] = defaultdict(int)
        self.sem_init = {(g, s): v for g, gp in enumerate(plan.gpus) for s, v in enumerate(gp.semaphores or ())}
        self.barrier: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.packets: dict[int, list[tuple[float, float, int]]] = defaultdict(list)  # gpu -> (lo, hi, transfer)
        self.transfers = 0
        self.sent_of: dict[int, int] = {}  # a transfer spread over several routes: its delivered marker -> sent marker

    def send(self, a: int, b: int, nbytes: float, sent: list, delivered: list, stream: Any,
             ctype: str | None = None) -> int:
        """A transfer of ``nbytes`` from rank a to rank b after the ``sent`` / ``delivered`` events; its id.  Bytes
        over several routes (:meth:`PlanReader.spread`) go as one transfer per route, each its share, and the id is
        a marker of their delivery (:attr:`sent_of` maps it to the marker of their sending)."""
        nbytes = float(max(nbytes, 0.0))
        routes = self.spread(a, b, ctype) if nbytes > 0 else [self.route(a, b, ctype)]
        # ProgramBuilder.transfer's events, without its checks: every id here is one the builder returned before
        sent_of = self.sent_of
        deps = [sent_of.get(d, d) << 1 for d in sent if d is not None] + [(d << 1) | 1 for d in delivered if d is not None]
        self.transfers += len(routes)
        left, landed = self.prog.spread(routes, nbytes, deps, stream)
        if left != landed:
            sent_of[landed] = left
        return landed

    def over_nic(self, a: int, b: int) -> bool:
        """Whether a port channel from rank ``a`` to rank ``b`` runs through the NICs (an IB connection), not CUDA
        IPC: between boxes, or every port channel with ``port_transport="nic"``."""
        net = self.net
        return self.port_nic or net.box[net.index[net.ranks[a]]] != net.box[net.index[net.ranks[b]]]

    def port_signal(self, g: int, peer: int, key: tuple[int, int], after: list[int]) -> int:
        """A port-channel signal from ``g`` to ``peer`` on channel ``key`` once ``after`` happened, behind the
        channel's last put: through the NICs when that put's last byte has left (the proxy posts the signal on the
        same queue pair at once; RC delivers in order), over CUDA IPC when it has landed (one stream)."""
        q = self.port_last.get(key)
        nic = q is not None and self.over_nic(g, peer)
        tok = self.send(g, peer, 0.0, [q] if nic else [], after + ([q] if q is not None and not nic else []), None,
                        "port")
        self.port_signal_last[key] = tok
        return tok

    def port_flushed(self, g: int, peer: int, key: tuple[int, int]) -> int | None:
        """When a flush of channel ``key`` (``g`` to ``peer``) returns: its last put and signal have completed;
        through the NICs that is their acknowledgement back (a zero-byte message from ``peer`` after they landed),
        over CUDA IPC their landing; None when the channel carried nothing."""
        done = [x for x in (self.port_last.get(key), self.port_signal_last.get(key)) if x is not None]
        if not done:
            return None
        if self.over_nic(g, peer):
            return self.send(peer, g, 0.0, [], done, None, "port")
        return self.marker(delivered=done)

    def marker(self, sent: list = (), delivered: list = ()) -> int:
        """An event after the given ones (the one event itself when there is a single delivered one)."""
        delivered = list(dict.fromkeys(delivered))
        if not sent and len(delivered) == 1:
            return delivered[0]
        sent_of = self.sent_of
        return self.prog.add((), 0.0, 0.0, [sent_of.get(d, d) << 1 for d in sent if d is not None]
                             + [(d << 1) | 1 for d in delivered if d is not None], None)

    # -- building -------------------------------------------------------------------------------------

    def build(self) -> ProgramBuilder:
        refuse_transfers(self.least_transfers())  # before building: never above the real count
        remaining = True
        while remaining:
            remaining = False
            progress = False
            for b in self.blocks:
                while not b.done:
                    if not self._advance(b):
                        break
                    progress = True
                if not b.done:
                    remaining = True
            if remaining and not progress:
                stuck = next(x for x in self.blocks if not x.done)
                raise PlanError(f"{self.source}: the plan's thread blocks wait on each other in a cycle (first: gpu "
                                f"{stuck.gpu} tb {stuck.pos}); run the interpreter to see where")
        return self.prog

    def least_transfers(self) -> int:
        """A count of transfers the program is sure to build (never above :meth:`build`'s): the sends each
        operation makes whatever the run (one per destination or read; a memory put's consecutive destinations on
        one GPU may share one, so one) and the marker after them, times the enclosing pipelines' iterations."""
        total = 0
        for b in self.blocks:
            times = [1]
            for ins in b.prog:
                if ins[0] == "pipe":
                    times.append(times[-1] * ins[1])
                elif ins[0] == "end":
                    times.pop()
                else:
                    total += times[-1] * _least_sends(ins[1])
        return total

    def _advance(self, b: PlanBlock) -> bool:
        """Build the block's next operation; False if it must wait for another block's to be built first."""
        while True:
            if b.pc >= len(b.prog):
                b.done = True
                return True
            ins = b.prog[b.pc]
            if ins[0] == "pipe":
                if ins[1] == 0:
                    b.pc += ins[3] + 2
                    continue
                b.frames.append([b.pc + 1, 0, ins[1], ins[2]])
                b.pc += 1
                continue
            if ins[0] == "end":
                fr = b.frames[-1]
                fr[1] += 1
                if fr[1] < fr[2]:
                    b.pc = fr[0]
                else:
                    b.frames.pop()
                    b.pc += 1
                continue
            op, inner = ins[1], ins[2]
            off = unit = None
            if inner and b.frames:
                fr = b.frames[-1]
                off, unit = fr[1] * fr[3], fr[3]
            done = self._op(b, op, off, unit)
            if done is None:
                return False
            b.prev = done
            b.pc += 1
            return True

    def _op(self, b: PlanBlock, op: Op, off: float | None, unit: float | None) -> int | None:
        name = op.name
        prev = [b.prev] if b.prev is not None else []
        g = b.gpu
        stream = (g, b.pos, id(op))
        if name == "nop":
            return self.marker(delivered=prev)
        if name in ("signal", "rlxsignal"):
            ctype = op.channel_type
            if ctype not in ("memory", "port"):
                return self.marker(delivered=prev)
            if ctype == "memory" and name == "signal":
                # release: the block's earlier writes land before the signal leaves (the block waits for them)
                fence = self.marker(delivered=prev + b.pending)
                b.pending = []
            else:
                fence = self.marker(delivered=prev)
            for cid in op.channel_ids or ():
                end = self.channel_end(b, ctype, cid)
                if ctype == "port":  # behind the channel's puts (one queue per channel)
                    tok = self.port_signal(g, end.peer, (g, end.index), [fence])
                else:
                    tok = self.send(g, end.peer, 0.0, [], [fence], None, ctype)
                if end.partner is not None:
                    self.tokens[(end.peer, ctype, end.partner)].append(tok)
            return fence
        if name in ("wait", "rlxwait"):
            ctype = op.channel_type
            if ctype not in ("memory", "port"):
                return self.marker(delivered=prev)
            need: dict[tuple, int] = defaultdict(int)
            for cid in op.channel_ids or ():
                end = self.channel_end(b, ctype, cid)
                need[(g, ctype, end.index)] += 1
            toks = []
            for key, k in need.items():
                have = self.tokens.get(key, [])
                if len(have) < self.consumed[key] + k:
                    return None
                toks.extend(have[self.consumed[key]:self.consumed[key] + k])
            for key, k in need.items():
                self.consumed[key] += k
            return self.marker(delivered=prev + toks)
        if name == "flush":
            lasts = []
            for cid in (op.channel_ids or ())[:len(op.dst or ())]:
                end = self.channel_end(b, "port", cid)
                lasts.append(self.port_flushed(g, end.peer, (g, end.index)))
            return self.marker(delivered=prev + [x for x in lasts if x is not None])
        if name == "sem_release":
            m = self.marker(delivered=prev)
            for s in op.semaphore_ids or ():
                self.sem_rel[(g, s)].append(m)
            return m
        if name == "sem_acquire":
            deps = []
            for s in op.semaphore_ids or ():
                key = (g, s)
                needed = self.sem_acq[key] + 1 - self.sem_init.get(key, 0)
                if needed >= 1:
                    if len(self.sem_rel[key]) < needed:
                        return None
                    deps.append(self.sem_rel[key][needed - 1])
            for s in op.semaphore_ids or ():
                self.sem_acq[(g, s)] += 1
            return self.marker(delivered=prev + deps)
        if name == "barrier":
            key = (g, op.barrier_id or 0)
            nb = op.num_threadblocks or 1
            arr = self.barrier[key]
            mine = [i for i, x in enumerate(arr) if x[0] is b and x[1] == b.seq]
            if not mine:
                arr.append((b, b.seq, self.marker(delivered=prev)))
                mine = [len(arr) - 1]
            gen = mine[0] // nb
            group = arr[gen * nb:(gen + 1) * nb]
            if len(group) < nb:
                return None
            b.seq += 1
            return self.marker(delivered=[x[2] for x in group])
        return self._data(b, op, off, unit, prev, stream)

    def _packet_deps(self, gpu: int, lo: float, hi: float) -> list[int] | None:
        """Transfers that wrote packets covering [lo, hi) of ``gpu``'s scratch, or None if not all are built."""
        if hi <= lo:
            return []
        parts = sorted((a, c, t) for a, c, t in self.packets.get(gpu, []) if c > lo and a < hi)
        covered, deps = lo, []
        for a, c, t in parts:
            if a > covered + 1e-9:
                return None
            covered = max(covered, c)
            deps.append(t)
        return deps if covered >= hi - 1e-9 else None

    def _data(self, b: PlanBlock, op: Op, off, unit, prev: list[int], stream: Any) -> int | None:
        name = op.name
        g = b.gpu
        src, dst = op.src or (), op.dst or ()
        ctype = op.channel_type
        # packet reads first: the operation waits for the packets it reads
        pkt_deps: list[int] = []
        if name in ("upkt", "rppkt"):
            refs = src[:1]
        elif name in ("respkt", "repkt", "recpkt", "recspkt"):
            refs = src[1:]
        else:
            refs = ()
        for ref in refs:
            lo, hi = self.span(ref, op)
            deps = self._packet_deps(g, lo, hi)
            if deps is None:
                return None
            pkt_deps.extend(deps)
        if name in ("put", "pws", "pwsf", "ppkt", "rppkt"):
            factor = 2.0 if name in ("ppkt", "rppkt") else 1.0
            start = prev + pkt_deps
            if ctype == "memory":
                # the threads write one destination after the other; consecutive ones to the same GPU make one
                # transfer (same route, back to back)
                runs: list[list] = []
                for i, d in enumerate(dst):
                    peer = self.remote_gpu(b, d, "memory")
                    s = src[i] if i < len(src) else src[0]
                    nb = self.nbytes(d if name != "ppkt" else s, op, off, unit) * factor
                    if runs and runs[-1][0] == peer:
                        runs[-1][1] += nb
                        runs[-1][2].append(d)
                    else:
                        runs.append([peer, nb, [d], i])
                last_sent: list[int] = []
                after = start
                for peer, nb, refs, i in runs:
                    t = self.send(g, peer, nb, last_sent, after, (stream, i))
                    b.pending.append(t)
                    if factor == 2.0:
                        for d in refs:
                            self.packets[peer].append((*self.span(d, op), t))
                    last_sent, after = [t], []
                return self.marker(sent=last_sent, delivered=start)
            issued: list[int | None] = []
            for i, d in enumerate(dst):
                cids = op.channel_ids or ()
                end = self.channel_end(b, "port", cids[i]) if i < len(cids) else None
                peer = self.remote_gpu(b, d, "port")
                nb = self.nbytes(d if name != "ppkt" else src[min(i, len(src) - 1)], op, off, unit) * factor
                q = self.port_last.get((g, end.index)) if end is not None else None
                t = self.send(g, peer, nb, [q] if q is not None else [], start, (stream, i), "port")
                if end is not None:
                    self.port_last[(g, end.index)] = t
                    if name in ("pws", "pwsf") and end.partner is not None:
                        self.tokens[(end.peer, "port", end.partner)].append(
                            self.port_signal(g, end.peer, (g, end.index), []))
                if factor == 2.0:
                    self.packets[peer].append((*self.span(d, op), t))
                issued.append(self.port_flushed(g, end.peer, (g, end.index)) if name == "pwsf" and end is not None
                              else t)
            if name == "pwsf":
                return self.marker(delivered=start + [x for x in issued if x is not None])
            return self.marker(delivered=start)
        if name in ("get", "rre", "rres"):
            reads = src if name == "get" else src[1:]
            ts = []
            for i, r in enumerate(reads):
                peer = self.remote_gpu(b, r, "memory" if name == "get" else ctype)
                nb = self.nbytes(r if name == "get" else src[0], op, off, unit)
                ts.append(self.send(peer, g, nb, [], prev, (stream, "r", i)))
            done = self.marker(delivered=prev + ts)
            if name == "rres":
                return self._remote_writes(b, op, dst[1:], src[0], off, unit, [done], stream)
            return done
        if name == "res":
            return self._remote_writes(b, op, dst[1:], src[0], off, unit, prev, stream)
        if name in ("respkt", "recspkt"):
            first = 1 if name == "respkt" else 2
            start = prev + pkt_deps
            last_sent: list[int] = []
            after = start
            for i, d in enumerate(dst[first:]):
                peer = self.remote_gpu(b, d, ctype)
                t = self.send(g, peer, 2.0 * self.nbytes(src[0], op, None, None), last_sent, after, (stream, i), ctype)
                self.packets[peer].append((*self.span(d, op), t))
                last_sent, after = [t], []
            done = self.marker(sent=last_sent, delivered=start)
            if name == "recspkt" and len(dst) > 1:
                self.packets[g].append((*self.span(dst[1], op), done))
            return done
        if name in ("cpkt", "recpkt"):
            done = self.marker(delivered=prev + pkt_deps)
            target = dst[0] if name == "cpkt" else (dst[1] if len(dst) > 1 else None)
            if target is not None and target.type == "s":
                self.packets[g].append((*self.span(target, op), done))
            return done
        if name in ("glres", "gstore", "gstorepkt"):
            groups = self.w.switches.get(g, [])
            nv = self.w.tb_channels[(g, b.pos)]["switch"]
            ranks: tuple[int, ...] = ()
            if dst and dst[0].switch_channel_id is not None and dst[0].switch_channel_id < len(nv):
                ranks = groups[nv[dst[0].switch_channel_id]].ranks
            nb = self.nbytes(src[0] if src else dst[0], op, off, unit)
            reads = [self.send(r, g, nb, [], prev + pkt_deps, (stream, "r", r)) for r in ranks if r != g] \
                if name == "glres" else []
            mid = self.marker(delivered=prev + pkt_deps + reads)
            writes = [self.send(g, r, nb, [], [mid], (stream, "w", r)) for r in ranks if r != g]
            return self.marker(delivered=[mid] + writes)
        # local operations (copy, re, upkt, repkt, ...): no link time
        return self.marker(delivered=prev + pkt_deps)

    def _remote_writes(self, b: PlanBlock, op: Op, dsts, src0: BufRef, off, unit, after: list[int], stream: Any) -> int:
        last_sent: list[int] = []
        first = after
        for i, d in enumerate(dsts):
            peer = self.remote_gpu(b, d, op.channel_type)
            t = self.send(b.gpu, peer, self.nbytes(src0, op, off, unit), last_sent, first, (stream, "w", i),
                          op.channel_type)
            b.pending.append(t)
            last_sent, first = [t], []
        return self.marker(sent=last_sent, delivered=after)


def _least_sends(op: Op) -> int:
    """The transfers :meth:`_Builder._op` builds for ``op`` at least (see :meth:`_Builder.least_transfers`)."""
    name, src, dst = op.name, op.src or (), op.dst or ()
    if name in ("signal", "rlxsignal"):
        return len(op.channel_ids or ()) if op.channel_type in ("memory", "port") else 0
    if name in ("put", "pws", "pwsf", "ppkt", "rppkt"):
        if op.channel_type == "memory":
            return 2 if dst else 0  # one run at least, and the marker that has it as its sent event
        return len(dst)
    if name in ("get", "rre", "rres"):
        reads = len(src) if name == "get" else len(src[1:])
        return reads + (len(dst[1:]) + 1 if name == "rres" and dst[1:] else 0)
    if name == "res":
        return len(dst[1:]) + 1 if dst[1:] else 0
    if name in ("respkt", "recspkt"):
        sends = len(dst[1 if name == "respkt" else 2:])
        return sends + 1 if sends else 0
    return 0


def mscclpp_program(plan: Plan, net: Network, size: float, source: str = "plan",
                    port_transport: str = "executor") -> ProgramBuilder:
    """The transfers of one call of ``size`` bytes of ``plan`` on ``net``."""
    return _Builder(plan, net, size, source, port_transport).build()


def simulate_plan(net: Network, plan: Plan, size: int = 1 << 30, *, name: str | None = None, sharing: str = "weighted",
                  fairness: str = "max-min", source: str = "plan", port_transport: str = "executor") -> SimResult:
    """Simulate one call of ``plan`` (nccl-tests size: allgather's output, the input otherwise); ``port_transport``
    "nic" sends port channels inside a box through the network (see the module docstring)."""
    if size < 1:
        raise UsageError(f"size must be >= 1 byte, got {size}")
    coll, bus = mscclpp_collective(plan, source)
    builder = _Builder(plan, net, float(size), source, port_transport)
    prog = builder.build()
    return simulate_program(prog, net, name or plan.name, coll, size, {"threadblocks": len(builder.blocks),
                            "port_transport": port_transport}, sharing, fairness, bus_factor=bus)


@dataclass
class PlanSimulation:
    """A simulated call of a plan, and (given the schedule it came from) the same call of its trees."""

    plan: SimResult
    trees: SimResult | None = None
    source: str = "plan"
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return True

    @property
    def ratio(self) -> float | None:
        if self.trees is None or not self.trees.algbw_gbps:
            return None
        return self.plan.algbw_gbps / self.trees.algbw_gbps

    @property
    def message(self) -> str:
        p = self.plan
        line = (f"{self.source}: {p.collective} of {p.size_bytes} bytes on {p.ranks} GPUs: {p.time_s * 1e6:.1f} us, "
                f"algbw {p.algbw_gbps:.1f} GB/s, busbw {p.busbw_gbps:.1f} GB/s")
        if self.ratio is not None:
            line += f"; its trees {self.trees.algbw_gbps:.1f} GB/s ({self.ratio:.1%})"
        return line

    def to_dict(self) -> dict[str, Any]:
        out = {"ok": self.ok, "message": self.message, "plan": self.plan.to_dict()}
        if self.trees is not None:
            out["trees"] = self.trees.to_dict()
            out["ratio"] = self.ratio
        out["notes"] = self.notes
        return out


def plan_simulation(net: Network, plan: Plan, size: int = 1 << 30, schedule: Schedule | None = None, *,
                    source: str | None = None, sharing: str = "weighted", fairness: str = "max-min",
                    port_transport: str = "executor") -> PlanSimulation:
    """Simulate ``plan`` for one call of ``size`` bytes and, when ``schedule`` (the trees it was exported from) is
    given, the trees too, on the same network."""
    source = source or plan.name
    res = simulate_plan(net, plan, size, sharing=sharing, fairness=fairness, source=source,
                        port_transport=port_transport)
    trees = None
    if schedule is not None:
        from forestcoll.simulate.core import simulate

        trees = simulate(net, schedule, size=size, sharing=sharing, fairness=fairness)
    out = PlanSimulation(res, trees, source)
    ins, outs = buffer_sizes(plan, size)
    why = next((w for g in plan.gpus if (w := check_message_size(plan, g, ins, outs))), None)
    if why:
        out.notes.append(f"the executor would refuse a call of {size} bytes with this plan ({why}); the model "
                         "simulates it anyway")
    return out


# ----- one plan per size range (generate --sizes --format mscclpp) --------------------------------------


def executor_rate(topology) -> Any:
    """``rate(schedule, size)``: the algbw (GB/s) of ``schedule``'s trees simulated at ``size`` on the routes an
    MSCCL++ plan's transfers take, spread between boxes as a port channel's puts are
    (:func:`forestcoll.simulate.runtime_trees.runtime_trees`); a ranking of fitting schedules before any plan is
    exported (``generate --format mscclpp`` ranks their plans, :func:`plan_rate`); a refused simulation:
    :class:`~forestcoll.simulate.race.Unsimulated`, it loses."""
    from forestcoll.simulate.network import build_network
    from forestcoll.simulate.race import losing
    from forestcoll.simulate.runtime_trees import runtime_trees

    net = build_network(topology)
    return losing(lambda sched, size: runtime_trees(net, sched, size).algbw_gbps)


def plan_rate(topology) -> Any:
    """``rate(plan, size)``: the algbw (GB/s) of an MSCCL++ plan simulated at ``size`` on ``topology``; what the
    fallback of ``generate --format mscclpp`` ranks the fitting k by (their trees rank them otherwise: mi250:nodes=2
    allreduce at 1 GiB, k=4's trees 165.2 GB/s on the executor's routes but its plan 146.7, k=1's plan 156.2).
    A plan whose simulation is refused there (above the transfer limit) gets :class:`~forestcoll.simulate.race.Unsimulated`
    (it loses).  ``rate.ceiling(plan, size)``: a rate it never exceeds, from the plan alone
    (:func:`forestcoll.simulate.plan_bound.plan_time_bound`), which lets a race skip a plan that cannot win."""
    from forestcoll.simulate.network import build_network
    from forestcoll.simulate.plan_bound import plan_time_bound
    from forestcoll.simulate.race import losing

    net = build_network(topology)

    def rate(plan: Plan, size: int) -> float:
        return simulate_plan(net, plan, size).algbw_gbps

    def ceiling(plan: Plan, size: int) -> float:
        least = plan_time_bound(net, plan, size)
        return size / least / 1e9 if least > 0 else math.inf
    rate.ceiling = ceiling  # type: ignore[attr-defined]
    return losing(rate)
