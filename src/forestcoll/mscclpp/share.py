"""An allreduce's reduce-scatter and allgather blocks share thread blocks (the third stage of the MSCCL++ export,
used only when a GPU has more blocks than it runs at once).

An allreduce plan is a reduce-scatter (in-tree blocks: role ``up``) then an allgather (out-tree blocks: ``down``,
and the ``sink`` blocks that only wait for arrivals).  A *shared* block runs one in-tree block's pipeline, then
one out-tree block's: first the start handshakes of both parts (every signal, then every wait: these wait only for
other blocks' start signals, which come first in their blocks), then the in-tree pipeline, a ``nop``, the out-tree
pipeline, then the end handshakes of both parts (signals, then waits, then the parts' port flushes).  Each part keeps its own channels and
semaphores (a channel pair joins two parts, not two shared blocks), so every channel sees as many signals as
waits, in the same order, and the executor pairs channels exactly as before (the GPU's channel lists do not
change; only a block's list of them grows).

No deadlock: an in-tree pipeline waits only for in-tree pipelines of lower tree levels (its children's partial
sums), and every in-tree part is the first pipeline of its block, so by induction on the level every in-tree
part ends.  An out-tree pipeline waits for out-tree pipelines of lower levels and for the in-tree root's
reduction of its piece (a semaphore on its GPU), both of which end (induction again), and it is preceded in its
block only by an in-tree part.  End handshakes wait only for other blocks' end signals, which follow the
pipelines.  So in-tree operations never wait for out-tree ones.

What it costs: an out-tree part starts when its block's in-tree part has ended (the reduce-scatter part drains
first), which the allreduce bound (reduce-scatter time + allgather time) already pays; in exchange a GPU runs up
to twice the blocks' worth of trees, so a finer layout fits.

Executor semantics relied on (microsoft/mscclpp 1f5f065): a block runs its top-level operations in order, a
``pipeline`` taking its inner operations as ``nOperations + 1`` steps (``src/core/include/execution_kernel.hpp``,
``executionKernel``'s loop and ``executeDeviceFunction``'s ``*nSteps = op.nOperations + 1``), every iteration of a
pipeline before the next operation (``handlePipeline``); a memory-channel wait counts its own expected token
(``include/mscclpp/semaphore_device.hpp``, ``wait``: ``incExpectedInbound`` then poll), so the k-th wait of a
channel meets its k-th signal whatever else the block did in between.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from forestcoll.mscclpp.emit import Tb
from forestcoll.mscclpp.plan import BufRef, GpuPlan, Op, Plan, RemoteBufferRef, TbChannel, ThreadBlock, executor_ops
from forestcoll.mscclpp.semantics import MAX_CHANNEL, MAX_CHANNEL_PER_OPERATION, MAX_OPERATION

__all__ = ["IN_ROLES", "OUT_ROLES", "BlockInfo", "Counts", "block_info", "counts", "fits", "fits_shared", "group_blocks",
           "share_blocks", "shared_block"]

IN_ROLES = ("up",)  # reduce-scatter (in-tree) blocks
OUT_ROLES = ("down", "sink")  # allgather (out-tree) blocks


def _parts(tb: ThreadBlock) -> tuple[list[Op], list[Op], list[Op]]:
    """(start handshake, pipelines, end handshake) of an exporter block, ``nop`` separators dropped."""
    idx = [i for i, op in enumerate(tb.ops) if op.name == "pipeline"]
    if not idx:
        return [op for op in tb.ops if op.name != "nop"], [], []
    start = [op for op in tb.ops[:idx[0]] if op.name != "nop"]
    tail = [op for op in tb.ops[idx[-1] + 1:] if op.name != "nop"]
    return start, list(tb.ops[idx[0]:idx[-1] + 1]), tail


class _Remap:
    """Channel and remote-buffer positions of the parts in the shared block's lists."""

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
    waits likewise: every signal before any wait; flushes last, as they were."""
    out: list[Op] = []
    for names in (("signal", "rlxsignal"), ("wait", "rlxwait")):
        groups: dict[tuple[str, str | None], list[int]] = {}
        for op in ops:
            if op.name in names:
                groups.setdefault((op.name, op.channel_type), []).extend(op.channel_ids or ())
        for (name, ctype), ids in groups.items():
            for i in range(0, len(ids), MAX_CHANNEL_PER_OPERATION):
                out.append(Op(name, ctype, tuple(ids[i:i + MAX_CHANNEL_PER_OPERATION])))
    return out + [op for op in ops if op.name == "flush"]


def shared_block(tbs: list[ThreadBlock], new_id: int) -> ThreadBlock:
    """One block running ``tbs`` (an in-tree block, then an out-tree block) as the module docstring says."""
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
        if pipes and mid:
            pipes.append(Op("nop"))  # the phases meet at a block-wide barrier
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


_SYNC = {"signal": 0, "rlxsignal": 0, "wait": 1, "rlxwait": 1}


@dataclass(frozen=True)
class Counts:
    """What decides whether parts fit one shared block, counted once per part: whether it has start / end handshake
    operations, channel ids of its start and end signals and waits per (name, channel type), executor operations of
    its pipelines (0 and no pipeline: ``pipes`` False), and its channel and remote-buffer ids per channel type."""

    start: bool
    tail: bool
    start_sync: tuple[tuple[tuple[str, str | None], int], ...]
    tail_sync: tuple[tuple[tuple[str, str | None], int], ...]
    pipe_ops: int
    pipes: bool
    channels: tuple[tuple[str, frozenset[int]], ...]
    remote: tuple[tuple[str, frozenset[int]], ...]
    tail_flushes: int = 0  # flushes of its end (kept as they are, after the end's signals and waits)


def _sync_counts(ops: list[Op]) -> tuple[tuple[tuple[str, str | None], int], ...]:
    """Channel ids per (name, channel type) of the signals and waits among ``ops`` (what :func:`_merge_sync`
    packs)."""
    out: dict[tuple[str, str | None], int] = {}
    for op in ops:
        if op.name in _SYNC:
            key = (op.name, op.channel_type)
            out[key] = out.get(key, 0) + len(op.channel_ids or ())
    return tuple(out.items())


def counts(tb: ThreadBlock) -> Counts:
    """The :class:`Counts` of an exporter block (a part of a shared block)."""
    start, mid, tail = _parts(tb)
    chans: dict[str, set[int]] = {}
    for ch in tb.channels:
        chans.setdefault(ch.channel_type, set()).update(ch.channel_ids)
    remote: dict[str, set[int]] = {}
    for rr in tb.remote_buffer_refs or ():
        remote.setdefault(rr.access_channel_type, set()).update(rr.remote_buffer_ids)
    return Counts(bool(start), bool(tail), _sync_counts(start), _sync_counts(tail),
                  sum(1 + len(op.ops or ()) for op in mid), bool(mid),
                  tuple((t, frozenset(ids)) for t, ids in chans.items()),
                  tuple((t, frozenset(ids)) for t, ids in remote.items()), sum(op.name == "flush" for op in tail))


def _packed(parts: list[tuple[tuple[tuple[str, str | None], int], ...]]) -> int:
    """Operations :func:`_merge_sync` makes of the parts' signals and waits (channel ids per operation at most
    ``MAX_CHANNEL_PER_OPERATION``)."""
    total: dict[tuple[str, str | None], int] = {}
    for part in parts:
        for key, n in part:
            total[key] = total.get(key, 0) + n
    return sum(-(-n // MAX_CHANNEL_PER_OPERATION) for n in total.values())


def fits_shared(parts: list[Counts]) -> bool:
    """:func:`fits` of :func:`shared_block` of two or more parts, from their :class:`Counts` (the same verdict, without
    building the block)."""
    nops = sum(c.pipe_ops for c in parts) + max(0, sum(c.pipes for c in parts) - 1)
    if any(c.start for c in parts):
        nops += _packed([c.start_sync for c in parts]) + 1
    if any(c.tail for c in parts):
        nops += _packed([c.tail_sync for c in parts]) + 1 + sum(c.tail_flushes for c in parts)
    if nops > MAX_OPERATION:
        return False
    for attr in ("channels", "remote"):
        for t in ("memory", "port"):  # the types shared_block keeps
            ids: set[int] = set()
            for c in parts:
                for ctype, part_ids in getattr(c, attr):
                    if ctype == t:
                        ids |= part_ids
            if len(ids) > MAX_CHANNEL:
                return False
    return True


def fits(tb: ThreadBlock) -> bool:
    """``tb`` within the executor's per-block limits (64 operations, 16 channels and remote buffers per type)."""
    return (executor_ops(tb) <= MAX_OPERATION and all(len(c.channel_ids) <= MAX_CHANNEL for c in tb.channels)
            and all(len(r.remote_buffer_ids) <= MAX_CHANNEL for r in tb.remote_buffer_refs or ()))


