"""Actions grouped into thread blocks and emitted as a plan (the second stage of the MSCCL++ export).

Thread blocks.  Actions are grouped by (phase, level in the tree, role, peer,
piece size) and, by layout, finer (per tree edge, per source GPUs): every
block works at one tree level only, so a block waits only for blocks of a lower
(phase, level) and the program cannot deadlock, and every block runs one
``pipeline`` whose iterations move slice ``i`` of each of its pieces (unit =
piece chunks x bytes per chunk per iteration: the same iteration count
everywhere, so every per-iteration signal meets one wait).  Groups are split
further to keep within the executor's limits.

Channels.  Each pair of blocks on two GPUs that depend on each other gets its
own channel pair of the type the dependency needs (a port put: port; a memory
put or a pull: memory), so one pair of blocks may hold both; blocks on one GPU
use a semaphore.  Blocks that write into a peer first wait for that peer's
blocks to have started the call (relaxed handshake: the peer's previous call and
host code are done), and blocks that are read from wait at the end until their
readers are done.  A port put signals one consumer block on its own channel,
which relays to the others on its GPU by semaphore.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from forestcoll.collectives import Collective
from forestcoll.mscclpp.lower import Act, Ref, plan_chunks
from forestcoll.mscclpp.plan import (
    BufRef,
    Channel,
    GpuPlan,
    Op,
    Plan,
    RemoteBuffer,
    RemoteBufferRef,
    TbChannel,
    ThreadBlock,
)
from forestcoll.mscclpp.semantics import MAX_CHANNEL_PER_OPERATION, MAX_DEVICE_SEMAPHORES

__all__ = ["ALIGN", "MAX_PAIRS", "Emitter", "Tb", "group"]

ALIGN = 16
MAX_PAIRS = 10  # src_buff / dst_buff entries per operation


@dataclass(eq=False)
class Tb:
    """A thread block: pipelines of (num_chunks, actions, per_chunk) run one after the other (only blocks that
    nobody waits for get more than one); ``per_chunk`` cuts every action into one-chunk operations so that
    pieces of different sizes share one pipeline."""

    gpu: int
    key: tuple
    pipes: list[tuple[int, list[Act], bool]]
    pos: int = -1

    @property
    def acts(self) -> list[Act]:
        return [a for _n, acts, _e in self.pipes for a in acts]


def _ops_estimate(acts: list[Act], per_chunk: bool) -> int:
    """Data operations of one pipeline iteration."""
    mult = (lambda a: a.cnt) if per_chunk else (lambda a: 1)
    mem = sum(mult(a) for a in acts if a.push and a.push[2] == "memory")
    port = sum(mult(a) for a in acts if a.push and a.push[2] == "port")
    ops = -(-mem // MAX_PAIRS) + -(-port // MAX_CHANNEL_PER_OPERATION)
    for a in acts:
        if a.reduce_srcs:
            local = sum(1 for r in a.reduce_srcs if r.gpu is None)
            remote = len(a.reduce_srcs) - local
            ops += mult(a) * ((-(-local // (MAX_PAIRS - 1)) if local else 0) + (-(-remote // (MAX_PAIRS - 1)) if remote else 0))
        if a.copy:
            ops += mult(a)
    return ops


def group(acts: list[Act], n: int, budget: int, partners: int) -> list[list[Tb]]:
    """Thread blocks per GPU: one per action key (phase, level, role, peer), split so that every block's
    operations and partner blocks fit the executor's limits."""
    groups: dict[tuple[int, tuple], list[Act]] = defaultdict(list)
    users: dict[int, list[Act]] = defaultdict(list)
    for a in acts:
        groups[(a.gpu, a.key)].append(a)
        for p, _k in a.producers:
            users[id(p)].append(a)
    per_gpu: list[list[Tb]] = [[] for _ in range(n)]
    for (g, key) in sorted(groups, key=lambda x: (x[0], _sort_key(x[1]))):
        members = sorted(groups[(g, key)], key=lambda a: a.order)
        role = key[2]
        if role == "copy":  # nothing waits for these: one block, one pipeline per piece size
            by_cnt: dict[int, list[Act]] = defaultdict(list)
            for a in members:
                by_cnt[a.cnt].append(a)
            per_gpu[g].append(Tb(g, key, [(c, by_cnt[c], False) for c in sorted(by_cnt)]))
            continue
        cnts = sorted({a.cnt for a in members})
        # every block that touches a piece slices it alike (the unit of its chunk count) and runs as many iterations
        # as its partners: one piece size per block
        classes = [(c, [a for a in members if a.cnt == c], False) for c in cnts]
        for nchunks, group, per_chunk in classes:
            chunk: list[Act] = []
            for a in group:
                trial = chunk + [a]
                near = {(p.gpu, p.key) for x in trial for p, _k in x.producers}
                near |= {(u.gpu, u.key) for x in trial for u in users[id(x)]}
                if chunk and (_ops_estimate(trial, per_chunk) > budget or len(near) > partners):
                    per_gpu[g].append(Tb(g, key, [(nchunks, chunk, per_chunk)]))
                    chunk = [a]
                else:
                    chunk = trial
            if chunk:
                per_gpu[g].append(Tb(g, key, [(nchunks, chunk, per_chunk)]))
    for tbs in per_gpu:
        for i, tb in enumerate(tbs):
            tb.pos = i
            for a in tb.acts:
                a.tb = i
    return per_gpu


