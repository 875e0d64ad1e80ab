"""Synchronisation operations of the interpreter's machine: signal / wait (and relaxed), flush, semaphores,
barriers (a mixin of :class:`forestcoll.mscclpp.machine.Machine`)."""

from __future__ import annotations

from collections import deque
from typing import Any

from forestcoll.mscclpp.clocks import Clock
from forestcoll.mscclpp.state import Instr, TbState


class SyncOps:
    # -- synchronisation operations ---------------------------------------------------------------------

    def _channel(self, b: TbState, ins: Instr, ctype: str, cid: int):
        table = self.wiring.tb_channels[(b.gpu, b.pos)].get(ctype, [])
        if cid >= len(table):
            raise self._fail(b, ins, f"{ctype} channel {cid}: the thread block holds {len(table)}")
        ends = self.wiring.channels.get((b.gpu, ctype), [])
        if table[cid] >= len(ends):
            raise self._fail(b, ins, f"{ctype} channel {table[cid]} does not exist on gpu {b.gpu}")
        return ends[table[cid]]

    def _published(self, b: TbState, lane: int, relaxed: bool, port_agent: int | None = None) -> tuple[Any, Any, Any]:
        """What a signal (or release) by thread ``lane`` of ``b`` carries: (release knowledge, control knowledge,
        the kernel-start knowledge).  A relaxed signal releases nothing written during the kernel."""
        if not self.race:
            return None, None, None
        f, c = self._lane(b, lane)
        full = f.copy()
        ctrl = c.copy() if self.two_level else full
        full.set(b.agent, b.seg - 1)
        if self.two_level:
            ctrl.set(b.agent, b.seg - 1)
        if port_agent is not None:
            af, ac = self._agent_published(port_agent, b, lane)
            full.join(af)
            if self.two_level:
                ctrl.join(ac)
        start = self.start_vec[b.gpu]
        if relaxed:
            return start, ctrl, start
        return full, ctrl, start

    def _agent_published(self, agent: int, b: TbState, lane: int) -> tuple[Clock, Clock]:
        st = self.port_state[agent]
        if st["mark"] == (b.agent, b.seg) and (st["lanes"] - {lane}) and st["pre"] is not None:
            return st["pre"]
        return self.agent_vec[agent]

    def _deliver(self, end, token: tuple[Any, Any, Any], ready: deque) -> None:
        if end.partner is None:
            return  # an unpaired channel: the signal reaches a semaphore no channel waits on
        key = (end.peer, end.type, end.partner)
        q = self.tokens.setdefault(key, deque())
        if self.race:
            # a wait synchronises with every earlier signal on the semaphore (one release sequence): keep the
            # cumulative knowledge up to each signal
            last = self.last_cum.get(key)
            if last is not None:
                token = tuple(x.joined(y) if x is not y else x for x, y in zip(token, last))
            token = self.knowledge.freeze_all(token)
            self.last_cum[key] = token
            q.append(token)
        else:
            q.append(None)
        self._wake(("chan", key), ready)

    def _signal(self, b: TbState, ins: Instr, ready: deque) -> None:
        op = ins.op
        relaxed = ins.kind == "rlxsignal"
        ctype = op.channel_type
        if ctype not in ("memory", "port"):
            return
        for lane, cid in enumerate(op.channel_ids or ()):
            end = self._channel(b, ins, ctype, cid)
            agent = self.port_agent.get((b.gpu, end.index)) if ctype == "port" else None
            token = self._published(b, lane, relaxed and ctype == "memory", agent)
            self._deliver(end, token, ready)

    def _wait_op(self, b: TbState, ins: Instr, ready: deque) -> bool:
        op = ins.op
        ctype = op.channel_type
        if ctype not in ("memory", "port"):
            return True
        ends = [self._channel(b, ins, ctype, cid) for cid in op.channel_ids or ()]
        need: dict[tuple, int] = {}
        for end in ends:
            key = (end.gpu, end.type, end.index)
            need[key] = need.get(key, 0) + 1
        for key, k in need.items():
            if len(self.tokens.get(key, ())) < k:
                end = self.wiring.channels[(key[0], key[1])][key[2]]
                self._wait(b, ("chan", key), f"waits for a signal from gpu {end.peer} on {ctype} channel {key[2]}")
                return False
        relaxed = ins.kind == "rlxwait" and ctype == "memory"
        for lane, end in enumerate(ends):
            tok = self.tokens[(end.gpu, end.type, end.index)].popleft()
            if self.race and tok is not None:
                full, ctrl, start = tok
                ext = self._lane_extend(b, lane)
                # a relaxed wait acquires nothing but what was visible before the signaller's kernel began
                self._merge_into(ext, start if relaxed else full, ctrl)
        return True

    def _flush(self, b: TbState, ins: Instr) -> None:
        op = ins.op
        if op.channel_type != "port" and op.channel_type is not None:
            pass
        n = len(op.dst or ())  # handleFlush counts channels by dst_buff (executor quirk)
        for lane, cid in enumerate((op.channel_ids or ())[:n]):
            end = self._channel(b, ins, "port", cid)
            if self.race:
                agent = self.port_agent[(b.gpu, end.index)]
                af, ac = self._agent_published(agent, b, lane)
                self._merge_into(self._lane_extend(b, lane), af, ac)

    def _sem(self, b: TbState, ins: Instr, s: int) -> tuple[int, int]:
        key = (b.gpu, s)
        if key not in self.sem_value:
            raise self._fail(b, ins, f"semaphore {s} does not exist on gpu {b.gpu}")
        return key

    def _sem_release(self, b: TbState, ins: Instr, ready: deque) -> None:
        for lane, s in enumerate(ins.op.semaphore_ids or ()):
            key = self._sem(b, ins, s)
            self.sem_value[key] += 1
            if self.race:
                full, ctrl, _start = self._published(b, lane, False)
                rel = self.sem_releases[key]
                if rel:
                    pf, pc = rel[-1]
                    full = full.joined(pf)
                    ctrl = ctrl.joined(pc) if self.two_level else full
                rel.append(self.knowledge.freeze_all((full, ctrl)))
            else:
                self.sem_releases[key].append((None, None))
            self._wake(("sem", key), ready)

    def _sem_acquire(self, b: TbState, ins: Instr, ready: deque) -> bool:
        sems = ins.op.semaphore_ids or ()
        for s in sems:
            key = self._sem(b, ins, s)
            if s not in b.ticket:
                b.ticket[s] = self.sem_tickets[key]
                self.sem_tickets[key] += 1
        for s in sems:
            key = (b.gpu, s)
            needed = b.ticket[s] + 1 - self.sem_init[key]  # releases this acquire waits for (first come, first served)
            if len(self.sem_releases[key]) < needed:
                self._wait(b, ("sem", key), f"waits on semaphore {s} (value {self.sem_value[key]}; needs release "
                                            f"{needed}, {len(self.sem_releases[key])} so far)")
                return False
        for lane, s in enumerate(sems):
            key = (b.gpu, s)
            needed = b.ticket.pop(s) + 1 - self.sem_init[key]
            self.sem_value[key] -= 1
            if self.race and needed >= 1:
                full, ctrl = self.sem_releases[key][needed - 1]
                self._merge_into(self._lane_extend(b, lane), full, ctrl)
        return True

    def _barrier(self, b: TbState, ins: Instr, ready: deque) -> bool:
        op = ins.op
        nblocks = op.num_threadblocks or 0
        if b.gen is None:
            self._sync_threads(b)
            if nblocks <= 1:
                return True
            key = (b.gpu, op.barrier_id)
            st = self.barriers.setdefault(key, [0, nblocks, {}])
            if st[1] != nblocks:
                raise self._fail(b, ins, f"barrier {op.barrier_id} used with {nblocks} and {st[1]} thread blocks")
            gen = st[0] // nblocks
            st[0] += 1
            b.gen = gen
            if self.race:
                f = b.full.copy()
                c = b.ctrl.copy() if self.two_level else f
                f.set(b.agent, b.seg - 1)
                prev = st[2].get(gen)
                if prev is not None:
                    f.join(prev[0])
                    if self.two_level:
                        c.join(prev[1])
                st[2][gen] = self.knowledge.freeze_all((f, c))
            if st[0] % nblocks == 0:
                self._wake(("barrier", key, gen), ready)
        key = (b.gpu, op.barrier_id)
        st = self.barriers[key]
        if st[0] < (b.gen + 1) * nblocks:
            self._wait(b, ("barrier", key, b.gen), f"waits at barrier {op.barrier_id} ({st[0] - b.gen * nblocks} of "
                                                   f"{nblocks} thread blocks arrived)")
            return False
        if self.race:
            f, c = st[2][b.gen]
            self._merge_into((b.full, b.ctrl), f, c)
        b.gen = None
        self._sync_threads(b)
        return True

    # -- data operations --------------------------------------------------------------------------------
