"""The one MSCCL file ``forestcoll generate --format msccl`` writes without ``--k``, and split files.

Choice: the optimal k's file when it fits the runtime's limits, competing with the powers of two below it whose
files fit (:func:`forestcoll.msccl.export.fitting_msccl`), the fastest *file* at the design size (1 GiB) taken.
Split: that file's split version (:func:`split_files`: every chunk cut into s MSCCL chunks moved one per step)
replaces it when the split file is not slower at the design size and faster at the mid size (16 MiB), where the
runtime's kernel gives an MSCCL chunk below 2 MiB a single loop iteration, so an unsplit tree barely pipelines
(docs/msccl.md, "Split chunks").  The rates come from the caller (``file_rate(algo, size)``): this layer does not
simulate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from forestcoll import collectives
from forestcoll.msccl.export import ExportError, ExportOptions, ExportResult, _fitting, _over_limits, export_msccl
from forestcoll.msccl.ir import Algo
from forestcoll.schedule import Schedule

__all__ = ["MID_SIZE", "SPLIT_STEPS", "generated_msccl", "split_files", "split_if_not_slower"]

SPLIT_STEPS = 8  # a split file moves each tree's largest range of chunks in at least this many steps
MID_SIZE = 16 << 20  # the split must win here (and not lose at the design size) to be written
MAX_COUNT_ANY = 1 << 30  # a piece size that never cuts a tree's range


def split_files(sched: Schedule, options: ExportOptions | None, first: ExportResult) -> list[tuple[int, ExportResult]]:
    """[(s, export result)] or []: ``sched``'s file with every chunk cut into s MSCCL chunks, one per step
    (``split=s, max_cnt=1``), s the smallest power of two that moves the largest range of chunks one tree carries in
    :data:`SPLIT_STEPS` steps, halved while the steps would exceed the runtime's limit per thread block (bounded by
    ``first``, the unsplit file: its steps x its largest count x s); nothing when s would be 1 or the file is not
    finer than ``first``.

    Why: below 2 MiB per MSCCL chunk the runtime moves each chunk in a single loop iteration (two slices), so a tree
    whose data is one chunk crosses every hop in two transfers and its stages barely overlap; cut into s chunks it
    moves in 2s transfers, about as finely as NCCL pipelines the trees themselves (tree chunks of 64-512 KiB).
    At large sizes the loop iterations pipeline anyway and the split changes little; the caller decides."""
    from forestcoll.pieces import cut_pieces, shape_trees

    _k, whole = cut_pieces(sched, shape_trees(sched), MAX_COUNT_ANY)
    largest = max(pc.cnt for pc in whole)
    most = max((st.cnt for g in first.algo.gpus for tb in g.tbs for st in tb.steps), default=1)
    split = 1
    while split * largest < SPLIT_STEPS and split < 64:
        split *= 2
    while split > 1 and split * first.steps_per_tb * most > first.limits.steps_per_tb:
        split //= 2
    while split > 1:
        try:
            result = export_msccl(sched, replace(options or ExportOptions(), split=split, max_cnt=1))
        except ExportError:
            split //= 2
            continue
        return [(split, result)] if result.total_steps > first.total_steps else []
    return []


def generated_msccl(topology, sched: Schedule, options: ExportOptions | None = None,
                    rate: Callable[[Schedule, int], float] | None = None,
                    file_rate: Callable[[Algo, int], float] | None = None, size: int = 1 << 30,
                    split: bool = True, **generate_kwargs: Any) -> tuple[Schedule, ExportResult]:
    """The schedule and file ``generate --format msccl`` writes (not yet written): ``sched``'s file, or, when it
    exceeds the runtime's limits, :func:`~forestcoll.msccl.export.fitting_msccl`'s with a note saying so.  With
    ``file_rate`` the optimal file competes with the fitting powers of two below it (the fastest file at ``size``,
    ties to the optimal), and, with ``split`` (and ``options`` that split nothing themselves), the chosen file's
    split version replaces it when it is not slower at ``size`` and faster at :data:`MID_SIZE`; a note says so."""
    if not collectives.get(sched.collective).tree_based:
        file_rate = None  # all-to-all: one lowering, no k to choose among
    if file_rate is not None:
        file_rate = _remembered(file_rate)
    first: ExportError | None = None
    try:
        own = export_msccl(sched, options)
    except ExportError as exc:
        if not _over_limits(exc):
            raise
        first = exc
    if first is None and file_rate is None:
        return sched, own
    found = _fitting(topology, sched.collective, sched, options, rate, size, file_rate,
                     own if first is None else None, **generate_kwargs)
    if first is None and (found is None or found[0] is sched):
        chosen, result = sched, own
        said = [f"the optimal k={sched.k}'s file is {found[1]}"] if found is not None else []
    elif found is None:
        assert first is not None
        raise first
    else:
        chosen, how, result = found  # the file that was ranked (every file _fitting exports is kept whole)
        bound = sched.bound_algbw
        reach = f"; its trees reach {float(chosen.algbw / bound):.1%} of the bound" if bound else ""
        why = f"does not fit: {first}" if first is not None else "fits, but its file is slower"
        said = [f"the optimal k={sched.k} {why}; exported k={chosen.k}, {how}{reach}"]
    base = options or ExportOptions()
    if split and file_rate is not None and base.split == 1 and base.max_cnt is None:
        result, why_split = split_if_not_slower(chosen, result, base, file_rate, size)
        said += [why_split] if why_split else []
    result.notes[:0] = said
    return chosen, result


def split_if_not_slower(sched: Schedule, result: ExportResult, options: ExportOptions,
                         file_rate: Callable[[Algo, int], float], size: int) -> tuple[ExportResult, str | None]:
    """``result``, or its split file (:func:`split_files`) when that is not slower at ``size`` and faster at
    :data:`MID_SIZE`; with a note saying which and the rates that decided (None when no finer file fits)."""
    from forestcoll.units import format_size

    found = split_files(sched, options, result)
    if not found:
        return result, None
    s, finer = found[0]
    big, mid = size, min(MID_SIZE, size)
    rates = {}
    wins = True
    for x in dict.fromkeys((mid, big)):  # the mid size first: cheaper, and when it gains nothing, nothing more is asked
        rates[x] = (file_rate(result.algo, x), file_rate(finer.algo, x))
        wins = rates[x][1] >= rates[x][0] if x == big else rates[x][1] > rates[x][0]
        if not wins:
            break
    figures = "; ".join(f"{format_size(x)}: {rates[x][1]:.1f} GB/s split, {rates[x][0]:.1f} unsplit"
                        for x in sorted(rates, reverse=True))
    if wins:
        return finer, (f"split: every chunk cut into {s} MSCCL chunks, one per step (nchunksperloop "
                       f"{finer.algo.nchunksperloop}; {figures})")
    return result, f"not split: every chunk cut into {s} MSCCL chunks would not be faster ({figures})"


def _remembered(file_rate: Callable[[Algo, int], float]) -> Callable[[Algo, int], float]:
    """``file_rate`` that simulates each (file, size) once (the split decision asks again for the chosen file)."""
    seen: dict[tuple[int, int], tuple[Algo, float]] = {}

    def rate(algo: Algo, size: int) -> float:
        key = (id(algo), size)
        if key not in seen:
            seen[key] = (algo, file_rate(algo, size))  # the algo is kept: its id stays unique
        return seen[key][1]
    return rate
