"""MSCCL++ execution plans (JSON): a dataclass model, a parser with one-line errors, a deterministic writer.

The model follows what the executor's parser (``src/core/executor/execution_plan.cc``
at microsoft/mscclpp 1f5f065) reads; docs/mscclpp.md describes every field.  A
plan is::

    {"name", "collective", "protocol": "Simple" | "LL", "inplace": bool,
     "reuse_resources"?, "num_threads_per_block"?, "use_double_scratch_buffer"?,
     "buffer_alignment"?, "min_message_size"?, "max_message_size"?,
     "gpus": [{"id", "input_chunks", "output_chunks", "scratch_chunks",
               "channels": [{"channel_type": "memory" | "port", "connected_to": [peer, ...]}
                            | {"channel_type": "switch", "buffer_type", "rank_groups": [{"size", "ranks"}]}],
               "remote_buffers": [{"rank", "type", "access_channel_types"}],
               "semaphores"?: [{"init_value"}],
               "threadblocks": [{"id", "ops": [...],
                                 "channels": [{"channel_type", "channel_ids", "buff"?}],
                                 "remote_buffer_refs"?: [{"access_channel_type", "remote_buffer_ids"}]}]}]}

The parser checks structure and types only (what would make the executor's
JSON access fail); the rules that need the whole plan (ids, references, limits)
are :mod:`forestcoll.mscclpp.lint`'s.  Keys the executor does not read are kept
(``extra``) so that ``write_plan(parse_plan(x))`` reproduces ``x``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from forestcoll.errors import ForestCollError
from forestcoll.fileio import parse_json, read_text

U64_MAX = (1 << 64) - 1
BUFFER_TYPES = ("i", "o", "s")
CHANNEL_TYPES = ("memory", "port", "switch", "none")
PROTOCOLS = ("Simple", "LL")

# Executor defaults for the optional top-level keys (ExecutionPlan::Impl's constructor and loader).
DEFAULTS: dict[str, Any] = {
    "reuse_resources": False,
    "num_threads_per_block": 1024,
    "use_double_scratch_buffer": False,
    "buffer_alignment": 16,
    "min_message_size": 0,
    "max_message_size": U64_MAX,
}
TOP_KEYS = ("name", "collective", "protocol", "inplace", "reuse_resources", "gpus", "num_threads_per_block",
            "use_double_scratch_buffer", "buffer_alignment", "min_message_size", "max_message_size")


class PlanError(ForestCollError):
    """A plan file is malformed: the message names the file, the path into the JSON and what is wrong."""


@dataclass(frozen=True)
class BufRef:
    """One ``src_buff`` / ``dst_buff`` entry: ``size`` chunks from chunk ``index`` of a local buffer
    (``type``), a remote buffer (``buffer_id``: position in the thread block's list for the op's
    channel type) or a switch channel's buffer (``switch_channel_id``)."""

    index: int
    size: int
    type: str | None = None
    buffer_id: int | None = None
    switch_channel_id: int | None = None
    extra: tuple[tuple[str, Any], ...] = ()

    @property
    def is_remote(self) -> bool:
        return self.buffer_id is not None

    @property
    def is_switch(self) -> bool:
        return self.switch_channel_id is not None


