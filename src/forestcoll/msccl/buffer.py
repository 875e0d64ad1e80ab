"""The runtime's buffer for an MSCCL file: ``generate --format msccl --buffsize B`` chooses the file for
``NCCL_BUFFSIZE=B``.

Why: msccl-executor-nccl and RCCL move an MSCCL step in slices of the communicator's buffer (``stepSize =
buffSize / NCCL_STEPS``, two steps a slice), so the default 4 MiB buffer moves 1 MiB units and deep trees pipeline
in too few of them at 1 GiB (docs/msccl.md, "The kernel's unit is the limit, not the layout").  ``NCCL_BUFFSIZE``
is an environment variable of the runtime: a smaller buffer gives every file finer units with no change to the file.

Choice (:func:`buffered_msccl`): :func:`forestcoll.msccl.generated.generated_msccl`'s choice (k, then plain, split
or even pieces) ranked by the files' simulated rate *at that buffer* (the ring rule with a slice of ``B / 4``,
:func:`buffer_slice`) with a cost per slice (:data:`SLICE_COST_US`, the Simple protocol's fence and flag after each
slice; docs/msccl.md "Runtime buffer" gives the public figures), against the file ``generate`` writes without the
flag (the default buffer, default model), rated with the same cost.  ``auto`` chooses for each of
:data:`AUTO_BUFFSIZES` and keeps the buffer whose file is fastest at the design size (1 GiB).  A note says which
``NCCL_BUFFSIZE`` to set and the rates at 1 MiB / 16 MiB / 1 GiB.

Cost: only the rates differ between buffers, so every candidate schedule is generated and every file exported once
per run (:mod:`forestcoll.msccl.reuse`), a simulation serves every buffer that cuts the file's chunks alike (the
simulator's ``file_rate`` with a shared store), and the choice of k cuts short the files that provably lose (its
``race``; their rates are shown as ``<r``).  Each buffer's choice is made lazily (the files cut short are not
simulated again only to order the other k's files) and the kept buffer's again in full, its races replayed, for its
notes (:func:`buffered_msccl`'s ``lazy``).  What remains is the 1 GiB simulations of the close contenders at the
small slices (512 KiB: 8x the default buffer's transfers): mi250:nodes=2 allgather ``auto`` 160 s CPU against about
20 s without the flag (docs/msccl.md "Runtime buffer", "Lazy choices").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from forestcoll.errors import UsageError

if TYPE_CHECKING:  # the CLI checks the flags with this module: it loads no exporter until it runs one
    from forestcoll.msccl.export import ExportOptions, ExportResult
    from forestcoll.msccl.ir import Algo
    from forestcoll.progress import Progress
    from forestcoll.schedule import Schedule

__all__ = ["AUTO_BUFFSIZES", "DEFAULT_BUFFSIZE", "REPORT_SIZES", "SLICE_COST_US", "BufferChoice", "buffer_slice",
           "buffered_msccl", "check_buffer_flags", "generated_writer", "parse_buffsize", "parse_slice_cost",
           "write_buffered_msccl"]

DEFAULT_BUFFSIZE = 4 << 20  # NCCL_BUFFSIZE's default (NCCL and RCCL)
AUTO_BUFFSIZES = (DEFAULT_BUFFSIZE, 1 << 20, 512 << 10)  # what --buffsize auto tries
MIN_BUFFSIZE, MAX_BUFFSIZE = 64 << 10, 64 << 20  # the range --buffsize accepts (powers of two)
STEPS_PER_SLICE = 4  # NCCL_STEPS (8) / SLICESTEPS (2): a ring's (and the MSCCL kernel's) slice is buffSize / 4
SLICE_COST_US = Fraction(1)  # the per-slice cost a --buffsize choice charges by default (docs/msccl.md)
MAX_SLICE_COST_US = 1000
REPORT_SIZES = (1 << 20, 16 << 20, 1 << 30)  # the sizes the note reports


def parse_buffsize(text: str) -> tuple[int, ...]:
    """The buffers ``--buffsize`` names: ``(B,)`` for a size (a power of two from 64KiB to 64MiB), or
    :data:`AUTO_BUFFSIZES` for ``auto``; UsageError with one line otherwise."""
    from forestcoll.units import parse_size

    if str(text).strip().lower() == "auto":
        return AUTO_BUFFSIZES
    try:
        size = parse_size(text)
    except UsageError as exc:
        raise UsageError(f"--buffsize: {exc} (or auto)") from None
    if size & (size - 1) or not MIN_BUFFSIZE <= size <= MAX_BUFFSIZE:
        raise UsageError(f"--buffsize {text}: NCCL_BUFFSIZE must be a power of two from 64KiB to 64MiB here "
                         f"(the runtimes' default is 4MiB), or auto")
    return (size,)


def parse_slice_cost(text: str | None) -> float:
    """Seconds from ``--slice-cost`` (microseconds, or a number with ns / us / ms); None gives
    :data:`SLICE_COST_US`.  UsageError with one line when it is not a latency from 0 to 1 ms."""
    from forestcoll.errors import ForestCollError
    from forestcoll.units import parse_latency

    if text is None:
        return float(SLICE_COST_US) * 1e-6
    try:
        cost = parse_latency(text, "--slice-cost")
    except ForestCollError as exc:
        raise UsageError(str(exc)) from None
    if cost > MAX_SLICE_COST_US:
        raise UsageError(f"--slice-cost {text}: at most 1 ms per slice")
    return float(cost) * 1e-6


def check_buffer_flags(args: Any) -> None:
    """``generate``'s ``--buffsize`` / ``--slice-cost`` against its other flags and their values, before any work
    (UsageError, one line): the buffer chooses the file, so it needs ``--format msccl`` without ``--k``,
    ``--max-height`` or ``--sizes``."""
    buffsize, cost = getattr(args, "buffsize", None), getattr(args, "slice_cost", None)
    if buffsize is None:
        if cost is not None:
            raise UsageError("--slice-cost is the per-slice cost --buffsize ranks files with; give --buffsize too")
        return
    if args.format != "msccl" or args.sizes:
        raise UsageError("--buffsize chooses an MSCCL file for the runtime's buffer: it takes --format msccl -o FILE.xml "
                         "(without --sizes)")
    from forestcoll import collectives

    if not collectives.get(args.collective).tree_based:
        raise UsageError(f"--buffsize chooses among tree files; {args.collective} has one lowering")
    for flag in ("k", "max_height"):
        if getattr(args, flag, None) is not None:
            raise UsageError(f"--buffsize chooses the file's k for the buffer; drop --{flag.replace('_', '-')}")
    parse_buffsize(buffsize)
    parse_slice_cost(cost)


def buffer_slice(buffsize: int) -> int:
    """The slice (bytes) the kernel moves with ``NCCL_BUFFSIZE=buffsize``: the simulator's ``--slice``."""
    return buffsize // STEPS_PER_SLICE


