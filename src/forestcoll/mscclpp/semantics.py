"""What the MSCCL++ executor makes of a plan: limits, operation table, chunk geometry, channel pairing.

Shared by the linter, the interpreter and the simulator so that all three read a
plan the same way.  Every rule here restates code of microsoft/mscclpp at
1f5f065 (``src/core/include/execution_common.hpp``, ``src/core/executor/
execution_plan.cc``, ``executor.cc``, ``src/core/include/execution_kernel.hpp``);
docs/mscclpp.md says the same in prose.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from forestcoll.mscclpp.plan import GpuPlan, Op, Plan, PlanError, ThreadBlock

# ----- limits (execution_common.hpp) ----------------------------------------------------------------

MAX_OPERATION = 64  # operations per thread block (pipeline inner operations count)
MAX_CHANNEL = 16  # channels of one type per thread block; also remote buffers per access type per thread block
MAX_CHANNEL_PER_OPERATION = 8
MAX_LOCAL_BUFFER_PER_OPERATION = 2
MAX_BUFFERS_PER_OPERATION = MAX_LOCAL_BUFFER_PER_OPERATION + MAX_CHANNEL_PER_OPERATION  # src_buff / dst_buff entries
MAX_DEVICE_SYNCERS = 16  # barrier ids
MAX_DEVICE_SEMAPHORES = 16  # semaphore ids per operation
PREDEFINED_SCRATCH_SIZE = 1 << 26  # reuse_resources: scratch sized for this ...
DEFAULT_SCRATCH_BUFFER = 1 << 27  # ... inside the executor's default 128 MiB buffer
MAX_THREADS_PER_BLOCK = 1024  # __launch_bounds__(1024, 1)
MAX_PIPELINE_ITERATIONS = 1 << 16  # handlePipeline keeps the count in a uint16_t
U32 = 1 << 32  # offsets and sizes are uint32_t in the device structures

# ----- operations (getOpType and executeDeviceFunction) --------------------------------------------

OP_NAMES = ("nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res", "rre",
            "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres", "gstore",
            "gstorepkt", "rlxsignal", "rlxwait", "pipeline", "sem_acquire", "sem_release")
SYNC_OPS = frozenset({"signal", "wait", "rlxsignal", "rlxwait", "flush"})
SEM_OPS = frozenset({"sem_acquire", "sem_release"})
PUTS = frozenset({"put", "pws", "pwsf"})
REDUCES = frozenset({"re", "res", "rre", "rres"})
PACKET_OPS = frozenset({"ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "gstorepkt"})
SWITCH_OPS = frozenset({"glres", "gstore", "gstorepkt"})
DATA_OPS = PUTS | REDUCES | PACKET_OPS | SWITCH_OPS | {"get", "copy"}
# operations that honour a pipeline's (offset, unit size); packet operations redo their whole range every iteration
PIPELINED = PUTS | REDUCES | {"get", "copy", "glres", "gstore"}
COLLECTIVES = ("allgather", "allreduce", "reducescatter", "alltoall", "broadcast", "reduce", "sendrecv")
BUFFER_NAMES = {"i": "input", "o": "output", "s": "scratch"}


def packet_payload(packet: str = "LL16") -> int:
    """Data bytes per packet: LL16 packets carry 8 bytes with 8 bytes of flags, LL8 4 with 4."""
    return 8 if packet == "LL16" else 4


# ----- sizes (ExecutionPlan::Impl) ----------------------------------------------------------------


def buffer_sizes(plan: Plan, size: int) -> tuple[int, int]:
    """(input bytes, output bytes) of a call whose executor-checked size is ``size``: the input, or the output
    for allgather (checkMessageSize).  Buffers of other collectives follow their chunk counts."""
    g = plan.gpus[0] if plan.gpus else None
    n = len(plan.gpus)
    coll = plan.collective
    if coll == "allgather":
        return (size // n if n else size), size
    if coll == "reducescatter":
        return size, (size // n if n else size)
    if coll in ("allreduce", "alltoall", "broadcast", "reduce", "sendrecv") or g is None:
        return size, size
    if g.input_chunks:
        return size, size // g.input_chunks * g.output_chunks
    return size, size


@dataclass(frozen=True)
class Geometry:
    """Byte offsets and sizes of one GPU's call: every chunk index counts chunks of ``chunk`` bytes, the
    size per chunk of the input (or of the output when the plan has no input chunks)."""

    input_size: int
    output_size: int
    align: int
    base_size: int  # bytes the chunk indexes divide (getSizeAndChunks)
    nchunks: int
    scratch_size: int  # bytes of scratch (both halves when double-buffered)
    scratch_chunk: int  # reuse_resources: the window scratch offsets wrap around (scratchChunkSize_)
    reuse: bool
    max_scratch_chunk: int  # calMaxScratchChunkSize(PREDEFINED_SCRATCH_SIZE)

    @property
    def chunk(self) -> int:
        return self.upper_chunk

    @property
    def upper_chunk(self) -> int:
        """getUpperBoundChunkSize: the chunk size rounded up to the alignment."""
        nelems = self.base_size // self.align
        return -(-nelems // self.nchunks) * self.align

    def calc_offset(self, size: int, index: int, slices: int) -> int:
        nelems = size // self.align
        lo, rem = divmod(nelems, slices)
        return (index * lo + min(index, rem)) * self.align

    def offset(self, index: int, scratch: bool = False) -> int:
        """getOffset: byte offset of chunk ``index`` (scratch chunks move apart under reuse_resources)."""
        if scratch and self.reuse and self.max_scratch_chunk < self.upper_chunk:
            return index * self.max_scratch_chunk
        return self.calc_offset(self.base_size, index, self.nchunks)

    def span(self, index: int, count: int) -> int:
        """getBufferSize: bytes of ``count`` chunks from ``index``."""
        return self.offset(index + count) - self.offset(index)

    def split(self, start: int, nbytes: int, tb_id: int, tbg_size: int) -> tuple[int, int]:
        """A thread-block group member's share (calcOffset / calcSize in alignment units)."""
        lo = self.calc_offset(nbytes, tb_id, tbg_size)
        hi = self.calc_offset(nbytes, tb_id + 1, tbg_size)
        return start + lo, hi - lo

    def iterations(self, unit_size: int, num_chunks: int) -> int:
        """Pipeline iterations the executor runs (nIterations, truncated to 16 bits as the kernel does)."""
        total = num_chunks * self.upper_chunk
        return (-(-total // unit_size)) % MAX_PIPELINE_ITERATIONS if unit_size else 0

    def raw_iterations(self, unit_size: int, num_chunks: int) -> int:
        return -(-num_chunks * self.upper_chunk // unit_size) if unit_size else 0


def check_message_size(plan: Plan, gpu: GpuPlan, input_size: int, output_size: int) -> str | None:
    """The executor's checkMessageSize and getSizeAndChunks: None, or why it refuses this call."""
    a = plan.alignment
    if a == 0:
        return "buffer_alignment is 0 (the executor divides by it)"
    if gpu.input_chunks == 0 and gpu.output_chunks == 0:
        return f"gpu {gpu.id} has neither input nor output chunks"
    if input_size % a or output_size % a:
        return f"input {input_size} / output {output_size} bytes are not multiples of the alignment {a}"
    for what, size, n in (("input", input_size, gpu.input_chunks), ("output", output_size, gpu.output_chunks)):
        if n == 0:
            return f"gpu {gpu.id} has {what}_chunks 0, and the executor's size check divides by it"
        if (size // a) % n:
            return f"{what} of {size} bytes does not split into {n} chunks of whole {a}-byte units"
    if gpu.input_chunks and gpu.output_chunks and input_size // gpu.input_chunks != output_size // gpu.output_chunks:
        return (f"chunk sizes disagree: input {input_size} / {gpu.input_chunks} chunks vs output {output_size} / "
                f"{gpu.output_chunks} chunks")
    size = output_size if plan.collective == "allgather" else input_size
    lo, hi = plan.setting("min_message_size"), plan.setting("max_message_size")
    if not lo <= size <= hi:
        return f"size {size} is outside the plan's range {lo}..{hi}"
    return None


def geometry(plan: Plan, gpu: GpuPlan, input_size: int, output_size: int,
             send_alloc: int | None = None, recv_alloc: int | None = None) -> Geometry:
    """The executor's sizes for one GPU and call (allocations default to the buffers; in-place allgather's
    input lies inside the output's allocation)."""
    a = plan.alignment or 1
    if gpu.input_chunks:
        base, n = input_size, gpu.input_chunks
    elif gpu.output_chunks:
        base, n = output_size, gpu.output_chunks
    else:
        raise PlanError(f"gpu {gpu.id}: input_chunks and output_chunks are both 0")
    send = input_size if send_alloc is None else send_alloc
    recv = output_size if recv_alloc is None else recv_alloc
    maxm = plan.setting("max_message_size")
    reuse = bool(plan.setting("reuse_resources"))
    double = bool(plan.setting("use_double_scratch_buffer"))
    sc = gpu.scratch_chunks
    # calScratchBufferSize on the allocation sizes
    if reuse and sc > 0:
        computed = PREDEFINED_SCRATCH_SIZE
    else:
        s_in, s_out = min(send, maxm), min(recv, maxm)
        per = -(-s_in // gpu.input_chunks) if gpu.input_chunks else -(-s_out // gpu.output_chunks)
        computed = per * sc * (2 if plan.packet else 1) * (2 if double else 1)
        computed = -(-computed // a) * a
    scratch_total = DEFAULT_SCRATCH_BUFFER if reuse else computed

    def max_chunk(scratch: int) -> int:
        if sc == 0:
            return 0
        if double:
            scratch //= 2
        per = -(-scratch // sc)
        return -(-per // a) * a

    return Geometry(input_size, output_size, a, base, n, scratch_total, max_chunk(computed), reuse,
                    max_chunk(PREDEFINED_SCRATCH_SIZE))


def scratch_offset(geo: Geometry, plan: Plan, flag: int) -> int:
    """scratchOffset_ of a launch with packet flag ``flag``: the second half of a double scratch on even flags."""
    if plan.setting("use_double_scratch_buffer") and flag % 2 == 0:
        return geo.scratch_size >> 1
    return 0


# ----- channels (setupChannels, setupConnections) -------------------------------------------------


@dataclass(frozen=True)
class ChannelEnd:
    """One memory / port channel of a GPU: ``index`` in its flattened list of that type, the peer, and the
    peer's channel it pairs with (the m-th channel of a type to a peer pairs with the peer's m-th back)."""

    gpu: int
    type: str
    index: int
    peer: int
    ordinal: int
    partner: int | None  # index of the paired channel in the peer's list; None: unpaired


@dataclass(frozen=True)
class SwitchGroup:
    """One switch (NVLS) channel of a GPU: a multicast over ``buffer`` of every rank in ``ranks``."""

    gpu: int
    index: int
    buffer: str
    ranks: tuple[int, ...]


@dataclass
class Wiring:
    """Every GPU's channel lists, and every thread block's channel and remote-buffer tables."""

    channels: dict[tuple[int, str], list[ChannelEnd]]  # (gpu, "memory" | "port") -> channels in index order
    switches: dict[int, list[SwitchGroup]]
    tb_channels: dict[tuple[int, int], dict[str, list[int]]]  # (gpu, tb position) -> type -> GPU channel indexes
    tb_remote: dict[tuple[int, int], dict[str, list[int]]]  # (gpu, tb position) -> access type -> remote_buffers ids

    def end(self, gpu: int, ctype: str, index: int) -> ChannelEnd:
        return self.channels[(gpu, ctype)][index]


def wire(plan: Plan) -> Wiring:
    """Flatten and pair every GPU's channels (no checks: lint reports bad references)."""
    channels: dict[tuple[int, str], list[ChannelEnd]] = {}
    switches: dict[int, list[SwitchGroup]] = {}
    peers_of: dict[tuple[int, str], list[int]] = {}
    for pos, g in enumerate(plan.gpus):
        for ctype in ("memory", "port"):
            peers_of[(pos, ctype)] = [p for c in g.channels if c.channel_type == ctype for p in (c.connected_to or ())]
        switches[pos] = [SwitchGroup(pos, i, buf, ranks) for i, (buf, ranks) in enumerate(
            (c.buffer_type or "s", grp.ranks) for c in g.channels if c.channel_type == "switch" for grp in c.rank_groups or ())]
    at: dict[tuple[int, str], dict[int, list[int]]] = {}  # (gpu, type) -> peer -> its positions in the list, in order
    for key, peers in peers_of.items():
        spots: dict[int, list[int]] = {}
        for j, q in enumerate(peers):
            spots.setdefault(q, []).append(j)
        at[key] = spots
    for (pos, ctype), peers in peers_of.items():
        seen: dict[int, int] = {}
        ends = []
        for i, p in enumerate(peers):
            m = seen.get(p, 0)
            seen[p] = m + 1
            back = at.get((p, ctype), {}).get(pos, [])
            ends.append(ChannelEnd(pos, ctype, i, p, m, back[m] if m < len(back) else None))
        channels[(pos, ctype)] = ends
    tb_channels: dict[tuple[int, int], dict[str, list[int]]] = {}
    tb_remote: dict[tuple[int, int], dict[str, list[int]]] = {}
    for pos, g in enumerate(plan.gpus):
        for t, tb in enumerate(g.threadblocks):
            table: dict[str, list[int]] = {"memory": [], "port": [], "switch": []}
            for c in tb.channels:
                if c.channel_type in table:
                    table[c.channel_type].extend(c.channel_ids)
            tb_channels[(pos, t)] = table
            refs: dict[str, list[int]] = {"memory": [], "port": []}
            for r in tb.remote_buffer_refs or ():
                if r.access_channel_type in refs:
                    refs[r.access_channel_type].extend(r.remote_buffer_ids)
            tb_remote[(pos, t)] = refs
    return Wiring(channels, switches, tb_channels, tb_remote)


# ----- walking operations ---------------------------------------------------------------------------


def walk_ops(tb: ThreadBlock) -> list[tuple[str, Op, Op | None]]:
    """(path, op, enclosing pipeline or None) for every operation of ``tb`` in program order."""
    out: list[tuple[str, Op, Op | None]] = []
    for i, op in enumerate(tb.ops):
        out.append((f"ops[{i}]", op, None))
        for j, inner in enumerate(op.ops or ()):
            out.append((f"ops[{i}].ops[{j}]", inner, op))
    return out


def tb_path(gpu: int, tb: int) -> str:
    return f"gpus[{gpu}].threadblocks[{tb}]"


def smallest_size(plan: Plan) -> int | None:
    """The smallest size (executor-checked: input, or output for allgather) in the plan's range every GPU accepts,
    or None.  Accepted sizes are the multiples of the smallest one that splits into every GPU's chunks."""
    a = plan.alignment
    if not a or not plan.gpus:
        return None

    def fits(size: int, in_range: bool) -> bool:
        ins, outs = buffer_sizes(plan, size)
        for g in plan.gpus:
            why = check_message_size(plan, g, ins, outs)
            if why and (in_range or "outside the plan's range" not in why):
                return False
        return True

    base = None
    for mult in range(1, 4097):
        if fits(a * mult, False):
            base = a * mult
            break
        if mult > 64 and all(g.input_chunks == 0 or g.output_chunks == 0 for g in plan.gpus):
            return None
    if base is None:
        base = _divisor_base(plan, fits)
    if base is None:
        return None
    size = max(base, -(-plan.setting("min_message_size") // base) * base)
    return size if fits(size, True) else None


def _divisor_base(plan: Plan, fits: Callable[[int, bool], bool]) -> int | None:
    """The smallest accepted size when it is above 4096 alignment units (many chunks per GPU): ``a x m`` with
    ``m = n x lcm(every GPU's chunk counts)`` splits into every GPU's chunks whatever the collective's buffer rule,
    so the smallest accepted size is ``a`` times the least divisor of ``m`` that fits (accepted sizes are the
    multiples of the smallest one)."""
    a = plan.alignment
    m = len(plan.gpus)
    for g in plan.gpus:
        for c in (g.input_chunks, g.output_chunks):
            if c:
                m = math.lcm(m, c) if m % c else m
    m *= len(plan.gpus)
    if m > 10 ** 12:  # trial division up to 10^6
        return None
    small = [d for d in range(1, math.isqrt(m) + 1) if m % d == 0]
    for d in sorted(set(small) | {m // d for d in small}):
        if fits(a * d, False):
            return a * d
    return None