@dataclass(frozen=True)
class Op:
    """One operation of a thread block (``ops`` holds a pipeline's inner operations)."""

    name: str
    channel_type: str | None = None
    channel_ids: tuple[int, ...] | None = None
    src: tuple[BufRef, ...] | None = None
    dst: tuple[BufRef, ...] | None = None
    tbg: tuple[int, int] | None = None  # (tb_id, tbg_size)
    barrier_id: int | None = None
    num_threadblocks: int | None = None
    semaphore_ids: tuple[int, ...] | None = None
    iter_context: tuple[int, int] | None = None  # (unit_size bytes, num_chunks)
    ops: tuple[Op, ...] | None = None
    reduce_op: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class TbChannel:
    """Channels a thread block uses: indexes into its GPU's flattened list of ``channel_type`` channels."""

    channel_type: str
    channel_ids: tuple[int, ...]
    buff: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class RemoteBufferRef:
    """Remote buffers a thread block reaches through ``access_channel_type`` channels (GPU remote_buffers ids)."""

    access_channel_type: str
    remote_buffer_ids: tuple[int, ...]
    extra: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class ThreadBlock:
    id: int
    ops: tuple[Op, ...]
    channels: tuple[TbChannel, ...]
    remote_buffer_refs: tuple[RemoteBufferRef, ...] | None = None
    extra: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class RankGroup:
    size: int
    ranks: tuple[int, ...]
    extra: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Channel:
    """A GPU-level channel entry: memory / port channels to ``connected_to`` peers (one channel each), or a
    switch (NVLS) channel over ``buffer_type`` per rank group."""

    channel_type: str
    connected_to: tuple[int, ...] | None = None
    buffer_type: str | None = None
    rank_groups: tuple[RankGroup, ...] | None = None
    extra: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class RemoteBuffer:
    """A buffer of GPU ``rank`` that this GPU accesses through the listed channel types."""

    rank: int
    type: str
    access_channel_types: tuple[str, ...]
    extra: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class GpuPlan:
    id: int
    input_chunks: int
    output_chunks: int
    scratch_chunks: int
    threadblocks: tuple[ThreadBlock, ...]
    channels: tuple[Channel, ...]
    remote_buffers: tuple[RemoteBuffer, ...]
    semaphores: tuple[int, ...] | None = None  # init values
    extra: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Plan:
    """A whole execution plan.  Optional top-level fields are None when absent (the executor's default applies)."""

    name: str
    collective: str
    protocol: str
    inplace: bool
    gpus: tuple[GpuPlan, ...]
    reuse_resources: bool | None = None
    num_threads_per_block: int | None = None
    use_double_scratch_buffer: bool | None = None
    buffer_alignment: int | None = None
    min_message_size: int | None = None
    max_message_size: int | None = None
    extra: tuple[tuple[str, Any], ...] = ()

    def setting(self, key: str) -> Any:
        """The value the executor uses for an optional top-level key (the file's, else its default)."""
        value = getattr(self, key)
        return DEFAULTS[key] if value is None else value

    @property
    def alignment(self) -> int:
        return int(self.setting("buffer_alignment"))

    @property
    def packet(self) -> bool:
        return self.protocol == "LL"

    @property
    def ngpus(self) -> int:
        return len(self.gpus)


