"""Duplex thread blocks: a GPU's sending block and receiving block on one channel share one ``<tb send=A recv=B>``.

An MSCCL thread block has one send peer and one receive peer (RCCL: one ``Primitives`` object over ``recvPeer`` and
``sendPeer``, ROCm/rccl ``src/device/msccl_kernel_impl.h:206-220``), and RCCL loads at most 64 blocks per GPU.  The
tree lowering (:mod:`forestcoll.msccl.export`) makes one block per (gpu, direction, peer, channel); with ``duplex``
it pairs, on each GPU and channel, a send block with a receive block whose steps together keep within the runtime's
steps per block, only as many pairs as bring the GPU within the limit, forwarding pairs first (:func:`pairs`), and
the pair's steps go into one block **in the global key order** every block already follows.  The exporter does
this only when no layout fits unmerged (``ExportOptions.duplex``): in the simulator a merged block costs far more
than it saves (docs/msccl.md).

Why that cannot deadlock (docs/msccl.md, "Duplex thread blocks"): every operation has a key, a send and its receive
share it, each block runs its steps (within one loop iteration; iterations in turn) in increasing key order, each
dependency points to a smaller key of the same iteration, and each connection's sends and receives are in one order.
Take the smallest (iteration, key) not yet done: every earlier step of its block and everything it depends on are
done; if it is a receive, its send has the same key, so it is done or at the head of its own block, and every
earlier call on that connection has a smaller key and was received, so the connection is empty and one slot lets
the send go; so it can run.  That holds for any blocks whose steps follow the key, so pairing two streams does not
change it: only a merged block whose steps did not follow the key (say all its receives first) could hang.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from forestcoll.msccl.ordering import _edges, _figures_of, _tree_loads

__all__ = ["affinities", "assign", "figures", "op_affinities", "pairs"]

ORDER = {"recv": 0, "local": 1, "send": 2}  # receiving and copying blocks first: dependency targets get low ids


def affinities(pieces: list[Any], instances: int, chan_of: Callable[[Any, int, int, int], int]) -> dict[tuple, int]:
    """(send block key, receive block key) -> steps of the send block that forward what the receive block brings:
    for each tree and node, its receiving edge(s) (from the parent in an out-tree, from the children in an in-tree)
    and sending edge(s) on one channel, each of the tree's pieces once (as :func:`~forestcoll.msccl.ordering._step_counts`
    counts).  Such a pair moves one tree's pieces through the GPU in order, as a ring's block receives and sends on."""
    per_tree, shapes = _tree_loads(pieces)
    out: dict[tuple, int] = defaultdict(int)
    for tid, t in shapes.items():
        ins: dict[int, list[int]] = defaultdict(list)
        outs: dict[int, list[int]] = defaultdict(list)
        for x, y in _edges(t):
            ins[y].append(x)
            outs[x].append(y)
        for m in range(instances):
            for g in ins.keys() & outs.keys():
                for a in ins[g]:
                    for b in outs[g]:
                        ch = chan_of(t, m, a, g)
                        if chan_of(t, m, g, b) == ch:
                            out[((g, "send", b, ch), (g, "recv", a, ch))] += per_tree[tid]
    return out


def op_affinities(ops: list[Any]) -> dict[tuple, int]:
    """:func:`affinities` counted from the built operations (each send and receive names its tree, ``op.tree``, and
    its instance, ``op.key[0]``): the same figures, so the blocks built are the blocks predicted."""
    ins: dict[tuple, set[tuple]] = defaultdict(set)
    for op in ops:
        if op.kind == "recv":
            ins[(op.tree, op.key[0], op.gpu)].add((op.gpu, "recv", op.peer, op.chan))
    out: dict[tuple, int] = defaultdict(int)
    for op in ops:
        if op.kind == "send":
            for recv in ins.get((op.tree, op.key[0], op.gpu), ()):
                if recv[3] == op.chan:
                    out[((op.gpu, "send", op.peer, op.chan), recv)] += 1
    return out


def _most_pairs(steps: dict[tuple, int], limit: int, free: set[tuple]) -> dict[tuple, tuple]:
    """The largest pairing of the ``free`` blocks, on each GPU and channel: the receive blocks with the most steps
    first (ties: the lower peer), each with the unpaired send block with the fewest steps (ties: the lower peer) when
    their steps together are at most ``limit`` (a receive block that does not fit with the smallest send fits with
    none; one that does can take it without loss)."""
    sends: dict[tuple[int, int], list[tuple[int, int, tuple]]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[tuple[int, int, tuple]]] = defaultdict(list)
    for key in free:
        g, kind, peer, ch = key
        (sends if kind == "send" else recvs)[(g, ch)].append((steps[key], peer, key))
    out: dict[tuple, tuple] = {}
    for where in sorted(recvs):
        avail = sorted(sends.get(where, []))
        for cnt, _peer, key in sorted(recvs[where], key=lambda x: (-x[0], x[1])):
            if avail and avail[0][0] + cnt <= limit:
                out[avail.pop(0)[2]] = key
    return out


def pairs(steps: dict[tuple, int], limit: int, affinity: dict[tuple, int] | None = None,
          target: int = 0) -> dict[tuple, tuple]:
    """send block key -> the receive block key (both (gpu, kind, peer, channel)) it shares a block with, their steps
    together at most ``limit``; only as many pairs per GPU as bring its blocks down to ``target`` (0: as many as
    can), the least costly first: the pairs that forward the most steps (``affinity``, :func:`affinities`), then the
    pairs whose smaller stream has the fewest steps (it holds up the other the fewest times), ties by keys.  When that
    order cannot reach ``target`` on a GPU, that GPU takes the largest pairing (:func:`_most_pairs`).  Deterministic."""
    affinity = affinity or {}
    per_gpu: dict[int, list[tuple]] = defaultdict(list)
    for key in steps:
        if key[1] in ("send", "recv"):
            per_gpu[key[0]].append(key)
    blocks: dict[int, int] = defaultdict(int)
    for key in steps:
        blocks[key[0]] += 1
    out: dict[tuple, tuple] = {}
    for g in sorted(per_gpu):
        need = blocks[g] - target if target else len(per_gpu[g])
        if need <= 0:
            continue
        sends: dict[int, list[tuple]] = defaultdict(list)
        for key in per_gpu[g]:
            if key[1] == "send":
                sends[key[3]].append(key)
        cands = [((-affinity.get((snd, rcv), 0), min(steps[snd], steps[rcv]), steps[snd] + steps[rcv]), snd, rcv)
                 for rcv in per_gpu[g] if rcv[1] == "recv" for snd in sends.get(rcv[3], ())
                 if steps[snd] + steps[rcv] <= limit]
        mine: dict[tuple, tuple] = {}
        taken: set[tuple] = set()
        for _score, snd, rcv in sorted(cands):
            if len(mine) == need:
                break
            if snd not in taken and rcv not in taken:
                mine[snd] = rcv
                taken |= {snd, rcv}
        if len(mine) < need and target:
            most = _most_pairs(steps, limit, set(per_gpu[g]))
            mine = most if len(most) > len(mine) else mine
        out |= mine
    return out


def figures(steps: dict[tuple, int], n: int, limit: int, affinity: dict[tuple, int] | None = None,
            target: int = 0) -> tuple[int, int, int, int]:
    """:func:`~forestcoll.msccl.ordering._figures_of` of the blocks once :func:`pairs` merges them: (most steps in a
    block, most blocks on a GPU, most send or receive blocks of one GPU on one channel (unchanged by merging), most
    blocks holding receives or copies on a GPU)."""
    merged = dict(steps)
    for send, recv in pairs(steps, limit, affinity, target).items():
        merged[recv] += merged.pop(send)
    most_steps, tbs, _per_channel, targets = _figures_of(merged, n)
    return most_steps, tbs, _figures_of(steps, n)[2], targets


def step_key(op: Any) -> tuple:
    """A block's step order: the operation's global key (the deadlock argument above rests on it)."""
    return op.key


def assign(ops: list[Any], n: int, limit: int | None = None, affinity: dict[tuple, int] | None = None,
           target: int = 0) -> tuple[list[list[tuple[int, int, int]]], dict[tuple, list[Any]]]:
    """Group operations into thread blocks, number blocks and steps, and mark dependency targets: returns each GPU's
    blocks as (send peer, receive peer, channel), -1 for none, and the operations of each (gpu, block) in step order
    (the global key).  With ``limit`` (steps per block), send and receive blocks share blocks by :func:`pairs`."""
    groups: dict[tuple, list[Any]] = defaultdict(list)
    for op in ops:
        groups[(op.gpu, op.kind, op.peer, op.chan)].append(op)
    paired = pairs({key: len(v) for key, v in groups.items()}, limit, affinity, target) if limit is not None else {}
    partner = {recv: send for send, recv in paired.items()}
    layout: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    blocks: dict[tuple, list[Any]] = {}
    for key in sorted(groups, key=lambda g: (g[0], ORDER[g[1]], g[3], g[2])):
        if key in paired:
            continue  # in its receive block
        gpu, kind, peer, chan = key
        mate = partner.get(key)
        members = groups[key] + (groups[mate] if mate is not None else [])
        tb = len(layout[gpu])
        layout[gpu].append((peer if kind == "send" else mate[2] if mate else -1, peer if kind == "recv" else -1, chan))
        members.sort(key=step_key)
        for s, op in enumerate(members):
            op.tb, op.s = tb, s
        blocks[(gpu, tb)] = members
    for op in ops:
        if op.dep is not None:
            op.dep.hasdep = True
    return layout, blocks