def volume(tb: ThreadBlock) -> int:
    """Chunks a block moves per call, as far as its operations say (puts' destinations, remote reads)."""
    total = 0
    for op in tb.ops:
        for x in op.ops or ():
            if x.name in ("put", "pws", "pwsf"):
                total += sum(r.size for r in x.dst or ())
            elif x.name in ("rre", "rres", "get"):
                total += sum(r.size for r in (x.src or ())[1:] if r.buffer_id is not None)
    return total


@dataclass(frozen=True)
class BlockInfo:
    """What the pairing needs to know of an exporter block: its role (``up``: in-tree; ``down``, ``sink``:
    out-tree), its tree level (in-tree: height of the subtree, so the root's reduction is the highest; out-tree:
    depth), whether it waits for anything in its pipeline (an in-tree block that waits for nothing is a leaf: its
    pipeline ends at once), whether it waits for an in-tree root's reduction (the out-tree blocks at the roots),
    and the pieces it moves."""

    role: str
    level: int
    waits: bool
    after_reduction: bool
    pieces: frozenset


def block_info(tb: Tb) -> BlockInfo:
    """The :class:`BlockInfo` of an exporter block (:class:`forestcoll.mscclpp.emit.Tb`, key (phase, level, role,
    peer, ...))."""
    return BlockInfo(tb.key[2], tb.key[1], any(a.producers for a in tb.acts),
                     any(kind == "local" for a in tb.acts for _p, kind in a.producers),
                     frozenset(a.order[1:] for a in tb.acts))


