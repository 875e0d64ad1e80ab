"""Small hand-written MSCCL++ execution plans for the tests (plain JSON values, built with a few helpers)."""

from __future__ import annotations

import copy
from typing import Any

from forestcoll.mscclpp.plan import Plan, plan_from_json


def loc(t: str, index: int, size: int = 1) -> dict:
    return {"type": t, "index": index, "size": size}


def rem(buffer_id: int, index: int, size: int = 1) -> dict:
    return {"buffer_id": buffer_id, "index": index, "size": size}


def op(name: str, **kw: Any) -> dict:
    d: dict[str, Any] = {"name": name}
    for key, value in kw.items():
        d["src_buff" if key == "src" else "dst_buff" if key == "dst" else key] = value
    return d


def sig(*ids: int, ctype: str = "memory", name: str = "signal") -> dict:
    return {"name": name, "channel_ids": list(ids), "channel_type": ctype}


def wait(*ids: int, ctype: str = "memory", name: str = "wait") -> dict:
    return {"name": name, "channel_ids": list(ids), "channel_type": ctype}


NOP = {"name": "nop"}


def tb(id: int, ops: list[dict], memory: list[int] | None = None, port: list[int] | None = None,
       remote_memory: list[int] | None = None, remote_port: list[int] | None = None,
       switch: list[int] | None = None) -> dict:
    chans = []
    if memory:
        chans.append({"channel_type": "memory", "channel_ids": memory})
    if port:
        chans.append({"channel_type": "port", "channel_ids": port})
    if switch:
        chans.append({"channel_type": "switch", "channel_ids": switch})
    refs = []
    if remote_memory:
        refs.append({"access_channel_type": "memory", "remote_buffer_ids": remote_memory})
    if remote_port:
        refs.append({"access_channel_type": "port", "remote_buffer_ids": remote_port})
    return {"id": id, "ops": ops, "channels": chans, "remote_buffer_refs": refs}


def gpu(id: int, i: int, o: int, s: int, tbs: list[dict], memory: list[int] | None = None,
        port: list[int] | None = None, remote: list[tuple[int, str, list[str]]] | None = None,
        semaphores: list[int] | None = None, switch: list[dict] | None = None) -> dict:
    chans = []
    if memory:
        chans.append({"channel_type": "memory", "connected_to": memory})
    if port:
        chans.append({"channel_type": "port", "connected_to": port})
    for sw in switch or []:
        chans.append(sw)
    return {"id": id, "input_chunks": i, "output_chunks": o, "scratch_chunks": s, "threadblocks": tbs,
            "channels": chans,
            "remote_buffers": [{"rank": r, "type": t, "access_channel_types": a} for r, t, a in remote or []],
            "semaphores": [{"init_value": v} for v in semaphores or []]}


def plan(collective: str, gpus: list[dict], *, protocol: str = "Simple", inplace: bool = True, **top: Any) -> dict:
    d = {"name": "t", "collective": collective, "protocol": protocol, "inplace": inplace, "reuse_resources": False,
         "gpus": gpus, "num_threads_per_block": 1024, "use_double_scratch_buffer": protocol == "LL",
         "buffer_alignment": 16, "min_message_size": 0, "max_message_size": (1 << 32) - 1}
    d.update(top)
    return d


def parsed(d: dict) -> Plan:
    return plan_from_json(copy.deepcopy(d), "t.json")


# ----- complete plans ---------------------------------------------------------------------------------


def allgather_put(port: bool = False, handshake: bool = True, flush: bool = True) -> dict:
    """Two GPUs put their own slot of the output into the peer's (in-place allgather) and signal it; through
    port channels the put is ``pwsf`` (the flush: the proxy has read the source before the kernel ends)."""
    ctype = "port" if port else "memory"
    gpus = []
    for r in range(2):
        peer = 1 - r
        ops = []
        if handshake:
            ops += [sig(0, ctype=ctype, name="rlxsignal" if not port else "signal"),
                    wait(0, ctype=ctype, name="rlxwait" if not port else "wait"), NOP]
        if port and flush:
            ops += [op("pwsf", src=[loc("o", r)], dst=[rem(0, r)], channel_type=ctype, channel_ids=[0]), NOP,
                    wait(0, ctype=ctype), NOP]
        else:
            put = op("put", src=[loc("o", r)], dst=[rem(0, r)], channel_type=ctype)
            if port:
                put["channel_ids"] = [0]
            ops += [put, NOP, sig(0, ctype=ctype), wait(0, ctype=ctype), NOP]
        t = tb(0, ops, memory=[0] if not port else None, port=[0] if port else None,
               remote_memory=[0] if not port else None, remote_port=[0] if port else None)
        gpus.append(gpu(r, 1, 2, 0, [t], memory=[peer] if not port else None, port=[peer] if port else None,
                        remote=[(peer, "o", [ctype])]))
    return plan("allgather", gpus)


def allreduce_rre() -> dict:
    """Two GPUs each reduce one half by reading the peer's input (rres writes the sum to both)."""
    gpus = []
    for r in range(2):
        peer = 1 - r
        ops = [sig(0, name="rlxsignal"), wait(0, name="rlxwait"), NOP,
               op("rres", src=[loc("i", r), rem(0, r)], dst=[loc("i", r), rem(0, r)], channel_type="memory",
                  reduce_op="sum"),
               NOP, sig(0), wait(0), NOP]
        gpus.append(gpu(r, 2, 2, 0, [tb(0, ops, memory=[0], remote_memory=[0])], memory=[peer],
                        remote=[(peer, "i", ["memory"])]))
    return plan("allreduce", gpus)


def allreduce_packets() -> dict:
    """Two GPUs, LL: each sends the peer's half as packets, reduces its own half and sends the sum back."""
    gpus = []
    for r in range(2):
        peer = 1 - r
        ops = [op("ppkt", src=[loc("i", peer)], dst=[rem(0, 0)], channel_type="memory"),
               op("respkt", src=[loc("i", r), loc("s", 0)], dst=[loc("i", r), rem(0, 1)], channel_type="memory",
                  reduce_op="sum"),
               op("upkt", src=[loc("s", 1)], dst=[loc("i", peer)])]
        gpus.append(gpu(r, 2, 2, 2, [tb(0, ops, remote_memory=[0])], remote=[(peer, "s", ["memory"])]))
    return plan("allreduce", gpus, protocol="LL")