def _sort_key(key: tuple) -> tuple:
    phase, level, role, peer = key[:4]
    return (phase, level, {"up": 0, "copy": 1, "down": 2, "sink": 3}[role], peer, *key[4:])


# ----- emission -----------------------------------------------------------------------------------------


class Emitter:
    """Channels, semaphores, remote buffers and operations of every thread block.

    Dependencies between blocks (``x`` -> ``y``: y uses what x produced in the same iteration):

    * ``mem`` / ``port``: x put data into y's GPU through a memory / port channel; x signals y after a ``nop``
      (a port signal travels behind the port puts on the same channel); y first tells x it has started the
      call (relaxed handshake); after a port put, y tells x at the end that it is done (the put has read its
      source by then);
    * ``pull``: y reads x's memory; x signals when its data is ready, y tells x at the end that it is done;
    * ``local``: same GPU: x releases a semaphore, y acquires it;
    * ``relay``: same GPU: y needs data a port put brought to x's GPU; x, the block that waits for that put,
      releases a semaphore right after its wait.
    """

    def __init__(self, per_gpu: list[list[Tb]], units: dict[int, int]) -> None:
        self.per_gpu = per_gpu
        self.units = units
        self.n = len(per_gpu)
        self.acts = [a for tbs in per_gpu for tb in tbs for a in tb.acts]
        self.deps: dict[tuple[int, int], list[tuple[tuple[int, int], str]]] = defaultdict(list)  # consumer -> producers
        self.outs: dict[tuple[int, int], list[tuple[tuple[int, int], str]]] = defaultdict(list)  # producer -> consumers
        self.port_target: dict[int, tuple[int, int]] = {}  # id(port push action) -> the block its put signals
        # GPU pair -> (producer block, consumer block, channel type) in the order they were met
        self.pairs: dict[tuple[int, int], list[tuple[tuple[int, int], tuple[int, int], str]]] = defaultdict(list)
        self.index_of: dict[tuple[tuple[int, int], tuple[int, int], str], tuple[str, int]] = {}
        self.sems: list[list[int]] = [[] for _ in range(self.n)]
        self.sem_of: dict[tuple[tuple[int, int], tuple[int, int]], int] = {}

    @staticmethod
    def tbkey(a: Act) -> tuple[int, int]:
        return (a.gpu, a.tb)

    def _tb_at(self, key: tuple[int, int]) -> Tb:
        return self.per_gpu[key[0]][key[1]]

    def _tb_of(self, a: Act) -> Tb:
        return self.per_gpu[a.gpu][a.tb]

    def edge(self, x: tuple[int, int], y: tuple[int, int], kind: str) -> None:
        if x == y or (x, kind) in self.deps[y]:
            return
        self.deps[y].append((x, kind))
        self.outs[x].append((y, kind))
        if x[0] == y[0]:
            if (x, y) not in self.sem_of:
                self.sem_of[(x, y)] = len(self.sems[x[0]])
                self.sems[x[0]].append(0)
        else:
            pair = self.pairs[(min(x[0], y[0]), max(x[0], y[0]))]
            if (x, y, _ctype(kind)) not in pair:
                pair.append((x, y, _ctype(kind)))

    def wire(self) -> None:
        users: dict[int, list[Act]] = defaultdict(list)
        for c in self.acts:
            for p, _kind in c.producers:
                users[id(p)].append(c)
        for c in self.acts:
            for p, kind in c.producers:
                x, y = self.tbkey(p), self.tbkey(c)
                if kind == "push" and p.push is not None and p.push[2] == "port":
                    takers = [u for u in users[id(p)] if any(q is p and k == "push" for q, k in u.producers)]
                    # the block that waits for the put and passes it on to the others: one that forwards (not a
                    # sink, which waits for many pieces at once), with the fewest other producers
                    nprod = {self.tbkey(u): len({self.tbkey(q) for a in self._tb_of(u).acts for q, _k in a.producers})
                             for u in takers}
                    first = min(dict.fromkeys(self.tbkey(u) for u in takers),
                                key=lambda y: (self._tb_at(y).key[2] == "sink", nprod[y], y))
                    self.port_target[id(p)] = first
                    self.edge(x, first, "port")
                    if y != first:
                        self.edge(first, y, "relay")
                elif kind == "push":
                    self.edge(x, y, "mem")
                else:
                    self.edge(x, y, kind)
        # flatten: per GPU and type, the peers in pair order; a pair's two ends get the same ordinal
        self.gpu_channels: list[dict[str, list[int]]] = [{"memory": [], "port": []} for _ in range(self.n)]
        for (a, b) in sorted(self.pairs):
            for x, y, ctype in self.pairs[(a, b)]:
                for here, there in ((x, y), (y, x)):
                    lst = self.gpu_channels[here[0]][ctype]
                    self.index_of[(here, there, ctype)] = (ctype, len(lst))
                    lst.append(there[0])

    def end(self, here: tuple[int, int], there: tuple[int, int], ctype: str) -> tuple[str, int]:
        """(channel type, GPU-level index) of block ``here``'s end of the ``ctype`` channel pair it shares with
        ``there``."""
        return self.index_of[(here, there, ctype)]

    def emit(self, coll: Collective, name: str, inplace: bool, k: int, scratch: list[int], lo: int, hi: int,
             shares: int | None = None) -> Plan:
        """The Simple-protocol plan (``shares``: units of shard weight, :attr:`Lowering.shares`; default the GPUs)."""
        self.wire()
        n = self.n
        in_chunks, out_chunks = plan_chunks(coll, n if shares is None else shares, k)
        gpus = []
        for g in range(n):
            remote: dict[tuple[int, str], set[str]] = {}
            tbs_json = []
            built = [self._tb(tb, remote) for tb in self.per_gpu[g]]
            order = sorted(remote)
            rb_index = {key: i for i, key in enumerate(order)}
            for tb, (ops, chans, refs) in zip(self.per_gpu[g], built):
                refs_json = []
                for ctype in ("memory", "port"):
                    ids = [rb_index[r] for r in refs[ctype]]
                    if ids:
                        refs_json.append(RemoteBufferRef(ctype, tuple(ids)))
                tbs_json.append(ThreadBlock(tb.pos, tuple(ops), tuple(TbChannel(t, tuple(ids)) for t, ids in chans
                                                                        if ids), tuple(refs_json)))
            channels = tuple(Channel(t, tuple(self.gpu_channels[g][t])) for t in ("memory", "port")
                             if self.gpu_channels[g][t])
            rbs = tuple(RemoteBuffer(r, t, tuple(sorted(remote[(r, t)], key=("memory", "port").index)))
                        for r, t in order)
            gpus.append(GpuPlan(g, in_chunks, out_chunks, scratch[g], tuple(tbs_json), channels, rbs,
                                tuple(self.sems[g])))
        return Plan(name, coll.mscclpp, "Simple", inplace, tuple(gpus), reuse_resources=False,
                    num_threads_per_block=1024, use_double_scratch_buffer=False, buffer_alignment=ALIGN,
                    min_message_size=lo, max_message_size=hi)

    # -- one thread block --------------------------------------------------------------------------------

    def _tb(self, tb: Tb, remote: dict[tuple[int, str], set[str]]):
        me = (tb.gpu, tb.pos)
        local_ch: dict[str, list[int]] = {"memory": [], "port": []}
        local_idx: dict[tuple[str, int], int] = {}
        refs: dict[str, list[tuple[int, str]]] = {"memory": [], "port": []}

        def ch(here: tuple[int, int], there: tuple[int, int], kind: str) -> tuple[str, int]:
            """This block's (``here``) local index of the channel for dependency ``kind`` it shares with block
            ``there``."""
            ctype, gidx = self.end(here, there, _ctype(kind))
            if (ctype, gidx) not in local_idx:
                local_idx[(ctype, gidx)] = len(local_ch[ctype])
                local_ch[ctype].append(gidx)
            return ctype, local_idx[(ctype, gidx)]

        def rref(r: Ref, ctype: str) -> BufRef:
            key = (r.gpu, r.type)
            remote.setdefault(key, set()).add(ctype)
            if key not in refs[ctype]:
                refs[ctype].append(key)
            return BufRef(r.index, r.size, buffer_id=refs[ctype].index(key))

        def lref(r: Ref) -> BufRef:
            return BufRef(r.index, r.size, type=r.type)

        deps = self.deps.get(me, [])
        outs = self.outs.get(me, [])
        ops: list[Op] = []
        # start: blocks that write into this GPU wait until it has started this call
        starters = [ch(me, x, kind) for x, kind in deps if kind in ("mem", "port")]
        for ctype, ids in _by_type(starters):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                ops.append(Op("rlxsignal" if ctype == "memory" else "signal", ctype, tuple(part)))
        waiters = [ch(me, y, kind) for y, kind in outs if kind in ("mem", "port")]
        for ctype, ids in _by_type(waiters):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                ops.append(Op("rlxwait" if ctype == "memory" else "wait", ctype, tuple(part)))
        if ops:
            ops.append(Op("nop"))
        # the pipeline body
        body: list[Op] = []
        cross = [ch(me, x, kind) for x, kind in deps if kind in ("mem", "port", "pull")]
        for ctype, ids in _by_type(cross):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                body.append(Op("wait", ctype, tuple(part)))
        relays = [self.sem_of[(me, y)] for y, kind in outs if kind == "relay"]
        if relays:
            body.append(Op("nop"))
            for part in _chunks(relays, MAX_DEVICE_SEMAPHORES):
                body.append(Op("sem_release", semaphore_ids=tuple(part)))
        sems_in = [self.sem_of[(x, me)] for x, kind in deps if kind in ("local", "relay")]
        for part in _chunks(sems_in, MAX_DEVICE_SEMAPHORES):
            body.append(Op("sem_acquire", semaphore_ids=tuple(part)))
        head = body
        pipelines: list[Op] = []
        port_dst: dict[tuple[int, int], BufRef] = {}
        for nchunks, acts, per_chunk in tb.pipes:
            body = list(head) if not pipelines else []
            stage0: list[Op] = []
            for a in acts:
                for part in _split(a, per_chunk):
                    if part.copy:
                        stage0.append(Op("copy", src=(lref(part.copy[0]),), dst=(lref(part.copy[1]),)))
                    if part.reduce_srcs:
                        stage0.extend(self._reduce_ops(part, lref, rref))
            stage1: list[Op] = []
            mem = [x for a in acts if a.push and a.push[2] == "memory" for x in _split(a, per_chunk)]
            for btype in ("i", "o", "s"):
                pairs = [(lref(x.push[0]), rref(x.push[1], "memory")) for x in mem if x.push[0].type == btype]
                for part in _chunks(pairs, MAX_PAIRS):
                    stage1.append(Op("put", "memory", src=tuple(s for s, _d in part), dst=tuple(d for _s, d in part)))
            port = [(x, self.port_target[id(a)]) for a in acts if a.push and a.push[2] == "port"
                    for x in _split(a, per_chunk)]
            for x, target in port:
                port_dst.setdefault(target, rref(x.push[1], "port"))
            for part in _chunks(port, MAX_CHANNEL_PER_OPERATION):
                cids = tuple(ch(me, target, "port")[1] for _x, target in part)
                stage1.append(Op("put", "port", cids, src=tuple(lref(x.push[0]) for x, _t in part),
                                 dst=tuple(rref(x.push[1], "port") for x, _t in part)))
            if stage0:
                body.append(Op("nop"))
                body.extend(stage0)
            if stage1:
                body.append(Op("nop"))
                body.extend(stage1)
            if not pipelines:
                sig = [ch(me, y, kind) for y, kind in outs if kind in ("mem", "port", "pull")]
                sems_out = [self.sem_of[(me, y)] for y, kind in outs if kind == "local"]
                if sig or sems_out:
                    body.append(Op("nop"))
                for ctype, ids in _by_type(sig):
                    for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                        body.append(Op("signal", ctype, tuple(part)))
                for part in _chunks(sems_out, MAX_DEVICE_SEMAPHORES):
                    body.append(Op("sem_release", semaphore_ids=tuple(part)))
            pipelines.append(Op("pipeline", iter_context=(self.units[nchunks], nchunks), ops=tuple(body)))
        ops.extend(pipelines)
        # end: blocks whose memory this one read may end once it is done; a block whose port puts another
        # received ends once its proxy has carried them out (flush: the input they read may then change)
        tail: list[Op] = []
        done = [ch(me, x, kind) for x, kind in deps if kind == "pull"]
        for ctype, ids in _by_type(done):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                tail.append(Op("signal", ctype, tuple(part)))
        wait_done = [ch(me, y, kind) for y, kind in outs if kind == "pull"]
        for ctype, ids in _by_type(wait_done):
            for part in _chunks(ids, MAX_CHANNEL_PER_OPERATION):
                tail.append(Op("wait", ctype, tuple(part)))
        flushed = [(ch(me, y, "port")[1], port_dst[y]) for y, kind in outs if kind == "port" and y in port_dst]
        for part in _chunks(flushed, MAX_CHANNEL_PER_OPERATION):
            # the executor flushes as many channels as the operation has dst_buff entries (handleFlush)
            tail.append(Op("flush", "port", tuple(c for c, _d in part), dst=tuple(d for _c, d in part)))
        if tail:
            ops.append(Op("nop"))
            ops.extend(tail)
        chans = [(t, local_ch[t]) for t in ("memory", "port")]
        return ops, chans, refs

    def _reduce_ops(self, a: Act, lref, rref) -> list[Op]:
        """partial = input + every child's partial: local scratch slots with ``re``, remote partials with ``rre``."""
        dst = lref(a.partial)
        first = lref(a.input_ref)
        local = [r for r in a.reduce_srcs if r.gpu is None]
        remote = [r for r in a.reduce_srcs if r.gpu is not None]
        ops: list[Op] = []
        acc = first
        for part in _chunks(local, MAX_PAIRS - 1):
            if ops:
                ops.append(Op("nop"))
            ops.append(Op("re", src=(acc, *(lref(r) for r in part)), dst=(dst,), reduce_op="sum"))
            acc = dst
        for part in _chunks(remote, MAX_PAIRS - 1):
            if ops:
                ops.append(Op("nop"))
            ops.append(Op("rre", "memory", src=(acc, *(rref(r, "memory") for r in part)), dst=(dst,), reduce_op="sum"))
            acc = dst
        return ops


