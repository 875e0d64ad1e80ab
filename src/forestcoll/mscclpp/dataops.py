"""Data operations of the interpreter's machine: puts and gets, copies, reductions, packets, switch (NVLS)
operations (a mixin of :class:`forestcoll.mscclpp.machine.Machine`)."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from forestcoll.mscclpp.clocks import Clock
from forestcoll.mscclpp.plan import BufRef
from forestcoll.mscclpp.semantics import PIPELINED, U32, scratch_offset
from forestcoll.mscclpp.state import Alloc, Fault, Instr, TbState


class DataOps:
    def _data(self, b: TbState, ins: Instr, ready: deque) -> bool:
        op = ins.op
        name = ins.kind
        off, unit, it = self._frame(b, ins)
        pipelined = unit is not None and name in PIPELINED
        tag = self._tag(b, it)
        geo = self.geo[b.gpu]
        flag = b.launch
        soff = scratch_offset(geo, self.plan, flag)
        src, dst = op.src or (), op.dst or ()
        know = (b.full, b.ctrl)

        def size_of(nbytes: int) -> int:
            if not pipelined:
                return nbytes
            return min((nbytes - off) % U32, unit)

        def adj(pos: int, btype: str) -> int:
            return self._adj(pos, btype, off) if pipelined else 0

        def rd(alloc: Alloc, lo: int, n: int, pkt: bool = False, agent: int | None = None, clk: int = 0,
               k: Any = None) -> np.ndarray:
            nonlocal know
            if self.race:
                writers = self._access(alloc, lo, lo + n, False, b.agent if agent is None else agent,
                                       b.seg if agent is None else clk, know if k is None else k, ins.gid, tag, pkt)
                if pkt and writers:
                    # a packet read is ordered after the packet's writer (its flag): it learns what the writer knew
                    f = know[0].copy()
                    c = know[1].copy() if self.two_level else f
                    for w in writers:
                        got = self.pkt_know.get(w)
                        if got is not None:
                            f.join(got[0])
                            if self.two_level:
                                c.join(got[1])
                    know = (f, c)
                    self._merge_into(self._lane_extend(b, -1), f, c)
            return alloc.data[lo:lo + n]

        def wr(alloc: Alloc, lo: int, data: np.ndarray, agent: int | None = None, clk: int = 0, k: Any = None,
               pkt: bool = False) -> None:
            if self.race:
                kk = know if k is None else k
                self._access(alloc, lo, lo + len(data), True, b.agent if agent is None else agent,
                             b.seg if agent is None else clk, kk, ins.gid, tag)
                key = (ins.gid, tag, b.agent if agent is None else agent)
                if pkt and key not in self.pkt_know:
                    f = kk[0].copy()
                    c = kk[1].copy() if self.two_level else f
                    if agent is None:
                        f.set(b.agent, max(f.get(b.agent), b.seg))
                        c.set(b.agent, max(c.get(b.agent), b.seg))
                    self.pkt_know[key] = (f, c)
            alloc.data[lo:lo + len(data)] = data
            self.moved += len(data)

        def local_ref(ref: BufRef, packets: bool = False) -> tuple[str, int, int]:
            if ref.type is None:
                raise self._fail(b, ins, "a local buffer reference needs 'type'")
            start, nbytes = self._span(b.gpu, ref, ref.type, op)
            return ref.type, start, nbytes

        # -- packets: check readiness first (the kernel spins until every flag matches)
        pkt_reads: list[tuple[Alloc, int, int]] = []
        if name in ("upkt", "rppkt", "respkt", "repkt", "recpkt", "recspkt", "gstorepkt"):
            if name == "gstorepkt":
                t, s0, n0 = local_ref(src[0])
                alloc, lo = self._local(b, ins, b.gpu, t, 2 * s0 + (soff if t == "s" else 0), 2 * n0)
                pkt_reads.append((alloc, lo, n0))
            else:
                srcs = src[:1] if name in ("upkt", "rppkt") else src[1:]
                for ref in srcs:
                    start, nbytes = self._span(b.gpu, ref, "s", op)
                    if name not in ("upkt", "rppkt"):
                        nbytes = self._span(b.gpu, src[0], src[0].type or "s", op)[1]
                    alloc, lo = self._local(b, ins, b.gpu, "s", soff + 2 * start, 2 * nbytes)
                    pkt_reads.append((alloc, lo, nbytes))
            for alloc, lo, nbytes in pkt_reads:
                if not self._packets_ready(alloc, lo, nbytes, flag):
                    self._wait(b, ("pkt", b.gpu), f"waits for packets (flag {flag}) at byte {lo} of {alloc.name}")
                    return False

        # -- execute
        if name in ("put", "pws", "pwsf"):
            ctype = op.channel_type
            if ctype == "memory":
                if not src:
                    raise self._fail(b, ins, "a put needs src_buff")
                base_type = src[0].type or "i"
                for i, dref in enumerate(dst):
                    sref = src[i] if i < len(src) else BufRef(0, 0, "i")
                    _t, s0, _n = local_ref(sref) if sref.type else (base_type, 0, 0)
                    rank, rtype = self._remote_of(b, ins, dref, "memory")
                    d0, dn = self._span(b.gpu, dref, rtype, op)
                    n = size_of(dn)
                    sa, slo = self._local(b, ins, b.gpu, base_type, s0 + adj(b.gpu, sref.type or base_type), n)
                    da, dlo = self._remote(b, ins, rank, rtype, d0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
                    wr(da, dlo, rd(sa, slo, n).copy())
            elif ctype == "port":
                for tid, dref in enumerate(dst):
                    end, agent = self._port_end(b, ins, op, tid, len(src))
                    t, s0, _n = local_ref(src[tid])
                    rank, rtype = self._remote_of(b, ins, dref, "port")
                    d0, dn = self._span(b.gpu, dref, rtype, op)
                    n = size_of(dn)
                    sa, slo = self._local(b, ins, b.gpu, t, s0 + adj(b.gpu, t), n)
                    da, dlo = self._remote(b, ins, rank, rtype, d0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
                    clk, k = self._port_issue(agent, b, tid)
                    wr(da, dlo, rd(sa, slo, n, agent=agent, clk=clk, k=k).copy(), agent=agent, clk=clk, k=k)
                    if name in ("pws", "pwsf"):
                        self._deliver(end, self._published(b, tid, False, agent), ready)
                    if name == "pwsf" and self.race:
                        af, ac = self._agent_published(agent, b, tid)
                        self._merge_into(self._lane_extend(b, tid), af, ac)
            else:
                raise self._fail(b, ins, f"a put through a {ctype!r} channel")
        elif name == "get":
            for i, sref in enumerate(src):
                if i >= len(dst):
                    break
                dref = dst[i]
                rank, rtype = self._remote_of(b, ins, sref, "memory")
                s0, sn = self._span(b.gpu, sref, rtype, op)
                t, d0, _dn = local_ref(dref)
                n = size_of(sn)
                # the executor swaps the offsets: it writes locally at the source's offset and reads the remote at the
                # destination's (execution_kernel.hpp handleGet)
                la, llo = self._local(b, ins, b.gpu, t, s0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
                ra, rlo = self._remote(b, ins, rank, rtype, d0 + adj(b.gpu, t), n)
                wr(la, llo, rd(ra, rlo, n).copy())
        elif name == "copy":
            t, s0, sn = local_ref(src[0])
            u, d0, _dn = local_ref(dst[0])
            n = size_of(sn)
            if n:
                sa, slo = self._local(b, ins, b.gpu, t, s0 + adj(b.gpu, t), n)
                da, dlo = self._local(b, ins, b.gpu, u, d0 + adj(b.gpu, u), n)
                wr(da, dlo, rd(sa, slo, n).copy())
        elif name in ("re", "res", "rre", "rres"):
            self._reduce(b, ins, src, dst, size_of, adj, rd, wr, local_ref)
        elif name in ("ppkt", "rppkt", "cpkt", "upkt", "respkt", "repkt", "recpkt", "recspkt", "gstorepkt"):
            self._packet_op(b, ins, src, dst, soff, flag, rd, wr, local_ref, pkt_reads, ready)
            self._wake(("pkt", b.gpu), ready)
            for rank in self._packet_targets(b, ins):
                self._wake(("pkt", rank), ready)
        elif name in ("glres", "gstore"):
            self._switch(b, ins, src, dst, size_of, adj, rd, wr, local_ref)
        else:
            raise self._fail(b, ins, f"unknown operation {name!r}")
        return True

    def _port_end(self, b: TbState, ins: Instr, op: Any, i: int, sources: int | None = None) -> tuple[Any, int]:
        """The port channel ``op`` puts its destination ``i`` through (its ``i``-th channel id) and that channel's
        proxy agent; a fault naming the destination when it has no channel (or no source: ``sources`` given)."""
        cids = op.channel_ids or ()
        if i >= len(cids) or (sources is not None and i >= sources):
            raise self._fail(b, ins, f"destination {i} has no channel" + (" or source" if sources is not None else ""))
        end = self._channel(b, ins, "port", cids[i])
        return end, self.port_agent[(b.gpu, end.index)]

    def _port_issue(self, agent: int, b: TbState, lane: int) -> tuple[int, tuple[Clock, Clock] | None]:
        """A put pushed to a port channel's proxy by thread ``lane``: the proxy learns what that thread knows."""
        if not self.race:
            return 0, None
        f, c = self.agent_vec[agent]
        st = self.port_state[agent]
        if st["mark"] != (b.agent, b.seg):
            st["mark"] = (b.agent, b.seg)
            st["lanes"] = set()
            st["pre"] = self.knowledge.freeze_all((f, c if self.two_level else f))  # one object when single-level
        st["lanes"].add(lane)
        lf, lc = self._lane(b, lane)
        f.join(lf)
        f.set(b.agent, max(f.get(b.agent), b.seg - 1))
        if self.two_level:
            c.join(lc)
            c.set(b.agent, max(c.get(b.agent), b.seg - 1))
        f.set(agent, f.get(agent) + 1)
        if self.two_level:
            c.set(agent, f.get(agent))
        return f.get(agent), (f, c)

    def _reduce(self, b, ins, src, dst, size_of, adj, rd, wr, local_ref) -> None:
        op = ins.op
        name = ins.kind
        dt = self.dtype
        t0, s0, sn = local_ref(src[0])
        n = size_of(sn)
        if n == 0:
            return
        sa, slo = self._local(b, ins, b.gpu, t0, s0 + adj(b.gpu, t0), n)
        acc = rd(sa, slo, n).copy().view(dt)
        for ref in src[1:]:
            if name in ("rre", "rres"):
                rank, rtype = self._remote_of(b, ins, ref, op.channel_type)
                r0, _rn = self._span(b.gpu, ref, rtype, op)
                ra, rlo = self._remote(b, ins, rank, rtype, r0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
            else:
                t, r0, _rn = local_ref(ref)
                ra, rlo = self._local(b, ins, b.gpu, t, r0 + adj(b.gpu, t), n)
            acc = acc + rd(ra, rlo, n).view(dt)
        data = np.ascontiguousarray(acc).view(np.uint8)
        u, d0, _dn = local_ref(dst[0])
        da, dlo = self._local(b, ins, b.gpu, u, d0 + adj(b.gpu, u), n)
        wr(da, dlo, data)
        if name in ("res", "rres"):
            for ref in dst[1:]:
                rank, rtype = self._remote_of(b, ins, ref, op.channel_type)
                r0, _rn = self._span(b.gpu, ref, rtype, op)
                ra, rlo = self._remote(b, ins, rank, rtype, r0 + self._const(b.gpu, rtype) + adj(rank, rtype), n)
                wr(ra, rlo, data)

    def _switch(self, b, ins, src, dst, size_of, adj, rd, wr, local_ref) -> None:
        op = ins.op
        dt = self.dtype
        if not dst:
            raise self._fail(b, ins, f"{op.name} needs dst_buff")
        dbuf, dranks = self._switch_of(b, ins, dst[0])
        d0, dn = self._span(b.gpu, dst[0], dbuf, op)
        if op.name == "glres":
            sbuf, sranks = self._switch_of(b, ins, src[0])
            s0, sn = self._span(b.gpu, src[0], sbuf, op)
            n = size_of(sn)
            if n == 0:
                return
            acc = None
            for r in sranks:
                ra, rlo = self._remote(b, ins, r, sbuf, s0 + self._const(b.gpu, sbuf) + adj(r, sbuf), n)
                v = rd(ra, rlo, n).view(dt)
                acc = v.copy() if acc is None else acc + v
            data = np.ascontiguousarray(acc).view(np.uint8)
        else:
            t, s0, sn = local_ref(src[0])
            n = size_of(sn)
            if n == 0:
                return
            sa, slo = self._local(b, ins, b.gpu, t, s0 + adj(b.gpu, t), n)
            data = rd(sa, slo, n).copy()
        for r in dranks:
            ra, rlo = self._remote(b, ins, r, dbuf, d0 + self._const(b.gpu, dbuf) + adj(r, dbuf), n)
            wr(ra, rlo, data)

    # -- packets ----------------------------------------------------------------------------------------

    def _to_packets(self, data: np.ndarray, flag: int) -> np.ndarray:
        w = data.view(np.uint32)
        f = np.uint32(flag % U32)
        if self.packet == "LL16":
            words = w.reshape(-1, 2)
            out = np.empty((words.shape[0], 4), np.uint32)
            out[:, 0] = words[:, 0]
            out[:, 1] = f
            out[:, 2] = words[:, 1]
            out[:, 3] = f
        else:
            out = np.empty((len(w), 2), np.uint32)
            out[:, 0] = w
            out[:, 1] = f
        return out.reshape(-1).view(np.uint8)

    def _from_packets(self, pkts: np.ndarray) -> np.ndarray:
        w = pkts.view(np.uint32)
        if self.packet == "LL16":
            words = w.reshape(-1, 4)[:, [0, 2]]
        else:
            words = w.reshape(-1, 2)[:, :1]
        return np.ascontiguousarray(words).reshape(-1).view(np.uint8)

    def _packets_ready(self, alloc: Alloc, lo: int, nbytes: int, flag: int) -> bool:
        if nbytes % self.payload:
            return True  # reported when the op runs
        w = alloc.data[lo:lo + 2 * nbytes].view(np.uint32)
        flags = w.reshape(-1, 4)[:, [1, 3]] if self.packet == "LL16" else w.reshape(-1, 2)[:, 1:]
        return bool(np.all(flags == np.uint32(flag % U32)))

    def _packet_targets(self, b: TbState, ins: Instr) -> set[int]:
        out = set()
        for ref in ins.op.dst or ():
            if ref.buffer_id is not None and ins.op.channel_type in ("memory", "port"):
                try:
                    out.add(self._remote_of(b, ins, ref, ins.op.channel_type)[0])
                except Fault:
                    pass
            if ref.switch_channel_id is not None:
                try:
                    out.update(self._switch_of(b, ins, ref)[1])
                except Fault:
                    pass
        return out

    def _packet_op(self, b, ins, src, dst, soff, flag, rd, wr, local_ref, pkt_reads, ready) -> None:
        op = ins.op
        name = ins.kind
        dt = self.dtype
        pay = self.payload

        def check(nbytes: int) -> None:
            if nbytes % pay:
                raise self._fail(b, ins, f"{nbytes} bytes is not a whole number of {pay}-byte packet payloads")

        if name == "cpkt":
            t, s0, sn = local_ref(src[0])
            u, d0, _dn = local_ref(dst[0])
            check(sn)
            sa, slo = self._local(b, ins, b.gpu, t, s0 + (soff if t == "s" else 0), sn)
            da, dlo = self._local(b, ins, b.gpu, u, 2 * d0 + (soff if u == "s" else 0), 2 * sn)
            wr(da, dlo, self._to_packets(rd(sa, slo, sn).copy(), flag), pkt=True)
            return
        if name == "upkt":
            alloc, lo, n = pkt_reads[0]
            check(n)
            u, d0, _dn = local_ref(dst[0])
            da, dlo = self._local(b, ins, b.gpu, u, d0 + (soff if u == "s" else 0), n)
            wr(da, dlo, self._from_packets(rd(alloc, lo, 2 * n, pkt=True).copy()))
            return
        if name == "ppkt":
            ctype = op.channel_type
            if not src:
                raise self._fail(b, ins, "ppkt needs src_buff")
            for i, dref in enumerate(dst):
                sref = src[i] if i < len(src) else src[0]
                rank, rtype = self._remote_of(b, ins, dref, ctype)
                d0, _dn = self._span(b.gpu, dref, rtype, op)
                if ctype == "memory":
                    t0 = src[0].type or "i"
                    s0 = self._span(b.gpu, sref, sref.type or t0, op)[0]
                    n = self._span(b.gpu, sref, sref.type or t0, op)[1]
                    check(n)
                    sa, slo = self._local(b, ins, b.gpu, t0, s0 + (soff if t0 == "s" else 0), n)
                    da, dlo = self._remote(b, ins, rank, rtype, 2 * (d0 + self._const(b.gpu, rtype)) + soff, 2 * n)
                    wr(da, dlo, self._to_packets(rd(sa, slo, n).copy(), flag), pkt=True)
                else:
                    _end, agent = self._port_end(b, ins, op, i)
                    t, s0, n = local_ref(sref)
                    sa, slo = self._local(b, ins, b.gpu, t, 2 * s0 + (soff if t == "s" else 0), 2 * n)
                    da, dlo = self._remote(b, ins, rank, rtype, 2 * (d0 + self._const(b.gpu, rtype)) + soff, 2 * n)
                    clk, k = self._port_issue(agent, b, i)
                    wr(da, dlo, rd(sa, slo, 2 * n, agent=agent, clk=clk, k=k).copy(), agent=agent, clk=clk, k=k, pkt=True)
            return
        if name == "rppkt":
            alloc, lo, n = pkt_reads[0]
            check(n)
            data = self._from_packets(rd(alloc, lo, 2 * n, pkt=True).copy())
            ctype = op.channel_type
            if ctype == "port":
                self._sync_threads(b)  # the port variant reads every packet, then __syncthreads, then puts
            for i, dref in enumerate(dst):
                rank, rtype = self._remote_of(b, ins, dref, ctype)
                d0, _dn = self._span(b.gpu, dref, rtype, op)
                da, dlo = self._remote(b, ins, rank, rtype, 2 * (d0 + self._const(b.gpu, rtype)) + soff, 2 * n)
                if ctype == "memory":
                    wr(da, dlo, self._to_packets(data, flag), pkt=True)
                else:
                    _end, agent = self._port_end(b, ins, op, i)
                    clk, k = self._port_issue(agent, b, i)
                    raw = rd(alloc, lo, 2 * n, pkt=True, agent=agent, clk=clk, k=k).copy()
                    wr(da, dlo, raw, agent=agent, clk=clk, k=k, pkt=True)
            return
        if name in ("respkt", "repkt", "recpkt", "recspkt"):
            t, s0, n = local_ref(src[0])
            check(n)
            acc = np.zeros(n // dt.itemsize, dt)
            for alloc, lo, _nb in pkt_reads:
                acc = acc + self._from_packets(rd(alloc, lo, 2 * n, pkt=True).copy()).view(dt)
            sa, slo = self._local(b, ins, b.gpu, t, s0 + (soff if t == "s" else 0), n)
            acc = acc + rd(sa, slo, n).view(dt)
            data = np.ascontiguousarray(acc).view(np.uint8)
            u, d0, _dn = local_ref(dst[0])
            da, dlo = self._local(b, ins, b.gpu, u, d0 + (soff if u == "s" else 0), n)
            wr(da, dlo, data)
            first_remote = 1
            if name in ("recpkt", "recspkt"):
                if len(dst) < 2:
                    raise self._fail(b, ins, f"{name} needs a packet destination in dst_buff[1]")
                v, p0, _pn = local_ref(dst[1])
                pa, plo = self._local(b, ins, b.gpu, v, 2 * p0 + (soff if v == "s" else 0), 2 * n)
                wr(pa, plo, self._to_packets(data, flag), pkt=True)
                first_remote = 2
            if name in ("respkt", "recspkt"):
                pk = self._to_packets(data, flag)
                for ref in dst[first_remote:]:
                    rank, rtype = self._remote_of(b, ins, ref, op.channel_type)
                    r0, _rn = self._span(b.gpu, ref, rtype, op)
                    ra, rlo = self._remote(b, ins, rank, rtype, soff + 2 * (r0 + self._const(b.gpu, rtype)), 2 * n)
                    wr(ra, rlo, pk, pkt=True)
            return
        if name == "gstorepkt":
            alloc, lo, n = pkt_reads[0]
            check(n)
            data = self._from_packets(rd(alloc, lo, 2 * n, pkt=True).copy())
            dbuf, dranks = self._switch_of(b, ins, dst[0])
            d0, _dn = self._span(b.gpu, dst[0], dbuf, op)
            for r in dranks:
                ra, rlo = self._remote(b, ins, r, dbuf, soff + 2 * (d0 + self._const(b.gpu, dbuf)), 2 * n)
                wr(ra, rlo, self._to_packets(data, flag), pkt=True)
            return
        raise self._fail(b, ins, f"unknown packet operation {name!r}")
