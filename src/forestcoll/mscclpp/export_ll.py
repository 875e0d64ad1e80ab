"""The LL (packet) lowering of a tree schedule: every hop carries packets, whose flags replace signals.

Scratch slots hold packets (the executor doubles LL scratch and alternates halves between calls).  Out-trees:
the root packs its piece into a local slot (``cpkt``; for allreduce the root's reduction ``recpkt`` leaves
it there), every node that has the piece in a slot forwards it to its children's slots (``rppkt`` through
memory channels, a raw ``ppkt`` of the packets through port channels) and unpacks it into its output
(``upkt``).  In-trees: a leaf packs its input into its parent's slot (``ppkt``); an inner node adds its input
to its children's packets and sends the sum on as packets (``respkt``; through a port channel ``recpkt`` to a
local slot, then ``ppkt``); the root's sum goes to its output (``repkt``).  Readers spin until the packets
of this call have landed, so there are no signals, and a block's operations are sorted by (phase, level):
every operation waits only for packets written at lower levels, so nothing can deadlock.
"""

from __future__ import annotations

from collections import defaultdict

from forestcoll.mscclpp.lower import Lowering, plan_chunks
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
from forestcoll.mscclpp.semantics import (
    MAX_BUFFERS_PER_OPERATION,
    MAX_CHANNEL,
    MAX_CHANNEL_PER_OPERATION,
    MAX_OPERATION,
)

MAX_PAIRS = 10


class _Op:
    """An LL operation before emission: references are (gpu or None, type, index, size)."""

    __slots__ = ("gpu", "key", "name", "src", "dst", "ctype", "port_peers", "order")

    def __init__(self, gpu: int, key: tuple, name: str, src: list, dst: list, ctype: str | None = None,
                 order: tuple = ()) -> None:
        self.gpu, self.key, self.name, self.src, self.dst, self.ctype, self.order = gpu, key, name, src, dst, ctype, order
        self.port_peers: list[int] = []


