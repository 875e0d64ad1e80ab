"""Several thread blocks of a plan run as one, one after the other (the third stage of the MSCCL++ export, used
only when a GPU has more blocks than it runs at once).

A fused block runs, in order: the start handshakes of all its parts (every signal, then every wait), the
pipelines of its parts one after the other, then their end handshakes (every signal, then every wait).  Channels
and semaphores stay those of the parts (a pair of parts keeps its own channel pair), so every channel still sees
as many signals as waits, in the same order.

No deadlock: parts are run in one global order that is a topological order of the parts' dependencies (a part
waits in its pipeline only for parts of a lower tree level, or of the same level through a relay semaphore,
which the order puts first).  By induction on that order every pipeline ends: the first unfinished one in the
order is at the head of its fused block and waits only for pipelines before it.  Start handshakes never wait for a
pipeline and end handshakes wait only for other blocks' ends, which follow their pipelines.

What it costs: the parts of a fused block no longer overlap; the exporter fuses only parts that move data over
the same link (same phase, tree level, role and peer), and only as many as the thread-block limit requires.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import replace

from forestcoll.mscclpp.plan import BufRef, GpuPlan, Op, Plan, RemoteBufferRef, TbChannel, ThreadBlock, executor_ops
from forestcoll.mscclpp.semantics import MAX_CHANNEL, MAX_CHANNEL_PER_OPERATION, MAX_OPERATION

__all__ = ["fuse_blocks", "global_order"]

Node = tuple[int, int]  # (gpu, thread block position)


def global_order(keys: dict[Node, tuple], deps: dict[Node, list[tuple[Node, str]]]) -> dict[Node, int]:
    """A rank for every block: a topological order of ``deps`` (consumer -> producers), ties by ``keys``."""
    users: dict[Node, list[Node]] = defaultdict(list)
    indeg = {x: 0 for x in keys}
    for y, producers in deps.items():
        for x in dict.fromkeys(p for p, _kind in producers):
            users[x].append(y)
            indeg[y] += 1
    heap = [(keys[x], x) for x, d in indeg.items() if d == 0]
    heapq.heapify(heap)
    rank: dict[Node, int] = {}
    while heap:
        _k, x = heapq.heappop(heap)
        rank[x] = len(rank)
        for y in users[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                heapq.heappush(heap, (keys[y], y))
    if len(rank) != len(keys):
        raise ValueError("thread blocks depend on each other in a cycle")
    return rank


def _parts(tb: ThreadBlock) -> tuple[list[Op], list[Op], list[Op]]:
    """(start handshake, pipelines, end handshake) of an exporter block, ``nop`` separators dropped."""
    idx = [i for i, op in enumerate(tb.ops) if op.name == "pipeline"]
    if not idx:
        return [op for op in tb.ops if op.name != "nop"], [], []
    start = [op for op in tb.ops[:idx[0]] if op.name != "nop"]
    tail = [op for op in tb.ops[idx[-1] + 1:] if op.name != "nop"]
    return start, list(tb.ops[idx[0]:idx[-1] + 1]), tail


class _Remap:
    """Channel and remote-buffer positions of the parts in the fused block's lists."""

    def __init__(self) -> None:
        self.channels: dict[str, list[int]] = {}
        self.remote: dict[str, list[int]] = {}

    def add(self, tb: ThreadBlock) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
        cmap: dict[str, list[int]] = {}
        for ch in tb.channels:
            lst = self.channels.setdefault(ch.channel_type, [])
            cmap[ch.channel_type] = [_pos(lst, g) for g in ch.channel_ids]
        rmap: dict[str, list[int]] = {}
        for rr in tb.remote_buffer_refs or ():
            lst = self.remote.setdefault(rr.access_channel_type, [])
            rmap[rr.access_channel_type] = [_pos(lst, g) for g in rr.remote_buffer_ids]
        return cmap, rmap


def _pos(lst: list[int], x: int) -> int:
    if x not in lst:
        lst.append(x)
    return lst.index(x)


def _remap_op(op: Op, cmap: dict[str, list[int]], rmap: dict[str, list[int]]) -> Op:
    ctype = op.channel_type
    changes: dict = {}
    if op.channel_ids is not None and ctype in cmap:
        changes["channel_ids"] = tuple(cmap[ctype][i] for i in op.channel_ids)

    def ref(r: BufRef) -> BufRef:
        return r if r.buffer_id is None else replace(r, buffer_id=rmap[ctype][r.buffer_id])

    if op.src is not None:
        changes["src"] = tuple(ref(r) for r in op.src)
    if op.dst is not None:
        changes["dst"] = tuple(ref(r) for r in op.dst)
    if op.ops is not None:
        changes["ops"] = tuple(_remap_op(x, cmap, rmap) for x in op.ops)
    return replace(op, **changes)


def _merge_sync(ops: list[Op]) -> list[Op]:
    """Signals of one name and channel type in as few operations as the executor allows (8 channels each), then
    waits likewise: every signal before any wait."""
    out: list[Op] = []
    for names in (("signal", "rlxsignal"), ("wait", "rlxwait")):
        groups: dict[tuple[str, str | None], list[int]] = {}
        for op in ops:
            if op.name in names:
                groups.setdefault((op.name, op.channel_type), []).extend(op.channel_ids or ())
        for (name, ctype), ids in groups.items():
            for i in range(0, len(ids), MAX_CHANNEL_PER_OPERATION):
                out.append(Op(name, ctype, tuple(ids[i:i + MAX_CHANNEL_PER_OPERATION])))
    return out