def _kind(x: BlockInfo) -> int:
    """Position of a part in a shared block: 0 an in-tree leaf (waits for nothing), 1 another in-tree block, 2 an
    out-tree block that forwards, 3 a sink (only waits for arrivals)."""
    if x.role in IN_ROLES:
        return 1 if x.waits else 0
    return 3 if x.role == "sink" else 2


def group_blocks(gp: GpuPlan, info: list[BlockInfo], limit: int | None, pair: bool = True) -> list[list[int]]:
    """The blocks of GPU ``gp`` (``info[t]`` of every block ``t``) grouped into shared blocks, each running in this
    order: in-tree leaves (any number), at most one other in-tree part, at most one forwarding out-tree part,
    sinks (any number); merged only while the GPU has more than ``limit`` blocks (None: every pair it can), except
    the out-tree starts, which all pair (below).  Without ``pair`` only leaves, then sinks, join other blocks (no
    in-tree part precedes an out-tree one: every allgather still runs right behind its reduce-scatter).

    An out-tree part starts when the parts before it have ended.  A leaf's in-tree part ends at once (it waits for
    nothing), so leaves join other blocks first, for free.  Any other in-tree part ends with the reduce-scatter, so an out-tree part paired with one starts after
    it; then every out-tree should (trees left to run alone at the end would leave links idle): the blocks that
    start the out-trees (those waiting for an in-tree root's reduction) pair first, each with the in-tree root of
    its piece or else the highest in-tree block left, all of them even once the GPU is within ``limit`` (an
    out-tree whose start is paired waits for a whole in-tree part, one whose start is not runs right behind its
    reduction: with some of each, the late ones run alone at the end; mi250 allreduce k=8 in 50 blocks 132.3 GB/s
    at 1 GiB, 164.9 with every start paired), then the remaining ones while the GPU has more than ``limit``
    blocks (the highest in-tree blocks with the shallowest out-tree ones, larger volumes first).  Sinks (they only wait for arrivals; nothing waits for
    them) join other blocks last, only where still needed.  Merges that would exceed the executor's per-block limits
    are skipped."""
    tbs = gp.threadblocks
    vol = [volume(tb) for tb in tbs]
    cnt = [counts(tb) for tb in tbs]
    nops = [executor_ops(tb) for tb in tbs]
    groups: dict[int, list[int]] = {t: [t] for t in range(len(tbs))}  # keyed by a member; parts in run order
    home = list(range(len(tbs)))
    cap = 0 if limit is None else limit

    def count() -> int:
        return len(groups)

    def _rank(g: int) -> int:
        """0: the group has an in-tree part (kind 1); 1: a forwarding out-tree part; 2: only leaves or sinks."""
        kinds = {_kind(info[x]) for x in groups[g]}
        return 0 if 1 in kinds else 1 if 2 in kinds else 2

    order: dict[int, tuple[int, int, int]] = {}  # each group's place among free()'s targets, until a merge changes it

    def place(g: int) -> tuple[int, int, int]:
        """Group ``g``'s sort key as a target of :func:`free` (computed once per group content)."""
        key = order.get(g)
        if key is None:
            key = order[g] = (_rank(g), sum(nops[x] for x in groups[g]), g)
        return key

    def merge(a: int, b: int) -> bool:
        """Merge the groups of blocks ``a`` and ``b`` if their parts fit one block (at most one part of kinds 1
        and 2 each)."""
        ga, gb = home[a], home[b]
        if ga == gb:
            return False
        parts = sorted(groups[ga] + groups[gb], key=lambda t: (_kind(info[t]), t))
        kinds = [_kind(info[t]) for t in parts]
        if kinds.count(1) > 1 or kinds.count(2) > 1 or not fits_shared([cnt[t] for t in parts]):
            return False
        del groups[gb]
        groups[ga] = parts
        order.pop(ga, None)
        order.pop(gb, None)
        for t in parts:
            home[t] = ga
        return True

    by_kind = {k: sorted((t for t, x in enumerate(info) if _kind(x) == k), key=lambda t: (-vol[t], t)) for k in range(4)}

    def free(k: int) -> None:
        """Blocks of kind ``k`` onto other groups: those with an in-tree part (kind 1) first, then those with a
        forwarding out-tree part (kind 2), then the rest; the fewest operations first within each.  A group of leaves
        or sinks alone would take a thread block that a forwarder could have had (mi250:nodes=2 allreduce k=16: two
        or three blocks of 15 leaves per GPU, and more lockstep to make up for them)."""
        for t in by_kind[k]:
            if count() <= cap:
                break
            targets = sorted((g for g in groups if g != home[t]), key=place)
            for g in targets:
                if merge(g, t):
                    break

    free(0)
    if not pair:
        free(3)
        return sorted(groups.values(), key=lambda parts: min(parts))
    # in-tree parts with out-tree ones: the out-tree starts first
    inner = sorted(by_kind[1], key=lambda t: (-info[t].level, -vol[t], t))
    outs = sorted(by_kind[2], key=lambda t: (not info[t].after_reduction, info[t].level, -vol[t], t))

    def paired(t: int) -> bool:
        return any(_kind(info[x]) in (1, 2) and x != t for x in groups[home[t]])

    for b in outs:
        if not info[b].after_reduction:  # every start pairs, even below the limit: see the docstring
            break
        same = [a for a in inner if info[a].pieces & info[b].pieces]
        for a in same + inner:
            if not paired(a) and merge(a, b):
                break
    for a in inner:
        if count() <= cap:
            break
        if paired(a):
            continue
        for b in outs:
            if not paired(b) and merge(a, b):
                break
    free(3)  # last: measured, sinks behind other parts cost a little (mi250:nodes=2 k=8: 164.4 against 165.8 GB/s)
    return sorted(groups.values(), key=lambda parts: min(parts))