def lower_ll(low: Lowering, name: str, inplace: bool, lo: int, hi: int) -> Plan:
    """The LL plan of the schedule behind ``low``."""
    from forestcoll.mscclpp.export import ExportError

    coll, n, k = low.coll, low.n, low.k
    scratch = [0] * n  # packet slots (chunk indexes; packets take twice the bytes)
    data = [0] * n  # plain-data slots, placed after the packets' bytes ("sd" references)

    def slot(g: int, cnt: int) -> int:
        s = scratch[g]
        scratch[g] += cnt
        return s

    def data_slot(g: int, cnt: int) -> int:
        s = data[g]
        data[g] += cnt
        return s

    ops: list[_Op] = []

    def fold(v: int, key: tuple, first: tuple, pkts: list, cnt: int, order: tuple) -> tuple[tuple, list]:
        """Add packet slots to ``first`` into plain partial sums (``repkt``) until one operation holds the rest."""
        room = MAX_BUFFERS_PER_OPERATION - 1
        while len(pkts) > room:
            acc = (None, "sd", data_slot(v, cnt), cnt)
            ops.append(_Op(v, key, "repkt", [first, *pkts[:room]], [acc], order=order))
            first, pkts = acc, pkts[room:]
        return first, pkts

    final_slot: dict[tuple[int, int], tuple[int, tuple]] = {}  # allreduce: (root, start) -> (slot of the sum, its key)
    for pc in low.pieces:
        cnt, base = pc.cnt, low.base(pc)
        order = (pc.root, pc.start)
        for t in pc.trees:
            if t.direction == "in":
                inbox: dict[tuple[int, int], int] = {}  # (parent, child) -> slot at the parent
                for v in sorted(t.level, key=lambda x: (t.level[x], x)):
                    for c in t.children.get(v, []):
                        inbox[(v, c)] = slot(v, cnt)
                for v in sorted(t.level, key=lambda x: (t.level[x], x)):
                    kids = t.children.get(v, [])
                    key = (t.phase, t.level[v])
                    inp = (None, "i", base, cnt)
                    pkts = [(None, "s", inbox[(v, c)], cnt) for c in kids]
                    inp, pkts = fold(v, key, inp, pkts, cnt, order)  # a node with more children than one op holds
                    if v == t.root:
                        out = (None, "o", pc.start if coll in ("reduce_scatter", "reduce") else base, cnt)
                        if coll == "allreduce":
                            st = slot(v, cnt)
                            final_slot[(pc.root, pc.start)] = (st, key)
                            ops.append(_Op(v, key, "recpkt", [inp, *pkts], [out, (None, "s", st, cnt)], order=order))
                        else:
                            ops.append(_Op(v, key, "repkt", [inp, *pkts], [out], order=order))
                        continue
                    p = t.parent[v]
                    dest = (p, "s", inbox[(p, v)], cnt)
                    if not kids:
                        if low.via(t, v, p) == "memory":
                            ops.append(_Op(v, key, "ppkt", [inp], [dest], "memory", order))
                        else:
                            st = slot(v, cnt)
                            ops.append(_Op(v, key, "cpkt", [inp], [(None, "s", st, cnt)], order=order))
                            x = _Op(v, key, "ppkt", [(None, "s", st, cnt)], [dest], "port", order)
                            x.port_peers = [p]
                            ops.append(x)
                        continue
                    part = (None, "o", base, cnt) if coll == "allreduce" else (None, "sd", data_slot(v, cnt), cnt)
                    if low.via(t, v, p) == "memory":
                        ops.append(_Op(v, key, "respkt", [inp, *pkts], [part, dest], "memory", order))
                    else:
                        st = slot(v, cnt)
                        ops.append(_Op(v, key, "recpkt", [inp, *pkts], [part, (None, "s", st, cnt)], order=order))
                        x = _Op(v, key, "ppkt", [(None, "s", st, cnt)], [dest], "port", order)
                        x.port_peers = [p]
                        ops.append(x)
            else:
                root = t.root
                have: dict[int, int] = {}  # node -> its slot holding the piece as packets
                # the root's sends share a block with the operation that packed the piece (a port put copies the
                # packets raw, so it must come after them in one block)
                if coll == "allreduce":
                    have[root], root_key = final_slot[(pc.root, pc.start)]
                else:
                    root_key = (t.phase, 0)
                    st = slot(root, cnt)
                    have[root] = st
                    ops.append(_Op(root, root_key, "cpkt", [(None, "i", pc.start, cnt)], [(None, "s", st, cnt)],
                                   order=order))
                    if not inplace:
                        ops.append(_Op(root, root_key, "copy", [(None, "i", pc.start, cnt)],
                                       [(None, "o", base, cnt)], order=order))
                for v in sorted(t.level, key=lambda x: (t.level[x], x)):
                    if v != root:
                        have[v] = slot(v, cnt)
                for v in sorted(t.level, key=lambda x: (t.level[x], x)):
                    key = root_key if v == root else (t.phase, t.level[v])
                    mine = (None, "s", have[v], cnt)
                    if v != root:
                        ops.append(_Op(v, key, "upkt", [mine], [(None, "o", base, cnt)], order=order))
                    kids = t.children.get(v, [])
                    mem = [c for c in kids if low.via(t, v, c) == "memory"]
                    port = [c for c in kids if low.via(t, v, c) == "port"]
                    for part in _chunks(mem, MAX_PAIRS):
                        ops.append(_Op(v, key, "rppkt", [mine], [(c, "s", have[c], cnt) for c in part], "memory",
                                       order))
                    for part in _chunks(port, MAX_CHANNEL_PER_OPERATION):
                        x = _Op(v, key, "ppkt", [mine] * len(part), [(c, "s", have[c], cnt) for c in part], "port",
                                order)
                        x.port_peers = list(part)
                        ops.append(x)
    # thread blocks: one per (phase, level) and GPU, operations in piece order, split at the operation limit
    groups: dict[tuple[int, tuple], list[_Op]] = defaultdict(list)
    for x in ops:
        groups[(x.gpu, x.key)].append(x)
    per_gpu: list[list[list[_Op]]] = [[] for _ in range(n)]
    for (g, key) in sorted(groups):
        members = groups[(g, key)]
        for part in _split(members):
            per_gpu[g].append(part)
    # channels: one port channel pair per (sender block, receiver GPU); memory channels are not needed
    pairs: dict[tuple[int, int], list[tuple[tuple[int, int], int]]] = defaultdict(list)
    port_of: dict[tuple[tuple[int, int], int], tuple[int, int]] = {}
    gpu_ports: list[list[int]] = [[] for _ in range(n)]
    for g, tbs in enumerate(per_gpu):
        for t, members in enumerate(tbs):
            for x in members:
                for peer in x.port_peers:
                    if ((g, t), peer) not in port_of:
                        port_of[((g, t), peer)] = (-1, -1)
                        pairs[(min(g, peer), max(g, peer))].append(((g, t), peer))
    for (a, b) in sorted(pairs):
        for (src, peer) in pairs[(a, b)]:
            g = src[0]
            port_of[(src, peer)] = (len(gpu_ports[g]), len(gpu_ports[peer]))
            gpu_ports[g].append(peer)
            gpu_ports[peer].append(g)
    gpus = []
    in_chunks, out_chunks = plan_chunks(low.entry, low.shares, k)
    # every GPU's scratch as large as the largest: a sender puts packets into a peer's scratch at its *own* double-
    # buffer offset (scratchOffset_, half its own scratch), so the halves must agree (GPUs that own shards of
    # different weights, or asymmetric fabrics, use different numbers of slots)
    sc = max(2 * scratch[g] + data[g] if data[g] else scratch[g] for g in range(n))
    for g, tbs in enumerate(per_gpu):
        remote: dict[tuple[int, str], set[str]] = {}
        built = []
        for t, members in enumerate(tbs):
            refs: dict[str, list[tuple[int, str]]] = {"memory": [], "port": []}
            chans: list[int] = []
            out_ops: list[Op] = []
            prev_kind = None
            partial: set[int] = set()  # plain partial sums written by this block's folds
            for x in members:
                kind = "raw" if x.name in ("ppkt",) and x.ctype == "port" else "pkt"
                folded = any(r[1] == "sd" and r[2] in partial for r in x.src)
                if out_ops and (kind == "raw" or prev_kind == "raw" or x.name in ("copy",) or folded):
                    out_ops.append(Op("nop"))
                prev_kind = kind
                partial.update(r[2] for r in x.dst if r[1] == "sd")

                def ref(r, ctype=None, g=g, refs=refs, remote=remote):
                    gpu, btype, index, size = r
                    if btype == "sd":
                        return BufRef(2 * scratch[g] + index, size, type="s")
                    if gpu is None:
                        return BufRef(index, size, type=btype)
                    key = (gpu, btype)
                    remote.setdefault(key, set()).add(ctype)
                    if key not in refs[ctype]:
                        refs[ctype].append(key)
                    return BufRef(index, size, buffer_id=refs[ctype].index(key))

                if x.name == "ppkt" and x.ctype == "port":
                    cids = []
                    for peer in x.port_peers:
                        gidx = port_of[((g, t), peer)][0]
                        if gidx not in chans:
                            chans.append(gidx)
                        cids.append(chans.index(gidx))
                    out_ops.append(Op("ppkt", "port", tuple(cids), src=tuple(ref(r) for r in x.src),
                                      dst=tuple(ref(r, "port") for r in x.dst)))
                elif x.name in ("ppkt", "rppkt"):
                    out_ops.append(Op(x.name, "memory", src=tuple(ref(r) for r in x.src),
                                      dst=tuple(ref(r, "memory") for r in x.dst)))
                elif x.name in ("respkt",):
                    out_ops.append(Op("respkt", "memory", src=tuple(ref(r) for r in x.src),
                                      dst=(ref(x.dst[0]), *(ref(r, "memory") for r in x.dst[1:])), reduce_op="sum"))
                elif x.name in ("repkt", "recpkt"):
                    out_ops.append(Op(x.name, src=tuple(ref(r) for r in x.src), dst=tuple(ref(r) for r in x.dst),
                                      reduce_op="sum"))
                else:  # cpkt, upkt, copy
                    out_ops.append(Op(x.name, src=tuple(ref(r) for r in x.src), dst=tuple(ref(r) for r in x.dst)))
            if len(out_ops) > MAX_OPERATION or len(chans) > MAX_CHANNEL or any(len(v) > MAX_CHANNEL for v in refs.values()):
                raise ExportError(f"the LL plan needs {len(out_ops)} operations, {len(chans)} port channels in one thread "
                                  f"block of gpu {g}; the executor allows {MAX_OPERATION} and {MAX_CHANNEL}: use the Simple "
                                  "protocol or a smaller k")
            built.append((out_ops, chans, refs))
        order = sorted(remote)
        rb_index = {key: i for i, key in enumerate(order)}
        tbs_json = []
        for t, (out_ops, chans, refs) in enumerate(built):
            rrefs = tuple(RemoteBufferRef(ct, tuple(rb_index[r] for r in refs[ct])) for ct in ("memory", "port")
                          if refs[ct])
            tbs_json.append(ThreadBlock(t, tuple(out_ops), (TbChannel("port", tuple(chans)),) if chans else (), rrefs))
        channels = (Channel("port", tuple(gpu_ports[g])),) if gpu_ports[g] else ()
        rbs = tuple(RemoteBuffer(r, ty, tuple(sorted(remote[(r, ty)], key=("memory", "port").index))) for r, ty in order)
        gpus.append(GpuPlan(g, in_chunks, out_chunks, sc, tuple(tbs_json), channels, rbs, ()))
    return Plan(name, low.entry.mscclpp, "LL", inplace, tuple(gpus), reuse_resources=False,
                num_threads_per_block=1024, use_double_scratch_buffer=True, buffer_alignment=16,
                min_message_size=lo, max_message_size=hi)


def _chunks(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _split(members: list[_Op]) -> list[list[_Op]]:
    """Operations of one (phase, level) group in blocks of about 30 (room for the nops between them), never
    splitting one piece's operations (a put of packets, a folded sum, must follow their writer in its block)."""
    out: list[list[_Op]] = []
    cur: list[_Op] = []
    for x in sorted(members, key=lambda o: o.order):
        if len(cur) >= 30 and x.order != cur[-1].order:  # a piece's operations stay in one block (their order)
            out.append(cur)
            cur = []
        cur.append(x)
    if cur:
        out.append(cur)
    return out