@dataclass
class BufferChoice:
    """A buffer, the schedule and file chosen for it, and that file's rates (GB/s by size) at that buffer."""

    buffsize: int
    sched: Schedule
    result: ExportResult
    rates: dict[int, float]


def buffered_msccl(topology, sched: Schedule, options: ExportOptions | None, buffers: tuple[int, ...],
                   slice_cost_s: float, rate_at: Callable[[int | None, float], Callable[[Algo, int], float]],
                   split: bool = True, size: int = 1 << 30, progress: Progress | None = None, lazy: bool = True,
                   **generate_kwargs: Any) -> tuple[Schedule, ExportResult]:
    """The schedule and file (not yet written) for a runtime buffer of one of ``buffers``: for each, the file
    :func:`~forestcoll.msccl.generated.generated_msccl` chooses when the files are ranked by ``rate_at(slice bytes,
    slice_cost_s)`` (a ``file_rate``), the default buffer's file being the one chosen without a buffer (the default
    model's ranking); the fastest at ``size`` kept (ties to the larger buffer).  Its notes say which
    ``NCCL_BUFFSIZE`` to set and compare its rates at :data:`REPORT_SIZES` with the default file's at the default
    buffer, both with the per-slice cost.  ``rate_at(None, 0.0)`` must be the default model's rate.  ``progress``
    gets a stage per buffer (each choice simulates files at 1 GiB: minutes on large fabrics).  ``lazy`` (default):
    each buffer's choice is made lazily (:func:`~forestcoll.msccl.generated.generated_msccl`'s ``lazy``: the same
    file, fewer simulations, notes to discard) and the kept buffer's again in full, its races replayed, for its
    notes: the same file and notes as full choices throughout (False), which tests compare it with."""
    from forestcoll.msccl.generated import generated_msccl
    from forestcoll.msccl.reuse import reusing
    from forestcoll.progress import report
    from forestcoll.units import format_size

    kept: list[Algo] = []  # keeps every rated file alive, so an id is never reused for another file
    memo: dict[tuple[int, int, int], float] = {}

    def rating(buffsize: int) -> Callable[[Algo, int], float]:
        inner = rate_at(buffer_slice(buffsize), slice_cost_s)

        def rate(algo: Algo, at: int) -> float:
            key = (id(algo), at, buffsize)
            if key not in memo:
                kept.append(algo)
                memo[key] = inner(algo, at)
            return memo[key]
        rate.bound = getattr(inner, "bound", None)  # type: ignore[attr-defined]  # the busiest link's: any buffer
        rate.race = getattr(inner, "race", None)  # type: ignore[attr-defined]  # the choice of k cuts losers short
        rate.promise = getattr(inner, "promise", None)  # type: ignore[attr-defined]  # a lazy choice's skipped rates
        return rate

    order = sorted(set(buffers), reverse=True)
    stage = "choosing the file for each NCCL_BUFFSIZE (the default one first)"
    report(progress, stage, 0, len(order) + 1)
    with reusing():  # each candidate schedule generated and exported once, rated per buffer (msccl/reuse.py)
        base_sched, base = generated_msccl(topology, sched, options, None, rate_at(None, 0.0), size, split,
                                           **generate_kwargs)
        choices = []
        races: dict[int, dict] = {buffsize: {} for buffsize in order}
        for done, buffsize in enumerate(order, 1):
            report(progress, stage, done, len(order) + 1)
            if buffsize == DEFAULT_BUFFSIZE:
                chosen, result = base_sched, base
            else:  # lazy: the same file, but notes only good enough to discard (made again for the buffer kept)
                chosen, result = generated_msccl(topology, sched, options, None, rating(buffsize), size, split,
                                                 lazy=lazy, races=races[buffsize], **generate_kwargs)
            rate = rating(buffsize)
            choices.append(BufferChoice(buffsize, chosen, result, {x: rate(result.algo, x) for x in REPORT_SIZES}))
        best = max(choices, key=lambda c: (c.rates[size], c.buffsize))
        if lazy and best.buffsize != DEFAULT_BUFFSIZE:  # its notes as the full choice writes them: races replayed
            again, result = generated_msccl(topology, sched, options, None, rating(best.buffsize), size, split,
                                            races=races[best.buffsize], **generate_kwargs)
            assert again is best.sched and result.algo is best.result.algo, "a lazy choice chose another file"
            best.result = result
    default_rate = rating(DEFAULT_BUFFSIZE)
    default_rates = {x: default_rate(base.algo, x) for x in REPORT_SIZES}
    sizes = " / ".join(format_size(x) for x in REPORT_SIZES)
    cost = f"{slice_cost_s * 1e6:g} us"

    def figures(rates: dict[int, float]) -> str:
        return " / ".join(f"{rates[x]:.1f}" for x in REPORT_SIZES)

    def named(c: BufferChoice) -> str:
        return f"{c.result.algo.name} (k={c.sched.k})"

    plain = BufferChoice(DEFAULT_BUFFSIZE, base_sched, base, default_rates)
    said = [f"runtime buffer: run this file with NCCL_BUFFSIZE={best.buffsize} ({format_size(best.buffsize)}; "
            f"the runtime's slice {format_size(buffer_slice(best.buffsize))}); the files were ranked by their rate "
            f"simulated with that buffer and {cost} per slice each block sends (a what-if of the Simple protocol's "
            "fence and flag, docs/msccl.md \"Runtime buffer\")",
            f"runtime buffer: GB/s at {sizes} with {cost} per slice: this file {figures(best.rates)} at "
            f"{format_size(best.buffsize)}; the file written without --buffsize, {named(plain)}, "
            f"{figures(default_rates)} at the default {format_size(DEFAULT_BUFFSIZE)}"]
    gains = best.rates[size] > default_rates[size]
    if best.buffsize != DEFAULT_BUFFSIZE and not gains:
        said.append(f"runtime buffer: with {cost} per slice the file written without --buffsize is as fast or faster "
                    f"at {format_size(size)} at the default buffer: leave NCCL_BUFFSIZE unset and use that file "
                    "(generate it without --buffsize)")
    slower = [x for x in REPORT_SIZES if x != size and best.rates[x] < default_rates[x]]
    if best.buffsize != DEFAULT_BUFFSIZE and gains and slower:
        at = ", ".join(f"{format_size(x)} ({best.rates[x]:.1f} against {default_rates[x]:.1f} GB/s)" for x in slower)
        said.append(f"runtime buffer: this file is slower than the file written without --buffsize at {at}; "
                    "NCCL_BUFFSIZE applies to every call of the communicator, so where those sizes matter keep this "
                    "file to the large calls (--min-bytes) or leave the buffer as it is")
    if len(choices) > 1:
        said.append("runtime buffer (auto): " + "; ".join(f"{format_size(c.buffsize)}: {named(c)} {figures(c.rates)}"
                                                          for c in choices) + f" (GB/s at {sizes}; kept: the fastest "
                                                                              f"at {format_size(size)})")
    best.result.notes.extend(said)
    return best.sched, best.result


