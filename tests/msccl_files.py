"""Small hand-written MSCCL files for the tests, each valid or broken in one named way."""

from __future__ import annotations


def step(s, type, srcbuf="i", srcoff=0, dstbuf="o", dstoff=0, cnt=1, depid=-1, deps=-1, hasdep=0):
    return (f'<step s="{s}" type="{type}" srcbuf="{srcbuf}" srcoff="{srcoff}" dstbuf="{dstbuf}" dstoff="{dstoff}" '
            f'cnt="{cnt}" depid="{depid}" deps="{deps}" hasdep="{hasdep}"/>')


def tb(id, send, recv, steps, chan=0):
    return f'<tb id="{id}" send="{send}" recv="{recv}" chan="{chan}">\n' + "\n".join(steps) + "\n</tb>"


def gpu(id, i, o, s, tbs):
    return f'<gpu id="{id}" i_chunks="{i}" o_chunks="{o}" s_chunks="{s}">\n' + "\n".join(tbs) + "\n</gpu>"


def algo(coll, ngpus, nchunks, gpus, *, nchannels=1, inplace=1, outofplace=0, proto="Simple", extra=""):
    return (f'<algo name="t" proto="{proto}" nchannels="{nchannels}" nchunksperloop="{nchunks}" ngpus="{ngpus}" '
            f'coll="{coll}" inplace="{inplace}" outofplace="{outofplace}" minBytes="0" maxBytes="0"{extra}>\n'
            + "\n".join(gpus) + "\n</algo>\n")


def allgather2() -> str:
    """Two GPUs swap their halves (in-place allgather): correct."""
    gpus = []
    for r in range(2):
        peer = 1 - r
        gpus.append(gpu(r, 1, 2, 0, [
            tb(0, peer, -1, [step(0, "s", "i", 0, "o", r)]),
            tb(1, -1, peer, [step(0, "r", "o", peer, "o", peer)]),
        ]))
    return algo("allgather", 2, 2, gpus)


def deadlock2() -> str:
    """Each GPU first waits to receive from the other: neither ever sends."""
    gpus = []
    for r in range(2):
        peer = 1 - r
        gpus.append(gpu(r, 1, 2, 0, [
            tb(0, peer, peer, [step(0, "r", "o", peer, "o", peer), step(1, "s", "i", 0, "o", r)]),
        ]))
    return algo("allgather", 2, 2, gpus)


def broadcast3(missing_dependency: bool = False, send_cnt: int = 1) -> str:
    """Root 0 sends to 1, which forwards to 2 from a second thread block (after its receive, via a dependency)."""
    dep = {} if missing_dependency else {"depid": 0, "deps": 0}
    g0 = gpu(0, 2, 2, 0, [tb(0, 1, -1, [step(0, "s", "i", 0, "o", 0, cnt=send_cnt)])])
    g1 = gpu(1, 2, 2, 0, [
        tb(0, -1, 0, [step(0, "r", "o", 0, "o", 0, hasdep=1)]),
        tb(1, 2, -1, [step(0, "s", "o", 0, "o", 0, **dep)]),
    ])
    g2 = gpu(2, 2, 2, 0, [tb(0, -1, 1, [step(0, "r", "o", 0, "o", 0)])])
    return algo("broadcast", 3, 1, [g0, g1, g2])


def mismatched_counts() -> str:
    """GPU 0 sends its two chunks in one step of cnt 2; GPU 1 expects two steps of cnt 1."""
    g0 = gpu(0, 2, 4, 0, [
        tb(0, 1, -1, [step(0, "s", "i", 0, "o", 0, cnt=2)]),
        tb(1, -1, 1, [step(0, "r", "o", 2, "o", 2, cnt=2)]),
    ])
    g1 = gpu(1, 2, 4, 0, [
        tb(0, 0, -1, [step(0, "s", "i", 0, "o", 2, cnt=2)]),
        tb(1, -1, 0, [step(0, "r", "o", 0, "o", 0), step(1, "r", "o", 1, "o", 1)]),
    ])
    return algo("allgather", 2, 4, [g0, g1])
