"""The export options a fabric implies: the runtime its GPUs' users run and the thread blocks a GPU keeps resident.

An AMD fabric's users run RCCL's MSCCL executor (64 thread blocks per GPU), an NVIDIA fabric's
msccl-executor-nccl (1,024); the resident figure is the GPU's SMs / CUs (:mod:`forestcoll.topology.device`).
A runtime or block count the user gives always wins; a fabric that does not record its GPU keeps the old
defaults (msccl-executor-nccl, an A100's 108 SMs; MSCCL++ 104 blocks).  Data flows one way: the topology says
what its GPUs are, this layer turns that into options, the exporters only read their options.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from forestcoll.msccl.export import ExportOptions
from forestcoll.topology.device import Gpu, default_runtime, resident_blocks
from forestcoll.topology.model import Topology

__all__ = ["fabric_options", "for_gpu", "runtime_note"]


def runtime_note(gpu: Gpu, runtime: str, given: bool) -> str:
    """The note that says which runtime the file is for and why (the fabric's GPU, or ``--runtime``)."""
    if given:
        implied = default_runtime(gpu)
        return (f"for {runtime} (given); the fabric's GPUs are {gpu.describe()}"
                + (f", whose users run {implied}" if implied != runtime else ""))
    return (f"for {runtime}, the MSCCL runtime of {'AMD' if gpu.vendor == 'amd' else 'NVIDIA'} GPUs: the fabric's are "
            f"{gpu.describe()} (--runtime chooses another)")


def for_gpu(options: ExportOptions | None, gpu: Gpu | None, runtime: str | None = None) -> ExportOptions:
    """MSCCL export options for a fabric of ``gpu``: ``runtime`` when given, else the one its vendor's users run
    (AMD: rccl), the GPU's SMs / CUs as the resident blocks, for rccl duplex blocks where its 64 blocks per GPU are
    too few (:mod:`forestcoll.msccl.duplex`), and a note naming both; for an unknown ``gpu``,
    ``options`` with ``runtime`` (when given) and nothing else changed."""
    base = options or ExportOptions()
    if gpu is None:
        return replace(base, runtime=runtime) if runtime else base
    chosen = runtime or default_runtime(gpu)
    return replace(base, runtime=chosen, resident=resident_blocks(gpu, 0) or None, duplex=chosen == "rccl",
                   notes=(runtime_note(gpu, chosen, runtime is not None), *base.notes))


def fabric_options(options: Any, topo: Topology, runtime: str | None = None,
                   max_threadblocks: int | None = None) -> Any:
    """``options`` (MSCCL's :class:`ExportOptions` or MSCCL++'s) for ``topo``'s GPU; ``runtime`` and
    ``max_threadblocks``: what the user gave (None: the fabric's).  Other values (None) pass through."""
    if isinstance(options, ExportOptions):
        return for_gpu(options, topo.gpu, runtime)
    if options is not None and hasattr(options, "max_threadblocks") and max_threadblocks is None and topo.gpu:
        return replace(options, max_threadblocks=resident_blocks(topo.gpu, options.max_threadblocks))
    return options