def fused_block(tbs: list[ThreadBlock], new_id: int) -> ThreadBlock:
    """One block running ``tbs`` (in the order given) as described in the module docstring."""
    if len(tbs) == 1:
        return replace(tbs[0], id=new_id)
    remap = _Remap()
    starts: list[Op] = []
    pipes: list[Op] = []
    tails: list[Op] = []
    for tb in tbs:
        cmap, rmap = remap.add(tb)
        start, mid, tail = _parts(tb)
        starts += [_remap_op(op, cmap, rmap) for op in start]
        pipes += [_remap_op(op, cmap, rmap) for op in mid]
        tails += [_remap_op(op, cmap, rmap) for op in tail]
    ops: list[Op] = []
    if starts:
        ops += _merge_sync(starts) + [Op("nop")]
    ops += pipes
    if tails:
        ops += [Op("nop")] + _merge_sync(tails)
    chans = tuple(TbChannel(t, tuple(remap.channels[t])) for t in ("memory", "port") if remap.channels.get(t))
    refs = tuple(RemoteBufferRef(t, tuple(remap.remote[t])) for t in ("memory", "port") if remap.remote.get(t))
    return ThreadBlock(new_id, tuple(ops), chans, refs or None)


def _fits(tb: ThreadBlock) -> bool:
    return (executor_ops(tb) <= MAX_OPERATION and all(len(c.channel_ids) <= MAX_CHANNEL for c in tb.channels)
            and all(len(r.remote_buffer_ids) <= MAX_CHANNEL for r in tb.remote_buffer_refs or ()))


def fuse_blocks(plan: Plan, keys: dict[Node, tuple], deps: dict[Node, list[tuple[Node, str]]],
                max_threadblocks: int, coarser: list | None = None) -> Plan:
    """``plan`` with blocks of one GPU fused (module docstring) until each GPU has at most ``max_threadblocks``
    (or no more fusing is possible): only blocks whose fuse key (``keys[node][:4]``: phase, level, role, peer) is
    equal, the ones moving the fewest chunks first (:func:`_fuse_gpu`), each fused block within the executor's
    limits (64 operations, 16 channels and remote buffers per type); the result may still exceed the limit."""
    order = global_order(keys, deps)
    gpus = []
    for g, gp in enumerate(plan.gpus):
        blocks = [[t] for t in range(len(gp.threadblocks))]
        if len(blocks) > max_threadblocks:
            blocks = _fuse_gpu(g, gp, keys, order, max_threadblocks)
        tbs = tuple(fused_block([gp.threadblocks[t] for t in sorted(b, key=lambda t: order[(g, t)])], i)
                    for i, b in enumerate(sorted(blocks, key=lambda b: min(order[(g, t)] for t in b))))
        gpus.append(replace(gp, threadblocks=tbs))
    return replace(plan, gpus=tuple(gpus))


def volume(tb: ThreadBlock) -> int:
    """Chunks a block moves per call, as far as its operations say (puts' destinations, remote reads)."""
    total = 0
    for op in tb.ops:
        if op.name != "pipeline":
            continue
        for x in op.ops or ():
            if x.name in ("put", "pws", "pwsf"):
                total += sum(r.size for r in x.dst or ())
            elif x.name in ("rre", "rres", "get"):
                total += sum(r.size for r in (x.src or ())[1:] if r.buffer_id is not None)
    return total


def _fuse_gpu(g: int, gp: GpuPlan, keys: dict[Node, tuple], order: dict[Node, int], limit: int) -> list[list[int]]:
    """Fuse, one pair at a time, the two smallest blocks (by :func:`volume`) of one fuse key, the pair whose
    smaller block moves the least first, until ``limit`` blocks remain or no pair fits the executor's limits."""
    groups: dict[tuple, list[list[int]]] = defaultdict(list)
    vol: dict[tuple[int, ...], int] = {}
    for t in range(len(gp.threadblocks)):
        groups[keys[(g, t)][:4]].append([t])
        vol[(t,)] = volume(gp.threadblocks[t])
    total = len(gp.threadblocks)
    stuck: set[tuple] = set()
    while total > limit:
        best = None
        for key, bins in groups.items():
            if len(bins) < 2 or key in stuck:
                continue
            a, b = sorted(bins, key=lambda x: (vol[tuple(x)], x))[:2]
            cost = (min(vol[tuple(a)], vol[tuple(b)]), key)
            if best is None or cost < best[0]:
                best = (cost, key, a, b)
        if best is None:
            break
        _cost, key, a, b = best
        merged = sorted(a + b, key=lambda t: order[(g, t)])
        if not _fits(fused_block([gp.threadblocks[t] for t in merged], 0)):
            stuck.add(key)  # its two smallest do not fit together: leave the group as it is
            continue
        groups[key] = [x for x in groups[key] if x is not a and x is not b] + [merged]
        vol[tuple(merged)] = vol[tuple(a)] + vol[tuple(b)]
        total -= 1
    return [b for bins in groups.values() for b in bins]