def share_blocks(plan: Plan, info: list[list[BlockInfo]], limit: int | None = None) -> Plan:
    """``plan`` with the blocks of every GPU grouped (:func:`group_blocks`) into shared blocks
    (:func:`shared_block`); blocks left alone stay as they are.  Block ids are renumbered in the order of each
    group's first block.  Where no GPU has more than ``limit`` blocks the plan is returned as it is; where leaves and
    sinks joining other blocks bring every GPU within it, only they do (``pair=False``: the plan keeps every
    allgather right behind its reduce-scatter; mi250 allreduce k=4 in 83 blocks 157.4 GB/s at 1 GiB, as the edge
    plan, against 156.3 with the out-tree starts paired); else every GPU's out-tree starts pair, those within the
    limit too (a tree whose allgather runs right behind its reduce-scatter beside trees whose allgathers wait for
    theirs leaves the late ones alone at the end: 134.6 there, :func:`group_blocks`)."""
    over = [limit is None or len(gp.threadblocks) > limit for gp in plan.gpus]
    if not any(over):
        return plan
    assert limit is not None or all(over)
    grouping: list[list[list[int]] | None] = [
        group_blocks(gp, info[g], limit, pair=False) if over[g] and limit is not None else None
        for g, gp in enumerate(plan.gpus)]
    if limit is None or any(grp is not None and len(grp) > limit for grp in grouping):
        grouping = [group_blocks(gp, info[g], limit) for g, gp in enumerate(plan.gpus)]
    gpus = []
    for g, gp in enumerate(plan.gpus):
        groups = grouping[g]
        if groups is None:
            gpus.append(gp)
            continue
        tbs = tuple(shared_block([gp.threadblocks[t] for t in grp], i) for i, grp in enumerate(groups))
        gpus.append(replace(gp, threadblocks=tbs))
    return replace(plan, gpus=tuple(gpus))
