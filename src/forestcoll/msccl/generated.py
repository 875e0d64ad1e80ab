"""The one MSCCL file ``forestcoll generate --format msccl`` writes without ``--k``: its k, then its variant
(plain, split, even pieces per tree).

Choice: the optimal k's file when it fits the runtime's limits, competing with the powers of two below it whose
files fit (:func:`forestcoll.msccl.export.fitting_msccl`), the fastest *file* at the design size (1 GiB) taken.
Variants: that file as exported (plain), its split version (:func:`split_files`: every chunk cut into s MSCCL
chunks moved one per step; at the mid size, 16 MiB, the runtime's kernel gives an MSCCL chunk below 2 MiB a single
loop iteration, so an unsplit tree barely pipelines: docs/msccl.md, "Split chunks") and its even-pieces version
(:func:`even_files`: every tree's range in as many pieces as the others', so a tree carrying one chunk does not
fill its pipeline in a few 1 MiB units at 1 GiB).  Rule (:func:`written_variant`): in that order, a variant
replaces the file chosen so far when it is faster at the design size or at the mid size and slower at neither.
Then the files (plain, split, even pieces) of every other k that fits compete with the file chosen by the same rule,
k by k (:func:`_other_ks`; MI300 x4 rail allreduce: the optimal k=8 with even pieces, 189.0 GB/s at 1 GiB, replaces
k=4's split file, 180.9; dgx-1 allgather: k=64 with even pieces replaces k=32's plain file), and, when the optimal
trees join GPUs of one box through a CPU and the same optimum packs without the CPUs, that schedule's files
(:func:`_off_cpus`, :mod:`forestcoll.msccl.detours`; MI300 x4 rail allgather: 361.3 -> 382.5 GB/s at 1 GiB), and
the same optimum packed without the links between the CPUs; for RCCL each of those with more of its files
(:func:`rccl_files`: more even pieces, the latency order, fewer channels; MI300 x4 rail under RCCL: allreduce 183.5
-> 191.9, allgather 364.1 -> 383.6 GB/s at 1 GiB, both faster at 16 MiB too).
The rates come from the caller (``file_rate(algo, size)``, with an optional ``file_rate.bound(algo, size)``, an
upper bound on the rate that lets files that cannot win go unsimulated): this layer does not simulate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from forestcoll import collectives
from forestcoll.msccl.export import ExportError, ExportOptions, ExportResult, _fitting, _over_limits
from forestcoll.msccl.ir import Algo
from forestcoll.msccl.reuse import exported, once
from forestcoll.schedule import Schedule

__all__ = ["MID_SIZE", "SPLIT_STEPS", "Below", "even_files", "generated_msccl", "replaces", "split_files",
           "written_variant"]

SPLIT_STEPS = 8  # a split file moves each tree's largest range of chunks in at least this many steps
MID_SIZE = 16 << 20  # a variant is written when faster here or at the design size and slower at neither
T = TypeVar("T")  # a file (Algo) or a plan: whatever the rate rates
MAX_COUNT_ANY = 1 << 30  # a piece size that never cuts a tree's range


NARROW_UPTO = 4  # an RCCL file of at most this many channels tries every narrower count, a wider one half as many


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
            result = exported(sched, replace(options or ExportOptions(), split=split, max_cnt=1))
        except ExportError:
            split //= 2
            continue
        return [(split, result)] if result.total_steps > first.total_steps else []
    return []


def generated_msccl(topology, sched: Schedule, options: ExportOptions | None = None,
                    rate: Callable[[Schedule, int], float] | None = None,
                    file_rate: Callable[[Algo, int], float] | None = None, size: int = 1 << 30,
                    split: bool = True, *, lazy: bool = False, races: dict | None = None,
                    **generate_kwargs: Any) -> tuple[Schedule, ExportResult]:
    """The schedule and file ``generate --format msccl`` writes (not yet written): ``sched``'s file, or, when it
    exceeds the runtime's limits, :func:`~forestcoll.msccl.export.fitting_msccl`'s with a note saying so.  With
    ``file_rate`` the optimal file competes with the fitting powers of two below it (the fastest file at ``size``,
    ties to the optimal), and, with ``split`` (and ``options`` that set neither split nor pieces), the chosen file's
    split or even-pieces version replaces it by :func:`written_variant`'s rule; when the optimal k's file fits but lost
    the race, its split and even-pieces files, in that order, replace the file chosen so far by the same rule (even
    pieces rescue a large k's file, whose small trees move in few units), as do every other fitting k's files and
    those of the optimum packed without the CPUs or without the links between them (:func:`_off_cpus`); notes say
    which and why.

    ``races``: a dict kept across choices on the same rates (``generate --buffsize``): the choice of k's race
    outcomes, replayed when the choice is made again with it.  ``lazy``: the same file, with fewer simulations and
    notes only fit to be discarded: the other k's files compete in the order of their race rates (``<r`` for those
    cut short) instead of their simulated ones, and their plain files' skipped simulations are promised to the rate
    (``file_rate.promise``) so a later race rates them as if simulated; that order cannot change the file chosen
    unless one of them replaces it, and then they compete again in the full order."""
    if not collectives.get(sched.collective).tree_based:
        file_rate = None  # all-to-all: one lowering, no k to choose among
    most = getattr(file_rate, "bound", None)  # the simulator's upper bound on the rate (simulate.msccl.FileRate)
    race = getattr(file_rate, "race", None)  # --buffsize's rates: the losers of the choice of k are cut short
    promise = getattr(file_rate, "promise", None) if lazy and race is not None else None
    races = {} if races is None else races
    if file_rate is not None:
        file_rate = _remembered(file_rate)
    first: ExportError | None = None
    try:
        own = exported(sched, options)
    except ExportError as exc:
        if not _over_limits(exc):
            raise
        first = exc
    if first is None and file_rate is None:
        return sched, own
    found = _fitting(topology, sched.collective, sched, options, rate, size, _racing(file_rate, race, races),
                     own if first is None else None, **generate_kwargs)
    if first is None and (found is None or found[0] is sched):
        chosen, result = sched, own
        said = [f"the optimal k={sched.k}'s file is {found[1]}"] if found is not None else []
    elif found is None:
        assert first is not None
        raise first
    else:
        chosen, how, result, _every = found  # the file that was ranked (every file _fitting exports is kept whole)
        bound = sched.bound_algbw
        reach = f"; its trees reach {float(chosen.algbw / bound):.1%} of the bound" if bound else ""
        why = f"does not fit: {first}" if first is not None else "fits, but its file is slower"
        said = [f"the optimal k={sched.k} {why}; exported k={chosen.k}, {how}{reach}"]
    base = options or ExportOptions()
    if split and file_rate is not None and base.split == 1 and base.max_cnt is None:
        result, why = written_variant(chosen, result, base, file_rate, size)
        said += [why] if why else []
        if found is not None:  # every other k whose file fits: its variants compete with the file chosen so far
            chosen, result, said = _lazy_other_ks(sched, found[3], chosen, result, said, base, file_rate, most, size,
                                                  races if promise is not None else None, promise)
        chosen, result, said = _off_cpus(topology, sched, chosen, result, said, base, file_rate, most, size,
                                         **generate_kwargs)
        chosen, result, said = _as_routed(topology, sched, chosen, result, said, base, file_rate, most, size,
                                          **generate_kwargs)
    result.notes[:0] = said
    return chosen, result


SLACK = 1e-6  # a bound this much (relative) below a rate still counts as reaching it: float rounding, not a loss


def _lazy_other_ks(optimal: Schedule, files: dict[int, tuple[Schedule, ExportResult]], chosen: Schedule,
                   result: ExportResult, said: list[str], options: ExportOptions,
                   file_rate: Callable[[Algo, int], float], bound: Callable[[Algo, int], float] | None, size: int,
                   races: dict | None, promise: Callable[[Algo, int], None] | None
                   ) -> tuple[Schedule, ExportResult, list[str]]:
    """:func:`_other_ks`; with ``races`` (a lazy choice's, ``promise`` its rate's) first with each plain file rated
    by the race (:func:`_racing`: its simulated rate, or the ``<r`` it was cut short at, never below it): when no file
    replaces ``result`` the order did not matter (each comparison is with ``result``, and a file whose race rate is
    below it has a simulated rate below it too), so that is the file; else again in the full order."""
    if races is None or promise is None:
        return _other_ks(optimal, files, chosen, result, said, options, file_rate, bound, size)
    raced = races.setdefault("rated", {})

    def known(algo: Algo, at: int) -> float:
        got = raced.get((id(algo), at))
        return file_rate(algo, at) if got is None else got

    got = _other_ks(optimal, files, chosen, result, list(said), options, file_rate, bound, size, known)
    if got[1] is not result:
        return _other_ks(optimal, files, chosen, result, said, options, file_rate, bound, size)
    for kk, (_sched, plain) in files.items():  # the full order simulates them: a later race must see them so
        if kk != chosen.k:
            promise(plain.algo, size)
    return got


def _other_ks(optimal: Schedule, files: dict[int, tuple[Schedule, ExportResult]], chosen: Schedule,
              result: ExportResult, said: list[str], options: ExportOptions, file_rate: Callable[[Algo, int], float],
              bound: Callable[[Algo, int], float] | None, size: int,
              ranked: Callable[[Algo, int], float] | None = None) -> tuple[Schedule, ExportResult, list[str]]:
    """The schedule, file and notes written once the variants (plain, split, even pieces) of every k in ``files``
    (the files that fit, k -> (schedule, plain file)) other than ``chosen``'s have competed with ``result`` (the
    file chosen so far) by :func:`_challenge`, k by k in the race's order (the faster plain file at ``size`` first,
    ties to the larger k; ``ranked``: the plain files' rates that order and pre-screen them, ``file_rate`` by
    default, else an upper bound on it)."""
    from forestcoll.units import format_size

    ranked = ranked or file_rate
    tally = [0, 0]
    rest = sorted((kk for kk in files if files[kk][0] is not chosen),  # (chosen may be another packing of its k)
                  key=lambda kk: (-ranked(files[kk][1].algo, size), -kk))
    for kk in rest:
        sched, plain = files[kk]
        who = f"the optimal k={kk}'s" if kk == optimal.k else f"k={kk}'s"
        chosen, result, said = _challenge(who, sched, _variants(sched, options, plain), chosen, result, said,
                                          file_rate, bound, size, tally, ranked=ranked)
    if sum(tally):
        said.append(f"the other files that fit (k={', '.join(map(str, rest))}: plain, split, even pieces) competed by "
                    f"the same rule: {tally[0]} simulated, {tally[1]} not (their busiest link, or their rate in the "
                    f"race, is below the file's chosen so far at {format_size(size)})")
    return chosen, result, said


def _off_cpus(topology, optimal: Schedule, chosen: Schedule, result: ExportResult, said: list[str],
              options: ExportOptions, file_rate: Callable[[Algo, int], float], bound: Callable[[Algo, int], float] | None,
              size: int, **generate_kwargs: Any) -> tuple[Schedule, ExportResult, list[str]]:
    """When ``optimal``'s trees join GPUs of one box through a CPU, the same optimum packed without the CPUs
    and packed without the links between the CPUs (:func:`forestcoll.msccl.detours.optimum_on` on ``without_cpus``
    and on ``without_cpu_links``), where they exist, compete with ``result`` by
    :func:`_challenge`, each with its files (plain, split, even pieces, and for RCCL :func:`rccl_files`), with a
    note; else nothing changes."""
    from forestcoll.msccl.detours import optimum_on, such_edges, through_cpus_note, without_cpu_links, without_cpus

    for what, how, part in (("without the CPUs", "off cpus", without_cpus),
                            ("without the links between the CPUs", "one socket", without_cpu_links)):
        bare = once((how, id(topology), id(optimal), tuple(sorted(generate_kwargs.items()))),
                    lambda part=part: optimum_on(topology, optimal, part, **generate_kwargs), topology, optimal)
        if bare is None:
            continue
        try:
            plain = exported(bare, options)
        except ExportError as exc:
            if not _over_limits(exc):
                raise
            continue
        tally = [0, 0]
        mine = _variants(bare, options, plain)
        chosen, result, said = _challenge(f"the optimal k={bare.k}'s trees packed {what}: their", bare,
                                          mine + rccl_files(bare, options, mine), chosen, result, said, file_rate,
                                          bound, size, tally, raced=False)
        said.append(f"{through_cpus_note(topology, optimal)}: the optimum packed {what} (k={bare.k}, the same exact "
                    f"rate, {such_edges(topology, optimal, bare)} such edges) "
                    f"competed by the same rule ({tally[0]} files simulated, {tally[1]} not)")
    return chosen, result, said


ROUTED_BELOW = 0.95  # the packings as the runtime routes them race a written file below this share of the bound


def _as_routed(topology, optimal: Schedule, chosen: Schedule, result: ExportResult, said: list[str],
               options: ExportOptions, file_rate: Callable[[Algo, int], float],
               bound: Callable[[Algo, int], float] | None, size: int,
               **generate_kwargs: Any) -> tuple[Schedule, ExportResult, list[str]]:
    """When the file chosen so far (``result``, ``chosen``'s) runs below :data:`ROUTED_BELOW` of ``optimal``'s bound
    at ``size`` and ``optimal``'s trees pass PCIe switches or CPUs where a runtime does not send them
    (:func:`forestcoll.msccl.routed.misrouted`): the packings of the fabric as the runtime routes it
    (:func:`~forestcoll.msccl.routed.routed_schedules`: its optimum and powers of two k) whose plain files fit
    compete with it by :func:`_challenge`, as the other k's files do (each of their files, plain, split, even
    pieces, replaces the file so far when faster at :data:`MID_SIZE` or ``size`` and slower at neither:
    :func:`replaces`), highest exact rate first (ties: the larger k).  A single file serves every size: one faster at
    1 GiB but slower at 16 MiB is not taken.  A note says what competed, and that their exact rates are below the
    bound (at most that topology's own).  Else nothing changes."""
    from forestcoll.msccl.routed import misrouted, routed_schedules
    from forestcoll.units import format_size

    if not misrouted(topology, optimal):  # (no simulation asked: most fabrics stop here)
        return chosen, result, said
    if file_rate(result.algo, size) >= ROUTED_BELOW * float(optimal.bound_algbw):
        return chosen, result, said
    scheds = once(("as routed", id(topology), id(optimal), tuple(sorted(generate_kwargs.items()))),
                  lambda: routed_schedules(topology, optimal, **generate_kwargs), topology, optimal)
    fits: list[tuple[Schedule, ExportResult]] = []
    for sched in sorted(scheds, key=lambda x: x.k):
        try:
            fits.append((sched, exported(sched, options)))
        except ExportError as exc:
            if not _over_limits(exc):
                raise
    if not fits:
        return chosen, result, said
    fits.sort(key=lambda x: (-x[0].algbw, -x[0].k))
    before, tally = chosen, [0, 0]
    for sched, plain in fits:
        chosen, result, said = _challenge(f"k={sched.k}'s trees packed as the runtime routes the fabric: their", sched,
                                          _variants(sched, options, plain), chosen, result, said, file_rate, bound,
                                          size, tally, raced=False)
    exact = ", ".join(f"k={s.k} {float(s.algbw):.1f}" for s, _plain in fits)
    said = said + [f"the file so far runs below {ROUTED_BELOW:.0%} of the bound at {format_size(size)} and the "
                   f"optimal k={optimal.k}'s trees pass PCIe switches or CPUs where a runtime does not send them "
                   f"({misrouted(topology, optimal)} edges): packed as the runtime routes the fabric ({exact} GB/s "
                   f"exact; the bound {float(optimal.bound_algbw):.1f} counts routes no runtime takes), their files "
                   f"competed by the same rule ({tally[0]} simulated, {tally[1]} not): "
                   + (f"k={chosen.k}'s, {float(chosen.algbw / optimal.bound_algbw):.1%} of the bound, is taken"
                      if chosen is not before else "none is faster at one size and slower at neither")]
    return chosen, result, said


RCCL_LAYOUTS = ("finest", "latency", "narrow", "narrow latency")  # rccl_layouts' kinds of file, in rccl_files' order


def rccl_files(sched: Schedule, options: ExportOptions, mine: list[tuple[str, int, ExportResult]]
               ) -> list[tuple[str, int, ExportResult]]:
    """For an RCCL file, more of ``sched``'s files after ``mine`` (:func:`_variants`: plain, split, even pieces),
    [(kind, s, file)]: every layout of :func:`rccl_layouts`, in :data:`RCCL_LAYOUTS`' order; none for another
    runtime, a split or a cut (``options``' split, max_cnt or per_tree).

    Why: under RCCL's 64 thread blocks and 64 steps per block the layout decides much of a file's rate, and these are
    the layouts the per-size choice measured winning on the MI300 dump; the trees packed off the CPUs (or off the
    link between them) compete with them for the one file (MI300 x4 rail: allreduce 104.4 / 183.5 -> 105.2 / 191.9
    GB/s at 16 MiB / 1 GiB, the optimum kept on one socket on 2 channels in the latency order; allgather 229.4 /
    364.1 -> 232.1 / 383.6, the optimum off the CPUs in 6 even pieces per tree; docs/msccl.md "Trees kept on one
    socket")."""
    base = options or ExportOptions()
    if base.runtime != "rccl" or base.split != 1 or base.max_cnt is not None or base.per_tree != 0:
        return []
    got = rccl_layouts(sched, base, mine)
    return [(kind, 1 if layout.startswith("narrow") else n, r) for layout in RCCL_LAYOUTS for kind, n, r in got[layout]]


def rccl_layouts(sched: Schedule, options: ExportOptions, mine: list[tuple[str, int, ExportResult]],
                 layouts: tuple[str, ...] = RCCL_LAYOUTS) -> dict[str, list[tuple[str, int, ExportResult]]]:
    """The RCCL layouts of ``sched``'s files ``mine`` ([(kind, s, file)], :func:`_variants`' kinds: its plain file
    first), layout -> [(kind, n, file)], for each of ``layouts`` (of :data:`RCCL_LAYOUTS`): ``"finest"``, the
    even-pieces file with as many pieces per tree as fit (:func:`finest_files`, n = s); ``"latency"``, the plain and
    split files in the latency order (:func:`latency_files`, n = s); ``"narrow"`` and ``"narrow latency"``, the plain
    file on fewer channels in the progress and the latency order (:func:`narrow_files`, n = channels per instance).
    The single file takes them all (:func:`rccl_files`); the per-size choice names its packings' files after them
    (:func:`forestcoll.simulate.select.candidate_files`).  Each layout keeps its own conditions (the latency and the
    narrow files are for RCCL only); the runtime of the whole list is the caller's to check."""
    out: dict[str, list[tuple[str, int, ExportResult]]] = {}
    plain = mine[0][2]
    for layout in layouts:
        if layout == "finest":
            out[layout] = [("finer even pieces", s, r) for s, r in finest_files(sched, options, [
                (s, r) for k, s, r in mine if k == "even pieces"])]
        elif layout == "latency":
            out[layout] = latency_files(sched, options, [(k, s, r) for k, s, r in mine if k in ("plain", "split")])
        elif layout == "narrow":
            out[layout] = [(f"{c}-channel", c, r) for c, r in narrow_files(sched, options, plain)]
        elif layout == "narrow latency":
            out[layout] = [(f"{c}-channel latency", c, r)
                           for c, r in narrow_files(sched, replace(options, order="latency"), plain)]
        else:
            raise ValueError(f"unknown RCCL layout {layout!r}; choose from {', '.join(RCCL_LAYOUTS)}")
    return out


def finest_files(sched: Schedule, options: ExportOptions, even: list[tuple[int, ExportResult]]
                 ) -> list[tuple[int, ExportResult]]:
    """[(s, export result)] or []: for ``even``'s file (``[(s, file)]``, :func:`even_files`' even pieces of s
    MSCCL chunks per chunk, whose piece count per tree is a power of two that fits), the file with the most pieces per
    tree, between that count and s, that keeps within the runtime's limits; nothing when none does.

    A file of p >= 2 pieces per tree has p / 2 times the steps of the file of two (every range holds at least s >= p
    MSCCL chunks), so a count that did not fit (the exporter then halves it) shows in the steps and is passed over.
    Why: the even file's count halves from s until the steps fit, which can leave a block a third of its steps
    unused (MI300 x4 rail allgather off the CPUs: 4 pieces, 40 steps, 229.4 / 364.1 GB/s at 16 MiB / 1 GiB; 6 pieces,
    60 steps: 232.1 / 383.6)."""
    if not even:
        return []
    s, first = even[0]
    base = replace(options, split=s, max_cnt=None)
    try:
        two = exported(sched, replace(base, per_tree=2)).total_steps
    except ExportError:
        return []
    for p in range(s - 1, 2, -1):
        if p * two <= 2 * first.total_steps:
            break
        try:
            result = exported(sched, replace(base, per_tree=p))
        except ExportError:
            continue
        if 2 * result.total_steps == p * two:
            name = f"{result.algo.name}_even{p}"
            return [(s, result if options.name is not None else _renamed(result, name))]
    return []


def _variants(sched: Schedule, options: ExportOptions, plain: ExportResult) -> list[tuple[str, int, ExportResult]]:
    """[(kind, s, file)]: ``plain`` (``sched``'s file), then its split and even-pieces files, as they compete."""
    return ([("plain", 1, plain)] + [("split", s, r) for s, r in split_files(sched, options, plain)]
            + [("even pieces", s, r) for s, r in even_files(sched, options, plain)])


def _challenge(who: str, sched: Schedule, mine: list[tuple[str, int, ExportResult]], chosen: Schedule,
               result: ExportResult, said: list[str], file_rate: Callable[[Algo, int], float],
               bound: Callable[[Algo, int], float] | None, size: int, tally: list[int], raced: bool = True,
               ranked: Callable[[Algo, int], float] | None = None) -> tuple[Schedule, ExportResult, list[str]]:
    """``sched``'s files ``mine`` (kind, s, file), in order, each replacing ``result`` (``chosen``'s file, the one
    chosen so far) when it beats it by :func:`replaces`' rule (:func:`_beats`); a note, naming ``sched``'s files by
    ``who`` (a possessive: "k=4's"), says which.  ``tally``: [files simulated, files not] grows.

    Pruned, soundly: a file whose ``bound(algo, size)`` (an upper bound on ``file_rate``: the busiest link's) or,
    for a plain file that was ``raced`` (its k in the race of k), whose rate at ``size`` (asked in the race already) is below the rate at ``size``
    of the file chosen so far is slower there, so it cannot replace it: it is not simulated (``ranked``: that rate,
    or an upper bound on it)."""
    ranked = ranked or file_rate
    for kind, s, other in mine:
        ceiling = ranked(other.algo, size) if raced and kind == "plain" else bound(other.algo, size) if bound else None
        if ceiling is not None and ceiling < file_rate(result.algo, size) * (1 - SLACK):
            tally[1] += 1
            continue
        tally[0] += 1
        if faster := _beats(other.algo, result.algo, file_rate, size):
            what = ("plain file" if kind == "plain" else f"{kind} file (x{s}, nchunksperloop {other.algo.nchunksperloop})"
                    if s > 1 else f"{kind} file")
            said = [f"{who} {what} replaces k={chosen.k}'s written file (faster at {faster}, slower at neither); "
                    f"k={chosen.k}'s: " + "; ".join(said)]
            chosen, result = sched, other
    return chosen, result, said


def replaces(file_rate: Callable[[T, int], float], new: T, old: T, sizes: list[int],
             new_rates: dict[int, float], old_rates: dict[int, float]) -> bool:
    """The variants' rule: ``new`` replaces ``old`` (MSCCL files, or MSCCL++ plans: every candidate that must serve
    every size, :mod:`forestcoll.mscclpp.offcpu`'s routed race too) when it is faster at one of ``sizes`` and slower
    at none.  Sizes
    are asked in order and a loss ends the comparison (the mid size first: cheaper, and a loss there settles it);
    the rates asked are kept in ``new_rates`` / ``old_rates`` (``old``'s only where not there already)."""
    gains = False
    for x in sizes:
        if x not in old_rates:
            old_rates[x] = file_rate(old, x)
        new_rates[x] = file_rate(new, x)
        if new_rates[x] < old_rates[x]:
            return False
        gains = gains or new_rates[x] > old_rates[x]
    return gains


def _beats(algo: Algo, other: Algo, file_rate: Callable[[Algo, int], float], size: int) -> str | None:
    """The sizes (:data:`MID_SIZE` and ``size``, as "16MiB (a against b)") at which ``algo`` is faster than ``other``
    when it replaces it by :func:`replaces`' rule; else None."""
    from forestcoll.units import format_size

    sizes = list(dict.fromkeys((min(MID_SIZE, size), size)))
    mine: dict[int, float] = {}
    theirs: dict[int, float] = {}
    if not replaces(file_rate, algo, other, sizes, mine, theirs):
        return None
    return " and ".join(f"{format_size(x)} ({mine[x]:.1f} against {theirs[x]:.1f} GB/s)"
                        for x in sizes if mine[x] > theirs[x])


def even_files(sched: Schedule, options: ExportOptions | None, first: ExportResult) -> list[tuple[int, ExportResult]]:
    """[(s, export result)] or []: ``sched``'s file with *even pieces per tree* (``per_tree=None``: every tree's range
    cut into as many pieces as the others', of s MSCCL chunks per chunk, when some tree would cross a stage in fewer
    than 16 pipeline units at the design size; docs/msccl.md "Pieces"); nothing when that choice keeps the classic
    pieces (the same file as ``first``) or ``options`` set the pieces themselves.

    Why: a tree carrying one chunk of a large-k file moves it in a few units of 1 MiB at 1 GiB, so each stage of its
    pipeline fills late and, sharing links by volume, never catches up (MI300 x4 rail allgather k=8: 0.88 of its
    trees); cut as finely as the largest tree's range, it moves in 16 units."""
    base = options or ExportOptions()
    if base.per_tree != 0 or base.split != 1 or base.max_cnt is not None:
        return []
    try:
        result = exported(sched, replace(base, per_tree=None))
    except ExportError:
        return []
    s = result.algo.nchunksperloop // first.algo.nchunksperloop
    if s <= 1:
        return []
    if base.name is None:  # the split file of the same s is named _s<s>: say which pieces this one has
        result = _renamed(result, f"{result.algo.name}_even")
    return [(s, result)]


def _renamed(result: ExportResult, name: str) -> ExportResult:
    """``result`` with its algorithm named ``name``, renamed once per run (:func:`~forestcoll.msccl.reuse.once`, by the
    algorithm's identity and the name): a rate remembered by the file's identity then serves every choice."""
    algo = result.algo
    return replace(result, algo=once(("renamed", id(algo), name), lambda: replace(algo, name=name), algo))


def narrow_files(sched: Schedule, options: ExportOptions | None, first: ExportResult) -> list[tuple[int, ExportResult]]:
    """For an RCCL file: [(c, export result)], ``sched``'s file on fewer channels per instance than ``first`` (the
    exporter takes the widest layout that fits, with ``options``' pieces: ``per_tree=None`` for an even-pieces file):
    half as many and, for a file of at most :data:`NARROW_UPTO` channels, every other narrower count too; only those
    that fit; none for another runtime or when ``options`` set the channels or the split.

    Why: under RCCL's 64 thread blocks per GPU a wide file's stages share blocks; fewer channels give each block
    longer runs of one stream, which measured faster at 1 GiB and slower at 16 MiB (MI300 x4 rail allgather off the
    CPUs, k = 8, even pieces: 229.4 / 364.1 GB/s at 16 MiB / 1 GiB on 3 channels, 130.7 / 376.2 on 2), so they
    compete in the per-size choice, which takes each where it wins."""
    base = options or ExportOptions()
    if base.runtime != "rccl" or base.channels or base.split != 1 or base.max_cnt is not None or first.channels <= 1:
        return []
    inst = max(1, base.instances)
    wide = first.channels // inst
    counts = sorted({wide // 2, *(range(1, wide) if wide <= NARROW_UPTO else ())} - {0})
    out = []
    for c in counts:
        try:
            result = exported(sched, replace(base, channels=c))
        except ExportError:
            continue
        if result.channels == first.channels:
            continue
        if base.name is None:
            result = _renamed(result, f"{result.algo.name}{'_even' if base.per_tree is None else ''}_c{c}"
                                      f"{'_latency' if base.order == 'latency' else ''}")
        out.append((c, result))
    return out


def latency_files(sched: Schedule, options: ExportOptions | None, files: list[tuple[str, int, ExportResult]]
                  ) -> list[tuple[str, int, ExportResult]]:
    """For an RCCL file: the plain and split ``files`` again with their steps in the *latency* order
    (``order="latency"``: a piece's level counted in physical links, so a block does not hold a piece behind one
    still crossing the network; docs/msccl.md), as further variants; none for another runtime or when ``options``
    set another order than the default progress order.

    Why: under RCCL's 64 thread blocks per GPU a file's pipeline stages share channels and blocks, and there the
    latency order measured faster at every size on mi250 and on the MI300 dump's allreduce (docs/msccl.md, "The
    runtime the fabric implies"); for msccl-executor-nccl's files it was measured losing at 1 GiB (MI300 allreduce
    189.0 -> 184.0), so they are left as they were."""
    base = options or ExportOptions()
    if base.order != "progress" or base.runtime != "rccl":
        return []
    out = []
    for kind, s, first in files:
        opts = replace(base, order="latency") if kind == "plain" else replace(base, order="latency", split=s, max_cnt=1)
        try:
            result = exported(sched, opts)
        except ExportError:
            continue
        out.append((f"{kind} latency", s, result if base.name is not None else _renamed(result, f"{first.algo.name}_latency")))
    return out


def written_variant(sched: Schedule, result: ExportResult, options: ExportOptions,
                    file_rate: Callable[[Algo, int], float], size: int, even: bool = True
                    ) -> tuple[ExportResult, str | None]:
    """The file written for ``sched`` (``result``, its plain file): the plain file, its split file
    (:func:`split_files`) or its even-pieces file (:func:`even_files`, with ``even``), taken in that order, each
    replacing the file chosen so far when it is **faster at one of** ``size`` (the design size, where k was chosen)
    **and** :data:`MID_SIZE` **and slower at neither**: the faster at the design size unless it loses at the mid
    size, the faster at the mid size unless it loses at the design size (a tie at both keeps the file with fewer
    steps: a real kernel pays a little per step that the model does not charge).  Returns it with a note naming the
    variant written and the rates compared (None when no variant differs from the plain file).  Each variant is
    simulated at the mid size first, and at the design size only when it does not lose there."""
    from forestcoll.units import format_size

    found = [("plain", 1, result)]
    found += [("split", s, r) for s, r in split_files(sched, options, result)]
    found += [("even", s, r) for s, r in (even_files(sched, options, result) if even else [])]
    found += latency_files(sched, options, found[:2])
    if len(found) == 1:
        return result, None
    big, mid = size, min(MID_SIZE, size)
    sizes = list(dict.fromkeys((mid, big)))  # the mid size first: cheaper, and a loss there settles it
    rates: list[dict[int, float]] = [{} for _ in found]
    chosen = 0
    for i in range(1, len(found)):
        if replaces(file_rate, found[i][2].algo, found[chosen][2].algo, sizes, rates[i], rates[chosen]):
            chosen = i
    kind, s, written = found[chosen]
    what = {"plain": "plain (as exported)", "split": f"split, every chunk cut into {s} MSCCL chunks, one per step",
            "even": f"even pieces per tree, every chunk cut into {s} MSCCL chunks and every tree's range into as "
                    "many pieces as the others'"}
    what |= {f"{v} latency": f"{what[v]}, steps in the latency order" for v in ("plain", "split")}
    label = {"plain": "plain", "split": "split x{}", "even": "even pieces x{}", "plain latency": "plain latency",
             "split latency": "split x{} latency"}
    figures = ", ".join(label[v].format(n) + " " + " / ".join(f"{rates[i][x]:.1f}" if x in rates[i] else "-"
                                                               for x in reversed(sizes))
                        for i, (v, n, _r) in enumerate(found))
    at = " / ".join(format_size(x) for x in reversed(sizes))
    extra = f" (nchunksperloop {written.algo.nchunksperloop})" if chosen else ""
    return written, (f"variant written: {what[kind]}{extra}; GB/s at {at}: {figures} (each replaces the one before it "
                     "when faster at one size and slower at neither)")


def _remembered(file_rate: Callable[[Algo, int], float]) -> Callable[[Algo, int], float]:
    """``file_rate`` that simulates each (file, size) once (the variant decision asks again for the file the k choice
    ranked at the design size)."""
    seen: dict[tuple[int, int], tuple[Algo, float]] = {}

    def rate(algo: Algo, size: int) -> float:
        key = (id(algo), size)
        if key not in seen:
            seen[key] = (algo, file_rate(algo, size))  # the algo is kept: its id stays unique
        return seen[key][1]
    return rate


class Below(float):
    """A rate a file provably does not reach (it loses the choice of k; its simulation was cut short): "<r"."""

    def __format__(self, spec: str) -> str:
        return "<" + float.__format__(self, spec)


def _racing(file_rate: Callable[[Algo, int], float] | None, race: Callable | None,
            races: dict | None = None) -> Callable[[Algo, int], float] | None:
    """``file_rate`` for one choice of the fastest file (the choice of k): with ``race`` (``race(algo, size, best)``
    -> (rate, exact), :func:`forestcoll.simulate.msccl.file_rate`'s with a shared store), a file that provably loses
    against the fastest one rated so far at that size is not simulated to the end and gets a :class:`Below` rate,
    lower than that fastest one's: the same choice, fewer simulations.  ``races``: each outcome is kept there
    (``"calls"``: by file, size and best rate so far; ``"rated"``: the rate by file and size) and a call made
    before is answered from it: the same choice made again gets the same notes, whatever was simulated since."""
    if file_rate is None or race is None:
        return file_rate
    best: dict[int, float] = {}
    races = {} if races is None else races
    calls, rated = races.setdefault("calls", {}), races.setdefault("rated", {})

    def rate(algo: Algo, size: int) -> float:
        key = (id(algo), size, best.get(size))
        if key in calls:
            got, exact = calls[key][1:]
        elif size not in best:
            got, exact = file_rate(algo, size), True
        else:
            got, exact = race(algo, size, best[size])
        calls[key] = (algo, got, exact)  # the algo is kept: its id stays unique
        rated[(id(algo), size)] = got if exact else Below(got)
        if not exact:
            assert got < best[size]
            return Below(got)
        best[size] = max(best.get(size, got), got)
        return got
    return rate