def write_buffered_msccl(topology, sched: Schedule, path: str, options: ExportOptions | None = None,
                         check: bool = True, progress: Progress | None = None, split: bool = True, *, buffers: tuple[int, ...],
                         slice_cost_s: float, rates: Callable[..., Callable[[Algo, int], float]],
                         **generate_kwargs: Any) -> tuple[Schedule, ExportResult]:
    """Write :func:`buffered_msccl`'s file (``generate --format msccl --buffsize``), self-checked; ``rates(topology,
    slice_bytes, slice_cost_s)`` is the simulator's ``file_rate``."""
    from forestcoll.msccl.export import write_checked

    generate_kwargs.pop("file_rate", None)  # ranked at each buffer instead
    shared: dict = {}  # one network, and a simulation serves every buffer that cuts the file's chunks alike
    chosen, result = buffered_msccl(topology, sched, options, buffers, slice_cost_s,
                                    lambda sl, cost: rates(topology, sl, cost, shared), split, progress=progress,
                                    **generate_kwargs)
    return chosen, write_checked(result, path, check, progress)


def generated_writer(buffsize: str | None, slice_cost: str | None, rates: Callable[..., Callable[[Algo, int], float]]):
    """The writer of ``generate --format msccl`` without ``--k``: the export's own (``write_generated_msccl``)
    without ``--buffsize``, else :func:`write_buffered_msccl` for the buffers it names (UsageError: one line)."""
    from functools import partial

    from forestcoll.msccl.export import write_generated_msccl

    if buffsize is None:
        return write_generated_msccl
    return partial(write_buffered_msccl, buffers=parse_buffsize(buffsize), slice_cost_s=parse_slice_cost(slice_cost),
                   rates=rates)
