"""What to change when an MSCCL file needs more thread blocks per GPU than its runtime takes.

The advice must be something the user's GPUs can run.  msccl-executor-nccl (1,024 blocks per GPU) runs on NVIDIA
GPUs only; an AMD user runs RCCL's MSCCL executor (64 blocks per GPU) or MSCCL++, whose kernels ROCm builds too
(docs/mscclpp.md).  So on an AMD fabric the advice names the knobs that take blocks away (channels, instances,
k) and an MSCCL++ plan (which has limits of its own: a GPU with 39 peers fits neither); on an NVIDIA fabric it names msccl-executor-nccl first; on a fabric that does not record
its GPU (``vendor`` None) it names both, saying which GPUs msccl-executor-nccl is for.

:func:`sizes_advice`: the one RCCL file ``generate --format msccl`` writes serves every size, so when it misses
:data:`TARGET` of the exact bound at the design size the note points to ``--sizes`` (a file per size range, each
with its byte range, which RCCL loads from ``MSCCL_ALGO_DIR`` and picks by the call's size): the layouts that
are fastest at 1 GiB (fewer channels) are much slower at 16 MiB, and one XML file holds one algorithm.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["TARGET", "block_advice", "other_runtime", "sizes_advice"]

TARGET = Fraction(95, 100)  # of the exact bound at the design size: below it an RCCL file's note points to --sizes

NVIDIA_RUNTIME = "msccl-executor-nccl"  # the only MSCCL runtime that takes more blocks than RCCL's 64


def other_runtime(runtime: str, vendor: str | None) -> str | None:
    """The ``--runtime`` that takes more blocks than ``runtime``, as advice for GPUs of ``vendor`` (nvidia | amd |
    None: unknown); None when there is none (``runtime`` is already msccl-executor-nccl, or the GPUs are AMD)."""
    if runtime == NVIDIA_RUNTIME or vendor == "amd":
        return None
    return f"--runtime {NVIDIA_RUNTIME} (up to 1024)" + ("" if vendor == "nvidia" else " on NVIDIA GPUs")


def block_advice(runtime: str, vendor: str | None, *, channels_given: bool, channels: int, instances: int,
                 k: int) -> list[str]:
    """The ways to fewer thread blocks per GPU, in the order to try them, for a file of ``k`` chunks per shard on
    ``channels`` channels (given by the user when ``channels_given``) x ``instances`` for ``runtime`` on GPUs of
    ``vendor``: each a phrase to follow "use"; empty when the user has nothing to change."""
    advice = []
    if channels_given and channels > 1:
        advice.append("fewer --channels")
    if instances > 1:
        advice.append("fewer --instances")
    if k > 1 and channels > 1:
        advice.append("a smaller --k (fewer steps, so fewer channels)")
    other = other_runtime(runtime, vendor)
    if other is not None:
        advice.append(other)
    if runtime != NVIDIA_RUNTIME and vendor != "nvidia":
        advice.append("an MSCCL++ plan instead (--format mscclpp; its own limits apply)")
    return advice


def sizes_advice(runtime: str, min_bytes: int, max_bytes: int, rate: float, bound: Fraction | float,
                 size: int) -> str | None:
    """The note for a ``runtime`` file of byte range ``min_bytes``..``max_bytes`` (0: no limit) that reaches
    ``rate`` GB/s at ``size`` bytes against the exact ``bound``: for an RCCL file that serves every size (no range)
    and misses :data:`TARGET` of the bound there, where per-size files are found (``generate --sizes``); else None."""
    from forestcoll.units import format_size

    if runtime != "rccl" or min_bytes or max_bytes or not bound or rate >= TARGET * float(bound):
        return None
    return (f"at {format_size(size)} this file reaches {rate:.1f} GB/s, {rate / float(bound):.1%} of the bound, and it "
            f"serves every size: the same command with `--sizes 64KiB..{format_size(size)} -o DIR` chooses a file per "
            f"size range by simulating every candidate's files there (files on fewer channels, faster at large sizes and "
            f"slower at mid ones, compete there too), which RCCL loads from MSCCL_ALGO_DIR=DIR and picks by the call's "
            f"size (docs/msccl.md, \"One file or a file per size\")")