def _ctype(kind: str) -> str:
    """The channel a cross-GPU dependency of ``kind`` signals on: a port put's own channel, else a memory one."""
    return "port" if kind == "port" else "memory"


def _split(a: Act, per_chunk: bool) -> list[Act]:
    """``a`` itself, or one action per chunk of its piece (same operations on ranges of one chunk)."""
    if not per_chunk or a.cnt == 1:
        return [a]

    def at(r: Ref | None, j: int) -> Ref | None:
        return None if r is None else Ref(r.type, r.index + j, 1, r.gpu)

    out = []
    for j in range(a.cnt):
        x = Act(a.gpu, a.key, a.order, 1)
        x.reduce_srcs = [at(r, j) for r in a.reduce_srcs]
        x.partial = at(a.partial, j)
        x.input_ref = at(a.input_ref, j)
        x.push = None if a.push is None else (at(a.push[0], j), at(a.push[1], j), a.push[2])
        x.copy = None if a.copy is None else (at(a.copy[0], j), at(a.copy[1], j))
        out.append(x)
    return out


def _append(lst: list, x: Any) -> None:
    if x not in lst:
        lst.append(x)


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _by_type(ends: list[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    out: dict[str, list[int]] = {}
    for ctype, idx in ends:
        lst = out.setdefault(ctype, [])
        if idx not in lst:
            lst.append(idx)
    return [(t, out[t]) for t in ("memory", "port") if t in out]
