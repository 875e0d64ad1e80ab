"""The MSCCL runtime's semantics, shared by the interpreter and the simulator.

What msccl-executor-nccl (``msccl_parser.cc`` / ``msccl_kernel.cu``) does with a
file before and while it runs it, independent of how it is then executed:

* :func:`compile_tb`: the parser's rewriting of a ``<tb>`` into *transmissions*:
  ``nop`` steps vanish and their dependencies move onto the next real step
  (which must carry its own); consecutive ``re`` steps into one destination
  with no dependency of their own fuse (up to 16 sources); the kernel's step
  counter, under which a transmission with ``hasdep`` publishes its flag.
* :func:`regime`: how a call of some size is cut: chunks per primitive call
  (``maxAllowedCount``, from NCCL's connection buffer sizes) and pipeline
  iterations; :data:`DEFAULT_SLOTS`: calls a connection buffers per protocol.
* :func:`by_rank`: the runtime selects each rank's ``<gpu>`` by its ``id``
  attribute, not by the element's position; the file with its gpus in rank
  order, checked against the sizes forestcoll can hold (:mod:`forestcoll.limits`).
* :func:`size_multiplier` and :func:`buffer_sizes`: the call's element count
  and buffers per ``coll`` attribute, as the runtime reads them (keyed by the
  runtime's own names, which include collectives forestcoll does not generate).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from forestcoll.limits import MAX_MSCCL_CHANNELS, MAX_MSCCL_CHUNKS, MAX_MSCCL_GPUS
from forestcoll.msccl.ir import PROTOCOLS, RECVS, SENDS, STEP_TYPES, Algo, MscclError, ThreadBlock

__all__ = ["DEFAULT_SLOTS", "MAX_COUNT", "MAX_REDUCE_FUSION", "Regime", "Transmission", "buffer_sizes", "by_rank",
           "compile_tb", "default_bytes", "regime", "size_multiplier", "size_notes"]

# collectives whose API count is per rank while the algorithm's chunks cover all ranks' data
_COUNT_PER_RANK = ("allgather", "reducescatter", "alltoall")


def _limit(value: int, lo: int, hi: int, what: str, source: str, line: int) -> None:
    if not lo <= value <= hi:
        beyond = " (forestcoll's limit; see docs/limits.md)" if value > hi else ""
        raise MscclError(f"{source}:{line}: {what}={value} is outside {lo}..{hi:,}{beyond}")


def by_rank(algo: Algo, source: str = "algo.xml") -> Algo:
    """``algo`` with ``gpus[r]`` the ``<gpu id="r">`` (the runtime picks a rank's gpu by id, in any element order),
    after checking what running it needs: a known protocol, gpu ids 0..ngpus-1 once each, peers and channels in
    range, and chunk, channel and gpu counts within :mod:`forestcoll.limits`.  MscclError names the line."""
    if algo.proto not in PROTOCOLS:
        raise MscclError(f"{source}:{algo.line}: unknown proto {algo.proto!r} (the runtime knows {', '.join(PROTOCOLS)})")
    _limit(algo.ngpus, 1, MAX_MSCCL_GPUS, "ngpus", source, algo.line)
    _limit(algo.nchunksperloop, 1, MAX_MSCCL_CHUNKS, "nchunksperloop", source, algo.line)
    _limit(algo.nchannels, 1, MAX_MSCCL_CHANNELS, "nchannels", source, algo.line)
    if algo.ngpus != len(algo.gpus):
        raise MscclError(f"{source}: ngpus={algo.ngpus} but the file lists {len(algo.gpus)} <gpu> elements")
    slots: list = [None] * algo.ngpus
    for gpu in algo.gpus:
        _limit(gpu.id, 0, algo.ngpus - 1, "gpu id", source, gpu.line)
        if slots[gpu.id] is not None:
            raise MscclError(f"{source}:{gpu.line}: a second <gpu id=\"{gpu.id}\"> (the first is on line {slots[gpu.id].line})")
        slots[gpu.id] = gpu
        for name in ("i_chunks", "o_chunks", "s_chunks"):
            _limit(getattr(gpu, name), 0, MAX_MSCCL_CHUNKS, f"gpu {gpu.id} {name}", source, gpu.line)
        for tb in gpu.tbs:
            _limit(tb.chan, 0, algo.nchannels - 1, f"gpu {gpu.id} tb {tb.id} chan", source, tb.line)
            for peer, kind in ((tb.send, "send"), (tb.recv, "recv")):
                if peer != -1 and (not 0 <= peer < algo.ngpus or peer == gpu.id):
                    raise MscclError(f"{source}:{tb.line}: gpu {gpu.id} tb {tb.id}: {kind} peer {peer} is not another gpu "
                                     f"(ids 0..{algo.ngpus - 1}, or -1 for none)")
            for st in tb.steps:
                for types, peer, kind in ((SENDS, tb.send, "sends"), (RECVS, tb.recv, "receives")):
                    if st.type in types and peer == -1:
                        raise MscclError(f"{source}:{st.line}: gpu {gpu.id} tb {tb.id} step {st.s} ({st.type}) {kind}, "
                                         f"but the tb has {kind[:4].replace('rece', 'recv')}=-1")
                if st.cnt < 0 or st.cnt > MAX_MSCCL_CHUNKS:
                    raise MscclError(f"{source}:{st.line}: gpu {gpu.id} tb {tb.id} step {st.s}: cnt={st.cnt} is outside "
                                     f"0..{MAX_MSCCL_CHUNKS:,}")
    return replace(algo, gpus=slots)


def size_multiplier(coll: str, ngpus: int) -> int:
    """The runtime's sizeMultiplier: the call moves count x this many elements per loop of chunks."""
    return ngpus if coll in _COUNT_PER_RANK else 1


def buffer_sizes(algo: Algo) -> tuple[int, int]:
    """(input chunks, output chunks) of the user's buffers in a call, from the collective and nchunksperloop."""
    n, g = algo.nchunksperloop, max(algo.ngpus, 1)
    if algo.coll == "allgather":
        return n // g, n
    if algo.coll == "reducescatter":
        return n, n // g
    return n, n


MAX_REDUCE_FUSION = 16
DEFAULT_SLOTS = {"Simple": 2, "LL": 8, "LL128": 8}
MAX_COUNT = 71  # MSCCL_MAX_COUNT - 1
# NCCL's default connection buffers (bytes) and what one primitive call may carry of them:
# stepSize = buffSize / NCCL_STEPS; chunkSize = stepSize x chunkSteps (MSCCL_CHUNKSTEPS = 4 for Simple);
# LL carries half its bytes as flags, LL128 15 of every 16 words.
_CHUNK_EFFECTIVE = {"Simple": (1 << 22) // 8 * 4, "LL": (8 * 512 * 8 * 16) // 8 // 2, "LL128": (120 * 640 * 8 * 8) // 8 // 16 * 15}


@dataclass(frozen=True)
class Regime:
    """How the runtime cuts a call of ``nbytes`` bytes: chunks per primitive call and pipeline iterations."""

    nbytes: int | None  # None: "very large" (one chunk per call)
    max_count: int
    iterations: int


def regime(algo: Algo, nbytes: int | None, max_iterations: int = 2) -> Regime:
    """maxAllowedCount and the number of pipeline iterations the runtime uses for an ``nbytes`` call
    (``nbytes`` counts the whole buffer, count x sizeMultiplier x element size, as the runtime does)."""
    effective = _CHUNK_EFFECTIVE.get(algo.proto, _CHUNK_EFFECTIVE["Simple"])
    if nbytes is None:
        return Regime(None, 1, max_iterations)
    chunk_bytes = max(1, -(-nbytes // max(algo.nchunksperloop, 1)))
    max_count = max(1, min(MAX_COUNT, effective // chunk_bytes))
    iterations = max(1, min(max_iterations, -(-chunk_bytes // effective)))
    return Regime(nbytes, max_count, iterations)


def size_notes(algo: Algo, size: int, element: int = 4) -> list[str]:
    """Why the runtime would not use ``algo`` for a call of ``size`` bytes (nccl-tests size, ``element``-byte
    elements): the element count must split into nchunksperloop equal chunks, and the size lie in
    [minBytes, maxBytes]; an empty list when it would."""
    from forestcoll.units import format_size

    notes = []
    unit = element * algo.nchunksperloop
    if size % unit:
        below, above = size // unit * unit, (size // unit + 1) * unit
        notes.append(f"the runtime would not use this file for a {format_size(size)} call: it takes a call only when "
                     f"its element count ({size // element} float32 values here) is a multiple of nchunksperloop="
                     f"{algo.nchunksperloop}, i.e. sizes that are multiples of {unit} bytes (nearest: {below} and "
                     f"{above}); at other sizes NCCL/RCCL runs its own algorithm (a power-of-two k avoids this)")
    if size < algo.min_bytes or (algo.max_bytes and size > algo.max_bytes):
        notes.append(f"the runtime would not use this file for a {format_size(size)} call: its range is "
                     f"{algo.min_bytes}..{algo.max_bytes or 'unbounded'} bytes")
    return notes


def default_bytes(algo: Algo) -> int | None:
    """The size whose regime buffers least within the file's range: maxBytes, or unbounded when it is 0."""
    return algo.max_bytes if algo.max_bytes > 0 else None



@dataclass(frozen=True)
class Transmission:
    """One operation of a thread block after the parser's rewriting."""

    type: str
    srcbuf: str
    srcoffs: tuple[int, ...]  # several only for fused ``re`` steps
    dstbuf: str
    dstoff: int
    cnt: int
    deps: tuple[tuple[int, int], ...]  # (tb id, step) pairs waited on before starting
    hasdep: bool
    step: int  # the kernel's step counter when the flag is published
    s: int  # XML step number (the last one, for fused steps)
    line: int


def compile_tb(tb: ThreadBlock, gpu: int, source: str = "algo.xml") -> list[Transmission]:
    """The transmissions the runtime's parser makes of ``tb`` (nop folding, ``re`` fusion, step counter)."""
    out: list[Transmission] = []
    pending: list[tuple[int, int]] = []
    fusable: tuple[str, int, str] | None = None
    step = 0
    for st in tb.steps:
        if st.type not in STEP_TYPES:
            raise MscclError(f"{source}:{st.line}: gpu {gpu} tb {tb.id} step {st.s}: unknown step type {st.type!r} "
                             "(the runtime refuses the file)")
        if st.depid >= 0:
            pending.append((st.depid, st.deps))
        if st.type == "nop":
            continue
        if st.type == "re" and fusable == (st.dstbuf, st.dstoff, st.srcbuf) and st.depid < 0:
            prev = out[-1]
            srcoffs = (*prev.srcoffs, st.srcoff)
            out[-1] = Transmission("re", st.srcbuf, srcoffs, st.dstbuf, st.dstoff, st.cnt, prev.deps,
                                   bool(st.hasdep), prev.step + 1, st.s, st.line)
            step += 1
            fusable = None if st.hasdep or len(srcoffs) == MAX_REDUCE_FUSION else fusable
            continue
        if pending and st.depid < 0:
            raise MscclError(f"{source}:{st.line}: gpu {gpu} tb {tb.id} step {st.s} follows nop dependencies but has none "
                             "of its own; the runtime refuses the file")
        deps = tuple(pending)
        pending = []
        if deps:
            step += len(deps) - 1
        out.append(Transmission(st.type, st.srcbuf, (st.srcoff,), st.dstbuf, st.dstoff, st.cnt, deps,
                                bool(st.hasdep), step, st.s, st.line))
        step += 1
        fusable = (st.dstbuf, st.dstoff, st.srcbuf) if st.type == "re" and not st.hasdep else None
    return out