# ----- parsing ---------------------------------------------------------------------------------


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, what: str) -> PlanError:
        where = f"{self.source}: {path}" if path else self.source
        return PlanError(f"{where}: {what}")

    def obj(self, value: Any, path: str) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_kind(value)}")
        return value

    def lst(self, value: Any, path: str) -> list:
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {_kind(value)}")
        return value

    def need(self, d: dict, key: str, path: str) -> Any:
        if key not in d:
            raise self.fail(path, f"missing {key!r} (the executor reads it)")
        return d[key]

    def int_(self, value: Any, path: str, lo: int = 0, hi: int = U64_MAX) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(path, f"expected an integer, got {_kind(value)}")
        if not lo <= value <= hi:
            raise self.fail(path, f"{value} is out of range {lo}..{hi}")
        return value

    def str_(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise self.fail(path, f"expected a string, got {_kind(value)}")
        return value

    def bool_(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false, got {_kind(value)}")
        return value

    def ints(self, value: Any, path: str, hi: int = U64_MAX) -> tuple[int, ...]:
        return tuple(self.int_(x, f"{path}[{i}]", 0, hi) for i, x in enumerate(self.lst(value, path)))

    def choice(self, value: Any, path: str, options: tuple[str, ...], what: str) -> str:
        s = self.str_(value, path)
        if s not in options:
            raise self.fail(path, f"unknown {what} {s!r}; the executor knows {', '.join(options)}")
        return s


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return f"the number {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) < 40 else "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _extra(d: dict, known: tuple[str, ...]) -> tuple[tuple[str, Any], ...]:
    return tuple((k, v) for k, v in d.items() if k not in known)


_REF_KEYS = ("type", "buffer_id", "switch_channel_id", "index", "size")
_OP_KEYS = ("name", "channel_type", "channel_ids", "src_buff", "dst_buff", "tbg_info", "barrier_id", "num_threadblocks",
            "semaphore_ids", "iter_context", "ops", "reduce_op")


def _ref(r: _Reader, value: Any, path: str) -> BufRef:
    d = r.obj(value, path)
    index = r.int_(r.need(d, "index", path), f"{path}.index", 0, (1 << 32) - 1)
    size = r.int_(r.need(d, "size", path), f"{path}.size", 0, (1 << 32) - 1)
    btype = r.choice(d["type"], f"{path}.type", BUFFER_TYPES, "buffer type") if "type" in d else None
    bid = r.int_(d["buffer_id"], f"{path}.buffer_id", 0, 255) if "buffer_id" in d else None
    sw = r.int_(d["switch_channel_id"], f"{path}.switch_channel_id", 0, 255) if "switch_channel_id" in d else None
    return BufRef(index, size, btype, bid, sw, _extra(d, _REF_KEYS))


def _op(r: _Reader, value: Any, path: str, depth: int = 0) -> Op:
    d = r.obj(value, path)
    name = r.str_(r.need(d, "name", path), f"{path}.name")
    ctype = r.choice(d["channel_type"], f"{path}.channel_type", CHANNEL_TYPES, "channel type") if "channel_type" in d else None
    cids = r.ints(d["channel_ids"], f"{path}.channel_ids", 255) if "channel_ids" in d else None
    src = tuple(_ref(r, x, f"{path}.src_buff[{i}]") for i, x in enumerate(r.lst(d["src_buff"], f"{path}.src_buff"))) \
        if "src_buff" in d else None
    dst = tuple(_ref(r, x, f"{path}.dst_buff[{i}]") for i, x in enumerate(r.lst(d["dst_buff"], f"{path}.dst_buff"))) \
        if "dst_buff" in d else None
    tbg = None
    if "tbg_info" in d:
        t = r.obj(d["tbg_info"], f"{path}.tbg_info")
        tbg = (r.int_(r.need(t, "tb_id", f"{path}.tbg_info"), f"{path}.tbg_info.tb_id", 0, (1 << 32) - 1),
               r.int_(r.need(t, "tbg_size", f"{path}.tbg_info"), f"{path}.tbg_info.tbg_size", 0, (1 << 32) - 1))
    barrier = r.int_(d["barrier_id"], f"{path}.barrier_id", 0, (1 << 32) - 1) if "barrier_id" in d else None
    ntb = r.int_(d["num_threadblocks"], f"{path}.num_threadblocks", 0, (1 << 32) - 1) if "num_threadblocks" in d else None
    sems = r.ints(d["semaphore_ids"], f"{path}.semaphore_ids", (1 << 32) - 1) if "semaphore_ids" in d else None
    it = None
    inner = None
    if "iter_context" in d:
        c = r.obj(d["iter_context"], f"{path}.iter_context")
        it = (r.int_(r.need(c, "unit_size", f"{path}.iter_context"), f"{path}.iter_context.unit_size", 0, (1 << 32) - 1),
              r.int_(r.need(c, "num_chunks", f"{path}.iter_context"), f"{path}.iter_context.num_chunks", 0, (1 << 31) - 1))
    if "ops" in d:
        if depth > 0:
            raise r.fail(f"{path}.ops", "pipelines do not nest (the executor runs one level of inner operations)")
        inner = tuple(_op(r, x, f"{path}.ops[{i}]", depth + 1) for i, x in enumerate(r.lst(d["ops"], f"{path}.ops")))
    if name == "pipeline" and (it is None or inner is None):
        raise r.fail(path, "a pipeline needs 'iter_context' and 'ops' (the executor reads both)")
    if it is not None and inner is None:
        raise r.fail(path, "'iter_context' without 'ops': the executor reads the inner operations from 'ops'")
    reduce_op = r.str_(d["reduce_op"], f"{path}.reduce_op") if "reduce_op" in d else None
    return Op(name, ctype, cids, src, dst, tbg, barrier, ntb, sems, it, inner, reduce_op, _extra(d, _OP_KEYS))


def _tb(r: _Reader, value: Any, path: str) -> ThreadBlock:
    d = r.obj(value, path)
    tid = r.int_(r.need(d, "id", path), f"{path}.id", 0, (1 << 31) - 1)
    ops = tuple(_op(r, x, f"{path}.ops[{i}]") for i, x in enumerate(r.lst(r.need(d, "ops", path), f"{path}.ops")))
    chans = []
    for i, x in enumerate(r.lst(r.need(d, "channels", path), f"{path}.channels")):
        p = f"{path}.channels[{i}]"
        c = r.obj(x, p)
        chans.append(TbChannel(r.choice(r.need(c, "channel_type", p), f"{p}.channel_type", CHANNEL_TYPES, "channel type"),
                               r.ints(r.need(c, "channel_ids", p), f"{p}.channel_ids", (1 << 31) - 1),
                               r.choice(c["buff"], f"{p}.buff", BUFFER_TYPES, "buffer type") if "buff" in c else None,
                               _extra(c, ("channel_type", "channel_ids", "buff"))))
    refs = None
    if "remote_buffer_refs" in d:
        refs = []
        for i, x in enumerate(r.lst(d["remote_buffer_refs"], f"{path}.remote_buffer_refs")):
            p = f"{path}.remote_buffer_refs[{i}]"
            c = r.obj(x, p)
            refs.append(RemoteBufferRef(
                r.choice(r.need(c, "access_channel_type", p), f"{p}.access_channel_type", CHANNEL_TYPES, "channel type"),
                r.ints(r.need(c, "remote_buffer_ids", p), f"{p}.remote_buffer_ids", (1 << 31) - 1),
                _extra(c, ("access_channel_type", "remote_buffer_ids"))))
        refs = tuple(refs)
    return ThreadBlock(tid, ops, tuple(chans), refs, _extra(d, ("id", "ops", "channels", "remote_buffer_refs")))


def _channel(r: _Reader, value: Any, path: str) -> Channel:
    d = r.obj(value, path)
    ctype = r.choice(r.need(d, "channel_type", path), f"{path}.channel_type", CHANNEL_TYPES, "channel type")
    if ctype == "switch":
        # 'buff' is this entry's key before mscclpp #579 (the current executor reads 'buffer_type'; lint says so)
        key = "buffer_type" if "buffer_type" in d or "buff" not in d else "buff"
        btype = r.choice(r.need(d, key, path), f"{path}.{key}", BUFFER_TYPES, "buffer type")
        groups = []
        for i, x in enumerate(r.lst(r.need(d, "rank_groups", path), f"{path}.rank_groups")):
            p = f"{path}.rank_groups[{i}]"
            g = r.obj(x, p)
            groups.append(RankGroup(r.int_(r.need(g, "size", p), f"{p}.size", 0, (1 << 31) - 1),
                                    r.ints(r.need(g, "ranks", p), f"{p}.ranks", (1 << 31) - 1),
                                    _extra(g, ("size", "ranks"))))
        known = ("channel_type", "rank_groups", "buffer_type") if key == "buffer_type" else ("channel_type", "rank_groups")
        return Channel(ctype, None, btype, tuple(groups), _extra(d, known))
    peers = r.ints(r.need(d, "connected_to", path), f"{path}.connected_to", (1 << 31) - 1)
    return Channel(ctype, peers, None, None, _extra(d, ("channel_type", "connected_to")))


def _gpu(r: _Reader, value: Any, path: str) -> GpuPlan:
    d = r.obj(value, path)
    gid = r.int_(r.need(d, "id", path), f"{path}.id", 0, (1 << 31) - 1)
    chunks = [r.int_(r.need(d, k, path), f"{path}.{k}", 0, (1 << 32) - 1)
              for k in ("input_chunks", "output_chunks", "scratch_chunks")]
    tbs = tuple(_tb(r, x, f"{path}.threadblocks[{i}]")
                for i, x in enumerate(r.lst(r.need(d, "threadblocks", path), f"{path}.threadblocks")))
    chans = tuple(_channel(r, x, f"{path}.channels[{i}]")
                  for i, x in enumerate(r.lst(r.need(d, "channels", path), f"{path}.channels")))
    rbs = []
    for i, x in enumerate(r.lst(r.need(d, "remote_buffers", path), f"{path}.remote_buffers")):
        p = f"{path}.remote_buffers[{i}]"
        b = r.obj(x, p)
        rbs.append(RemoteBuffer(
            r.int_(r.need(b, "rank", p), f"{p}.rank", 0, (1 << 31) - 1),
            r.choice(r.need(b, "type", p), f"{p}.type", BUFFER_TYPES, "buffer type"),
            tuple(r.choice(t, f"{p}.access_channel_types[{j}]", CHANNEL_TYPES, "channel type")
                  for j, t in enumerate(r.lst(r.need(b, "access_channel_types", p), f"{p}.access_channel_types"))),
            _extra(b, ("rank", "type", "access_channel_types"))))
    sems = None
    if "semaphores" in d:
        sems = []
        for i, x in enumerate(r.lst(d["semaphores"], f"{path}.semaphores")):
            p = f"{path}.semaphores[{i}]"
            s = r.obj(x, p)
            sems.append(r.int_(r.need(s, "init_value", p), f"{p}.init_value", -(1 << 31), (1 << 31) - 1))
        sems = tuple(sems)
    known = ("id", "input_chunks", "output_chunks", "scratch_chunks", "threadblocks", "channels", "remote_buffers",
             "semaphores")
    return GpuPlan(gid, *chunks, tbs, chans, tuple(rbs), sems, _extra(d, known))


def plan_from_json(obj: Any, source: str = "plan.json") -> Plan:
    """The :class:`Plan` of a parsed JSON value (raises :class:`PlanError` naming the path of the first problem)."""
    r = _Reader(source)
    d = r.obj(obj, "")
    if "gpus" not in d and ("trees" in d or d.get("format") == "forestcoll-schedule"):
        raise PlanError(f"{source}: a forestcoll schedule, not an MSCCL++ execution plan (make one with "
                        "`forestcoll export SCHEDULE --format mscclpp -o PLAN.json`)")
    name = r.str_(r.need(d, "name", "top level"), "name")
    collective = r.str_(r.need(d, "collective", "top level"), "collective")
    protocol = r.str_(r.need(d, "protocol", "top level"), "protocol")
    inplace = r.bool_(r.need(d, "inplace", "top level"), "inplace")
    gpus = tuple(_gpu(r, x, f"gpus[{i}]") for i, x in enumerate(r.lst(r.need(d, "gpus", "top level"), "gpus")))
    opt: dict[str, Any] = {}
    for key in ("reuse_resources", "use_double_scratch_buffer"):
        if key in d:
            opt[key] = r.bool_(d[key], key)
    for key, hi in (("num_threads_per_block", 1 << 31), ("buffer_alignment", (1 << 32) - 1),
                    ("min_message_size", U64_MAX), ("max_message_size", U64_MAX)):
        if key in d:
            opt[key] = r.int_(d[key], key, 0, hi)
    return Plan(name, collective, protocol, inplace, gpus, extra=_extra(d, TOP_KEYS), **opt)


def parse_plan(text: str, source: str = "plan.json") -> Plan:
    """Parse plan JSON text (one-line :class:`PlanError` on bad JSON or structure)."""
    if text.lstrip().startswith("<"):
        raise PlanError(f"{source}: an XML file (an MSCCL algorithm?), not an MSCCL++ execution plan (JSON); "
                        "`forestcoll msccl run|lint` reads MSCCL files")
    obj = parse_json(text, source, parse_float=float, error=PlanError)
    return plan_from_json(obj, source)


def read_plan(path: str | os.PathLike[str]) -> Plan:
    """Read and parse a plan file."""
    return parse_plan(read_text(path, "plan file"), str(path))


# ----- writing ---------------------------------------------------------------------------------


def _with_extra(d: dict, extra: tuple[tuple[str, Any], ...]) -> dict:
    for k, v in extra:
        d[k] = v
    return d


def _ref_json(b: BufRef) -> dict:
    d: dict[str, Any] = {}
    if b.type is not None:
        d["type"] = b.type
    if b.buffer_id is not None:
        d["buffer_id"] = b.buffer_id
    if b.switch_channel_id is not None:
        d["switch_channel_id"] = b.switch_channel_id
    d["index"] = b.index
    d["size"] = b.size
    return _with_extra(d, b.extra)


def op_to_json(op: Op) -> dict[str, Any]:
    d: dict[str, Any] = {"name": op.name}
    if op.iter_context is not None:
        d["iter_context"] = {"unit_size": op.iter_context[0], "num_chunks": op.iter_context[1]}
    if op.ops is not None:
        d["ops"] = [op_to_json(x) for x in op.ops]
    if op.src is not None:
        d["src_buff"] = [_ref_json(b) for b in op.src]
    if op.dst is not None:
        d["dst_buff"] = [_ref_json(b) for b in op.dst]
    if op.channel_ids is not None:
        d["channel_ids"] = list(op.channel_ids)
    if op.channel_type is not None:
        d["channel_type"] = op.channel_type
    if op.semaphore_ids is not None:
        d["semaphore_ids"] = list(op.semaphore_ids)
    if op.barrier_id is not None:
        d["barrier_id"] = op.barrier_id
    if op.num_threadblocks is not None:
        d["num_threadblocks"] = op.num_threadblocks
    if op.reduce_op is not None:
        d["reduce_op"] = op.reduce_op
    if op.tbg is not None:
        d["tbg_info"] = {"tb_id": op.tbg[0], "tbg_size": op.tbg[1]}
    return _with_extra(d, op.extra)


def _tb_json(tb: ThreadBlock) -> dict[str, Any]:
    d: dict[str, Any] = {"id": tb.id, "ops": [op_to_json(o) for o in tb.ops]}
    chans = []
    for c in tb.channels:
        cd: dict[str, Any] = {"channel_type": c.channel_type, "channel_ids": list(c.channel_ids)}
        if c.buff is not None:
            cd["buff"] = c.buff
        chans.append(_with_extra(cd, c.extra))
    d["channels"] = chans
    if tb.remote_buffer_refs is not None:
        d["remote_buffer_refs"] = [_with_extra({"access_channel_type": x.access_channel_type,
                                                 "remote_buffer_ids": list(x.remote_buffer_ids)}, x.extra)
                                   for x in tb.remote_buffer_refs]
    return _with_extra(d, tb.extra)


def _channel_json(c: Channel) -> dict[str, Any]:
    if c.channel_type == "switch":
        d: dict[str, Any] = {"channel_type": c.channel_type}
        legacy = any(k == "buff" for k, _v in c.extra)
        if not legacy:
            d["buffer_type"] = c.buffer_type
        d["rank_groups"] = [_with_extra({"size": g.size, "ranks": list(g.ranks)}, g.extra) for g in c.rank_groups or ()]
        return _with_extra(d, c.extra)
    return _with_extra({"channel_type": c.channel_type, "connected_to": list(c.connected_to or ())}, c.extra)


def _gpu_json(g: GpuPlan) -> dict[str, Any]:
    d: dict[str, Any] = {"id": g.id, "input_chunks": g.input_chunks, "output_chunks": g.output_chunks,
                         "scratch_chunks": g.scratch_chunks, "threadblocks": [_tb_json(t) for t in g.threadblocks],
                         "channels": [_channel_json(c) for c in g.channels],
                         "remote_buffers": [_with_extra({"rank": b.rank, "type": b.type,
                                                         "access_channel_types": list(b.access_channel_types)}, b.extra)
                                            for b in g.remote_buffers]}
    if g.semaphores is not None:
        d["semaphores"] = [{"init_value": v} for v in g.semaphores]
    return _with_extra(d, g.extra)


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The plan as a JSON value, keys in the order mscclpp's DSL writes them."""
    d: dict[str, Any] = {"name": plan.name, "collective": plan.collective, "protocol": plan.protocol,
                         "inplace": plan.inplace}
    if plan.reuse_resources is not None:
        d["reuse_resources"] = plan.reuse_resources
    d["gpus"] = [_gpu_json(g) for g in plan.gpus]
    for key in ("num_threads_per_block", "use_double_scratch_buffer", "buffer_alignment", "min_message_size",
                "max_message_size"):
        value = getattr(plan, key)
        if value is not None:
            d[key] = value
    return _with_extra(d, plan.extra)


def write_plan(plan: Plan, indent: int | None = 2) -> str:
    """Deterministic JSON text of ``plan`` (``indent=None``: one line)."""
    if indent is None:
        return json.dumps(plan_to_json(plan), separators=(",", ":")) + "\n"
    return json.dumps(plan_to_json(plan), indent=indent) + "\n"


@dataclass
class PlanStats:
    """Figures a user checks against the executor's limits."""

    gpus: int
    threadblocks_per_gpu: int  # the most on one GPU
    ops_per_threadblock: int  # the most in one thread block, pipeline inner operations included (the executor's count)
    memory_channels: int  # the most on one GPU
    port_channels: int
    switch_channels: int
    scratch_chunks: int
    op_counts: dict[str, int] = field(default_factory=dict)


def executor_ops(tb: ThreadBlock) -> int:
    """Operations the executor stores for ``tb`` (a pipeline counts 1 + its inner operations)."""
    return sum(1 + len(op.ops or ()) for op in tb.ops)


def plan_stats(plan: Plan) -> PlanStats:
    counts: dict[str, int] = {}

    def walk(ops: tuple[Op, ...]) -> None:
        for op in ops:
            counts[op.name] = counts.get(op.name, 0) + 1
            if op.ops:
                walk(op.ops)

    for g in plan.gpus:
        for tb in g.threadblocks:
            walk(tb.ops)

    def nch(g: GpuPlan, t: str) -> int:
        if t == "switch":
            return sum(len(c.rank_groups or ()) for c in g.channels if c.channel_type == t)
        return sum(len(c.connected_to or ()) for c in g.channels if c.channel_type == t)

    return PlanStats(
        gpus=len(plan.gpus),
        threadblocks_per_gpu=max((len(g.threadblocks) for g in plan.gpus), default=0),
        ops_per_threadblock=max((executor_ops(tb) for g in plan.gpus for tb in g.threadblocks), default=0),
        memory_channels=max((nch(g, "memory") for g in plan.gpus), default=0),
        port_channels=max((nch(g, "port") for g in plan.gpus), default=0),
        switch_channels=max((nch(g, "switch") for g in plan.gpus), default=0),
        scratch_chunks=max((g.scratch_chunks for g in plan.gpus), default=0),
        op_counts=dict(sorted(counts.items())),
    )
