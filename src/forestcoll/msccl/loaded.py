"""What a runtime sets up for each MSCCL file in its folder, and when one more file costs nothing beyond its record.

RCCL and msccl-executor-nccl read every regular file in ``MSCCL_ALGO_DIR`` when a communicator starts, not when a
call first picks it: each file whose rank count matches is parsed, its algorithm record is copied to the GPU, and
every (channel, peer) pair its thread blocks send to or receive from is connected, a pair that is already connected
being skipped (ROCm/rccl at 0cbce2a: ``src/misc/msccl/msccl_lifecycle.cc`` ``mscclInit`` calls ``mscclLoadAlgo`` and
``mscclSetupConnections`` for every file; ``src/transport.cc:63,69`` ``ncclTransportP2pConnect`` skips connected
pairs; Azure/msccl-executor-nccl's ``mscclInit`` does the same).  A connection holds the runtime's buffers per
protocol (``NCCL_BUFFSIZE`` for Simple) on both ends, and the communicator takes as many channels as the widest file.
Scratch is not per file: each call allocates, on first need, ``bytes * nScratchChunks / nChunksPerLoop``
(``src/misc/msccl/msccl_setup.cc`` ``computeSizeNeeded``) and keeps it.  So a file whose connections the other files
make anyway, and which needs no more scratch per byte than the file it replaces, costs only its record
(:data:`RECORD_BYTES`) and its parse.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from fractions import Fraction

from forestcoll.msccl.ir import Algo

__all__ = ["RECORD_BYTES", "connections", "free_switches", "scratch_per_byte"]

# sizeof(struct mscclAlgo) in RCCL at 0cbce2a (src/include/msccl/msccl_struct.h: 64 thread blocks of 64 steps, 1,352
# bytes each, and 128 channels' peer tables of 37,896 bytes), held once on the host and once on the GPU per file
RECORD_BYTES = 4_937_288


def connections(algo: Algo) -> frozenset[tuple[int, int, int]]:
    """(sender, receiver, channel) of every connection ``algo``'s thread blocks send or receive on (the sending
    block on one GPU and the receiving block on its peer use the same one)."""
    out: set[tuple[int, int, int]] = set()
    for gpu in algo.gpus:
        for tb in gpu.tbs:
            if tb.send >= 0:
                out.add((gpu.id, tb.send, tb.chan))
            if tb.recv >= 0:
                out.add((tb.recv, gpu.id, tb.chan))
    return frozenset(out)


def scratch_per_byte(algo: Algo) -> dict[int, Fraction]:
    """GPU -> the scratch ``algo`` needs per byte of a call there (its scratch chunks over nchunksperloop)."""
    return {gpu.id: Fraction(gpu.s_chunks, algo.nchunksperloop) for gpu in algo.gpus}


def free_switches(files: Mapping[str, Algo]) -> Callable[[str, Collection[str], str], bool]:
    """``free(name, loaded, replaced)``: whether serving the call sizes of file ``replaced`` with file ``name`` (both
    of ``files``) costs the runtime nothing beside the files named in ``loaded`` but ``name``'s record and parse:
    each of its connections is one of theirs, and no GPU needs more scratch per byte than under ``replaced``."""
    conns: dict[str, frozenset[tuple[int, int, int]]] = {}
    scratch: dict[str, dict[int, Fraction]] = {}

    def conn(name: str) -> frozenset[tuple[int, int, int]]:
        if name not in conns:
            conns[name] = connections(files[name])
        return conns[name]

    def free(name: str, loaded: Collection[str], replaced: str) -> bool:
        for n in (name, replaced):
            if n not in scratch:
                scratch[n] = scratch_per_byte(files[n])
        if not conn(name) <= frozenset().union(*(conn(n) for n in loaded)):
            return False
        return all(need <= scratch[replaced].get(g, 0) for g, need in scratch[name].items())

    return free
