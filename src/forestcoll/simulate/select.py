"""The best schedule per range of call sizes, and one MSCCL file (or MSCCL++ plan) per range.

:func:`candidate_schedules` builds forestcoll's schedule at the optimal k, at
k = 1, 2, 4 and 8, at the largest power of two below the optimal k that the runtimes
can use at the sizes asked for (:func:`default_ks`; ``candidates="all"`` adds
every power of two up to 64), one height-limited schedule (shallower than all
of them), each of those packed again without the CPUs where its trees join GPUs of
one box through a CPU (:func:`off_cpu_candidates`), and the ring written as a schedule
(when it verifies); :func:`select_schedules`
simulates them at every size and keeps the best per size, where the runtimes
can use its file (the element count must split into nchunksperloop chunks),
merged into ranges with a 2% hysteresis (for MSCCL files only where the faster file costs the runtime more
than its record: :mod:`forestcoll.msccl.loaded`); :func:`export_by_size` writes each
range's schedule as a self-checked MSCCL file with its minBytes / maxBytes
(``forestcoll generate --sizes``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from forestcoll import collectives
from forestcoll.errors import ForestCollError, UsageError
from forestcoll.progress import Progress, report
from forestcoll.schedule import Schedule
from forestcoll.simulate import baselines
from forestcoll.simulate.compare import default_workers, run_jobs
from forestcoll.simulate.core import SimResult
from forestcoll.simulate.network import Network
from forestcoll.topology import Topology
from forestcoll.units import format_size

__all__ = ["ALL_KS", "CANDIDATE_SETS", "EVEN", "FINEST", "FREE_GAIN", "LATENCY", "OFF_CPUS", "SMALL_KS", "SOCKET", "SPLIT",
           "WEIGHTED",
           "ExportedRange", "Selection", "SizeExport", "SizeRange", "candidate_files", "candidate_schedules",
           "default_ks", "export_by_size", "height_candidate", "off_cpu_candidates", "packed", "select_schedules",
           "size_ranges", "smallest_sizes", "usable"]

ALL_KS = tuple(2**i for i in range(0, 7))  # ``--candidates all`` adds every power of two up to 64
# always offered below the optimal k: 1 and 2 pay the fewest latencies; 4 and 8 come within a few per cent of the
# bound in exact rate, and at large sizes how well a packing pipelines (at most 16 slices per piece) differs from one
# k to the next by more than that: on mi250:nodes=2 at 1 GiB the k = 8 allgather simulates at 0.907 of the bound,
# k = 2 at 0.879, the optimal k = 83 at 0.875 (benchmarks/pipelines.py); so they are simulated, not predicted
SMALL_KS = (1, 2, 4, 8)
CANDIDATE_SETS = ("default", "all")


@dataclass
class SizeRange:
    """The schedule chosen for calls of ``min_bytes`` to ``max_bytes`` bytes (0: no upper limit)."""

    min_bytes: int
    max_bytes: int
    name: str
    schedule: Schedule
    measured: dict[int, float]  # size -> algbw of the chosen schedule at the sizes inside the range


    def to_dict(self) -> dict[str, Any]:
        return {"min_bytes": self.min_bytes, "max_bytes": self.max_bytes, "name": self.name, "k": self.schedule.k,
                "measured_algbw_gbps": {str(s): v for s, v in sorted(self.measured.items())}}


@dataclass
class Selection:
    """The chosen schedule per size range and every candidate's simulated result; a result
    (:mod:`forestcoll.results`), ``ok`` when every size has a schedule."""

    ranges: list[SizeRange]
    table: list[SimResult]  # every candidate at every size

    @property
    def ok(self) -> bool:
        return bool(self.ranges)

    @property
    def message(self) -> str:
        return "; ".join(f"{r.min_bytes}..{r.max_bytes or 'any'} bytes: {r.name}" for r in self.ranges)

    def to_dict(self) -> dict[str, Any]:
        return {"ranges": [r.to_dict() for r in self.ranges], "table": [r.to_dict() for r in self.table]}


def candidate_schedules(topo: Topology, net: Network, collective: str, root: str | None = None,
                        ks: Sequence[int] | None = None, ring: bool = True, height: bool = True,
                        ring_name: str = "ring", sizes: Sequence[int] = (), element_bytes: int = 4,
                        candidates: str = "default", off_cpus: bool = True, inbox: bool = True,
                        shard_weights: Sequence[int] | None = None) -> dict[str, Schedule]:
    """forestcoll at the optimal k (``"forestcoll"``) and at each of ``ks`` below it (``"forestcoll-k<k>"``;
    default :func:`default_ks` for ``sizes`` in ``element_bytes``-byte elements, and with ``candidates="all"`` also
    every power of two up to 64); with ``height`` one height-limited schedule (``"forestcoll-h<H>"``,
    :func:`height_candidate`); with ``off_cpus`` each of those packed without the CPUs where it joins GPUs of one box
    through a CPU (``name + "-offcpu"``, :func:`off_cpu_candidates`); with ``inbox`` each of the optimal, fixed-k and
    height-limited ones packed again without turns through the network inside a box (``name + "-inbox"``,
    :func:`forestcoll.msccl.inbox.inbox_candidates`); with ``ring`` the ring as a schedule
    (``ring_name``, when it verifies).  ``shard_weights``: every forestcoll candidate has those shards (allreduce;
    the ring keeps equal shards; the packings without the CPUs keep them too)."""
    from forestcoll.generate import generate
    from forestcoll.verify import verify

    weighted = {} if shard_weights is None else {"shard_weights": tuple(shard_weights)}
    best = generate(topo, collective, root=root, **weighted)
    cands: dict[str, Schedule] = {"forestcoll": best}
    if ks is None:
        ks = default_ks(best.k, len(best.ranks), collective, sizes, element_bytes)
        ks = sorted(set(ks) | set(ALL_KS)) if candidates == "all" else ks
    for k in ks:
        if k < best.k:
            cands[f"forestcoll-k{k}"] = generate(topo, collective, k=k, root=root, **weighted)
    if height:
        found = height_candidate(topo, collective, list(cands.values()), root, **weighted)
        if found is not None:
            cands[f"forestcoll-h{found.max_height()}"] = found
    if off_cpus:
        cands.update(off_cpu_candidates(topo, cands, root))
    if inbox:
        from forestcoll.msccl.inbox import inbox_candidates

        cands.update(inbox_candidates(topo, cands, root))
    if ring:
        try:
            sched = baselines.ring_schedule(net, collective, root)
            if verify(sched, topo).ok:
                cands[ring_name] = sched
        except ForestCollError:
            pass
    return cands


OFF_CPUS = "-offcpu"  # the name suffix of a candidate packed again without the CPUs
WEIGHTED = "weighted-"  # the name prefix of a per-size candidate with shard weights (export_by_size)
SOCKET = "-socket"  # ... of the optimum packed again without the links between the CPUs (kept on one socket)


def off_cpu_candidates(topo: Topology, cands: Mapping[str, Schedule], root: str | None = None) -> dict[str, Schedule]:
    """``name + OFF_CPUS`` -> each forestcoll candidate of ``cands`` (the optimal k, a fixed k, a height limit) packed
    again on the topology without its CPUs, with the same k or height limit (and shard weights), where its trees join GPUs of one box
    that have a direct link through a CPU (a runtime sends those edges over the direct link) and the packing loses
    nothing in exact rate (:func:`forestcoll.msccl.detours.optimum_on` on ``without_cpus`` for the optimal k,
    :func:`~forestcoll.msccl.detours.off_cpu_packing` for the others); and ``"forestcoll" + SOCKET`` -> the optimum
    packed again without the links between the CPUs (``optimum_on`` on ``without_cpu_links``, the single
    file's other packing).  Empty on fabrics without such detours."""
    from forestcoll.msccl.detours import off_cpu_packing, optimum_on, without_cpu_links, without_cpus

    out: dict[str, Schedule] = {}
    for name, sched in cands.items():
        same = {} if sched.shard_weights is None else {"shard_weights": sched.shard_weights}  # (optimum_on: its own)
        if name == "forestcoll":
            found = optimum_on(topo, sched, without_cpus, root=root)
        elif name.startswith("forestcoll-k"):
            found = off_cpu_packing(topo, sched, k=sched.k, root=root, **same)
        elif name.startswith("forestcoll-h"):
            found = off_cpu_packing(topo, sched, root=root, max_height=sched.max_height(), **same)
        else:
            continue
        if found is not None:
            out[name + OFF_CPUS] = found
        if name == "forestcoll" and (kept := optimum_on(topo, sched, without_cpu_links, root=root)) is not None:
            out[name + SOCKET] = kept
    return out


def packed(name: str) -> bool:
    """Whether candidate (or file) ``name`` is a packing without the CPUs or kept on one socket
    (:func:`off_cpu_candidates`)."""
    return OFF_CPUS in name or SOCKET in name


def default_ks(k_opt: int, ranks: int, collective: str, sizes: Sequence[int] = (), element_bytes: int = 4) -> list[int]:
    """The ks below ``k_opt`` worth simulating beside it: :data:`SMALL_KS` (1 and 2: few, large pieces, the fewest
    latencies; 4 and 8: within a few per cent of the bound, and at large sizes their trees may pipeline better than the
    optimal k's), and at
    each of ``sizes`` where the optimal k's file is not usable (:func:`usable`) the largest power of two below
    ``k_opt`` that is (no ``sizes``: the largest power of two below ``k_opt``).  The ks from 16 up to that one
    neither pay fewer latencies nor come closer to the bound than the largest one, and on big fabrics they cost
    the most to simulate (``ALL_KS`` offers them all)."""
    chunks = collectives.get(collective).chunks_per_loop

    def fits(k: int, size: int) -> bool:
        return size % element_bytes == 0 and (size // element_bytes) % chunks(ranks, k) == 0

    below = [2**i for i in range(k_opt.bit_length()) if 2**i < k_opt]
    out = set(SMALL_KS)
    if not sizes:
        out.update(below[-1:])
    for size in sizes:
        if not fits(k_opt, size):
            out.update(next(([k] for k in reversed(below) if fits(k, size)), []))
    return sorted(k for k in out if k < k_opt)


def height_candidate(topo: Topology, collective: str, others: Sequence[Schedule],
                     root: str | None = None, shard_weights: Sequence[int] | None = None) -> Schedule | None:
    """One schedule shallower than every one of ``others``: ``generate --max-height H`` at H = their lowest
    height - 1 (one search, a few seconds to half a minute on 32 ranks; shallower trees pay fewer hop latencies
    per piece, which wins at small sizes).  None when no such tree exists or the search finds none."""
    from forestcoll.generate import generate

    target = min(s.max_height() for s in others) - 1
    if target < 1:
        return None
    try:
        return generate(topo, collective, root=root, max_height=target, shard_weights=shard_weights)
    except ForestCollError:
        return None


def usable(sched: Schedule, size: int, element_bytes: int = 4, nchunks: int | None = None) -> bool:
    """Whether the runtimes would use ``sched``'s MSCCL file for a call of ``size`` bytes: the element count
    must split into nchunksperloop chunks (N*k for allgather / reduce-scatter / allreduce, k*sum(w) with shard
    weights, k otherwise; ``nchunks``: the file's own, when it splits its chunks)."""
    from forestcoll.pieces import schedule_shards

    nchunks = nchunks or collectives.get(sched.collective).chunks_per_loop(schedule_shards(sched), sched.k)
    return size % element_bytes == 0 and (size // element_bytes) % nchunks == 0


def select_schedules(topo: Topology, net: Network, collective: str, sizes: Sequence[int],
                     candidates: dict[str, Schedule], *, fairness: str = "max-min", workers: int = 1,
                     margin: float = 0.02, runtime_sizes: bool = True, element_bytes: int = 4,
                     progress: Progress | None = None, exhaustive: bool = False,
                     files: Mapping[str, Any] | None = None, smallest: Mapping[str, int] | None = None) -> Selection:
    """The candidate with the highest simulated algbw at each size, merged into size ranges.

    With ``runtime_sizes`` a candidate competes at a size only if the runtimes can use its file there
    (:func:`usable`, ``element_bytes``-byte elements; 16 for MSCCL++, whose chunks are whole 16-byte units).  The previous size's winner is kept while it is within ``margin``
    of the best, so near-ties do not split the ranges.  A candidate whose lower bound on the time is above the
    best time found divided by ``1 - margin`` is not simulated (:func:`forestcoll.simulate.race.race`: the same
    ranges as simulating all, which ``exhaustive`` does; ``table`` then lacks the rows skipped).
    With ``files`` (name -> MSCCL :class:`~forestcoll.msccl.ir.Algo` of that candidate) the candidates that have a
    file compete by their *files'* simulated rate (:func:`forestcoll.simulate.msccl.simulate_msccl`: what a user of
    the file gets), not by their trees'; ``measured`` and ``table`` then hold the files' rates, and the margin
    holds only where a faster file costs the runtime more than its record (:func:`size_ranges`' ``free``).
    ``smallest`` (name -> bytes): a candidate named there competes only at sizes from that one up.
    ``progress`` gets ``("simulating candidates", done, total)`` per candidate and size."""
    from forestcoll.simulate.race import STAGE, race_sizes, tree_lowering

    if files is not None:
        candidates = {name: sched for name, sched in candidates.items() if name in files}
    nchunks = {name: files[name].nchunksperloop for name in candidates} if files is not None else {}
    competing = {size: {name: sched for name, sched in candidates.items()
                        if (not runtime_sizes or usable(sched, size, element_bytes, nchunks.get(name)))
                        and size >= (smallest or {}).get(name, 0)}
                 for size in sizes}
    if exhaustive and files is not None:
        from forestcoll.simulate.msccl import simulate_msccl

        table = []
        for size in sizes:
            for name in competing[size]:
                res = simulate_msccl(files[name], net, size, fairness=fairness, source=name)
                res.algorithm = name
                table.append(res)
    elif exhaustive:
        jobs = [(sched, collective, size, {"fairness": fairness, "name": name})
                for size in sizes for name, sched in competing[size].items()]
        table = run_jobs(net, jobs, workers, progress, STAGE)
    else:
        lowering = tree_lowering
        if files is not None:
            from forestcoll.simulate.msccl import msccl_lowering

            lowering = msccl_lowering
            competing = {size: {name: files[name] for name in named} for size, named in competing.items()}
        raced = race_sizes(net, list(sizes), competing, slack=margin, workers=workers, progress=progress,
                           fairness=fairness, lowering=lowering)
        from forestcoll.simulate.plan_sizes import refused_everywhere

        for size in sizes:
            refused_everywhere(raced[size], size, "file" if files is not None else "schedule")
        table = [r for size in sizes for r in raced[size].results]
    free = None
    if files is not None:  # a file that costs the runtime only its record is not held back by the margin
        from forestcoll.msccl.loaded import free_switches

        free = free_switches(files)
    return Selection(size_ranges(table, sizes, candidates, margin, free), table)


# a switch that costs only a file's record must gain more than this: the model's rates move by up to 7e-5 of a call's
# time when every capacity moves by 1e-15 (docs/simulate.md), and reports show 0.1 GB/s (mi250:nodes=2 allreduce at
# 1 GiB: the plain height-7 file beats the split one by less than 0.05 GB/s of 154.3)
FREE_GAIN = 0.001


def size_ranges(table: Sequence[SimResult], sizes: Sequence[int], candidates: Mapping[str, Schedule],
                margin: float = 0.02, free: Callable[[str, Collection[str], str], bool] | None = None,
                gain: float = FREE_GAIN) -> list[SizeRange]:
    """The fastest row of ``table`` (its ``algorithm`` names a candidate) at each size, the previous size's winner
    kept while within ``margin`` of it, merged into size ranges; ties go to the candidate listed first.  With
    ``free(name, chosen, replaced)`` (MSCCL files: :func:`forestcoll.msccl.loaded.free_switches`) the margin holds
    only where switching costs something: each size then goes to the fastest row more than ``gain`` faster than its
    winner whose file costs nothing beside the files so ``chosen`` in place of the winner's (the ranges'
    connections and scratch stay those of the choice by the margin; only more files' records)."""
    order = {name: i for i, name in enumerate(candidates)}
    winners: list[tuple[int, str]] = []
    for size in sorted(sizes):
        rows = [r for r in table if r.size_bytes == size]
        if not rows:
            raise UsageError(f"no candidate schedule can run a {format_size(size)} call (its chunking does not divide it)")
        best = max(rows, key=lambda r: (r.algbw_gbps, -order[r.algorithm]))
        if winners:
            prev = next((r for r in rows if r.algorithm == winners[-1][1]), None)
            if prev is not None and prev.algbw_gbps >= best.algbw_gbps * (1 - margin):
                best = prev
        winners.append((size, best.algorithm))
    if free is not None:
        chosen = list(dict.fromkeys(name for _, name in winners))
        for i, (size, name) in enumerate(winners):
            rate = next(r.algbw_gbps for r in table if r.size_bytes == size and r.algorithm == name)
            faster = sorted((r for r in table if r.size_bytes == size and r.algbw_gbps > rate * (1 + gain)),
                            key=lambda r: (-r.algbw_gbps, order[r.algorithm]))
            winners[i] = (size, next((r.algorithm for r in faster if free(r.algorithm, chosen, name)), name))
    ranges: list[SizeRange] = []
    for i, (size, name) in enumerate(winners):
        algbw = next(r.algbw_gbps for r in table if r.size_bytes == size and r.algorithm == name)
        if ranges and ranges[-1].name == name:
            ranges[-1].measured[size] = algbw
            continue
        if ranges:
            ranges[-1].max_bytes = size - 1
        ranges.append(SizeRange(0 if i == 0 else size, 0, name, candidates[name], {size: algbw}))
    return ranges


def _next_fitting_powers(cands: dict[str, Schedule], fitted: dict[str, Schedule], notes: list[str], topo: Topology,
                         collective: str, root: str | None, options, cuts=None) -> dict[str, Schedule]:
    """``fitted`` (the MSCCL++-fitting ``cands``) where each power-of-two k > 2 left out gives way to the next power
    of two down that fits the executor (the default candidates offer one large k; ``--candidates all`` offers all),
    with the left-out one's shards (a :data:`WEIGHTED` name keeps its prefix)."""
    from forestcoll.generate import generate
    from forestcoll.simulate.plan_sizes import fitting_candidates

    out: dict[str, Schedule] = {}
    for name, sched in cands.items():
        if name in fitted:
            out[name] = sched
            continue
        base = name.removeprefix(WEIGHTED)
        head = name[:len(name) - len(base)]
        same = {} if sched.shard_weights is None else {"shard_weights": sched.shard_weights}
        k = sched.k // 2 if base.startswith("forestcoll-k") and not name.endswith((OFF_CPUS, "-inbox")) else 0
        while k > 2 and f"{head}forestcoll-k{k}" not in cands:
            try:
                more, why = fitting_candidates({f"{head}forestcoll-k{k}": generate(topo, collective, k=k, root=root,
                                                                                   **same)},
                                               topo, options, cuts)
            except UsageError as exc:  # it does not fit either
                notes.append(str(exc).split(": ", 1)[-1])
                k //= 2
                continue
            out.update(more)
            notes.extend(why)
            break
    return out


def _on_driven_ports(net: Network, collective: str, root: str | None,
                     latency_us: Mapping[str, float] | None) -> tuple[Network, list[str]]:
    """``net`` on the network ports the MSCCL++ executor drives (:func:`forestcoll.mscclpp.ports.executor_ports`,
    one per GPU) and the note saying so with both bounds; ``net`` itself and no note when no port is dropped."""
    from forestcoll.bound.optimal import optimal_bound
    from forestcoll.mscclpp.ports import executor_ports
    from forestcoll.simulate.network import build_network

    ports = executor_ports(net.topology)
    if not ports.dropped:
        return net, []
    full = optimal_bound(net.topology, collective, root).algbw
    driven = optimal_bound(ports.topology, collective, root).algbw
    return build_network(ports.topology, latency_us), [ports.note(collective, full, driven)]


def _shard_candidates(topo: Topology, net: Network, collective: str, root: str | None, sizes: Sequence[int],
                      element_bytes: int, candidates: str, shard_weights: Sequence[int] | None, equal_shards: bool,
                      notes: list[str]) -> dict[str, Schedule]:
    """:func:`export_by_size`'s candidates: the equal-shard ones (unless ``shard_weights`` and not ``equal_shards``),
    then with ``shard_weights`` the forestcoll ones again with those shards, named :data:`WEIGHTED` + name, and a
    note in ``notes`` naming both shards' bounds."""
    common = {"sizes": sizes, "element_bytes": element_bytes, "candidates": candidates}
    if shard_weights is None:
        return candidate_schedules(topo, net, collective, root, **common)
    cands = candidate_schedules(topo, net, collective, root, **common) if equal_shards else {}
    weights = tuple(shard_weights)
    more = candidate_schedules(topo, net, collective, root, ring=not equal_shards, shard_weights=weights, **common)
    cands.update({name if name == "ring" else WEIGHTED + name: sched for name, sched in more.items()})
    from forestcoll.rational import format_rational

    bound = more["forestcoll"].bound_algbw
    equal = f", the others equal shards (bound {format_rational(cands['forestcoll'].bound_algbw)} GB/s)" if equal_shards else ""
    notes.append(f"shards: the {WEIGHTED}* candidates have weighted shards (rank i owns k x w_i of the k x {sum(weights)} "
                 f"chunks, w {min(weights)}..{max(weights)}; bound {format_rational(bound)} GB/s){equal}; the fastest "
                 "at each size is taken")
    return cands


@dataclass
class ExportedRange:
    """One size range of :func:`export_by_size`: the file written and its export figures, or why it could not be."""

    range: SizeRange
    path: str | None
    result: Any = None  # forestcoll.msccl.export.ExportResult
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.range.to_dict(), "output": self.path, "error": self.error,
                "export": self.result.to_dict() if self.result is not None else None}


@dataclass
class SizeExport:
    """What ``generate --sizes`` did: the candidates, the selection and one MSCCL file per range.
    A result (:mod:`forestcoll.results`): ``ok`` when every range was written."""

    topology: str
    ranks: int
    collective: str
    candidates: list[str]
    selection: Selection
    ranges: list[ExportedRange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # candidates left out (e.g. over a runtime's limits) and why
    shard_weights: tuple[int, ...] | None = None  # the weighted candidates' shards (allreduce), None: equal only

    @property
    def ok(self) -> bool:
        return bool(self.ranges) and all(r.path is not None for r in self.ranges)

    @property
    def message(self) -> str:
        written = [r for r in self.ranges if r.path is not None]
        bad = next((r for r in self.ranges if r.path is None), None)
        return (f"{len(written)} of {len(self.ranges)} size ranges written"
                + (f"; {bad.range.name} cannot be exported ({bad.error})" if bad else ""))

    def to_dict(self) -> dict[str, Any]:
        return {"topology": self.topology, "ranks": self.ranks, "collective": self.collective,
                "candidates": self.candidates, "ranges": [r.to_dict() for r in self.ranges],
                **({} if self.shard_weights is None else {"shard_weights": list(self.shard_weights)})}


LATENCY = "-latency"  # the name suffix of a candidate's file in the latency step order


SPLIT = "-s"  # the name suffix of a candidate's file whose chunks are split (``-s4``: 4 MSCCL chunks per chunk)
NARROW = "-c"  # ... of its file on fewer channels (``-c2``: two channels per instance)
narrowed = re.compile(rf"{NARROW}\d+({LATENCY})?$").search  # a file on fewer channels (also for 1 GiB: competes from 256 MiB up)
FINEST = "-finest"  # ... of its even-pieces file with as many pieces per tree as fit (``-even8-finest``)
EVEN = "-even"  # ... of its file with even pieces per tree (``-even8``: 8 MSCCL chunks per chunk, every tree's range
#                 in as many pieces as the others')


def candidate_files(cands: Mapping[str, Schedule], options=None, progress: Progress | None = None, even: bool = True,
                    narrow: bool = True):
    """Each candidate's MSCCL file, exported once in ``options``' step order and, when that is the default progress
    order, once more in the latency order (``name + LATENCY``: steps ordered by physical links crossed, which wins
    at small sizes on fabrics whose network hops cost far more latency than in-box ones); and in each order the
    *split* files (:func:`forestcoll.msccl.generated.split_files`: ``name-s<s>``, every chunk cut into s MSCCL chunks moved one per step,
    which pipeline a tree through its own steps at the mid sizes where the runtime gives each MSCCL chunk a single
    loop iteration); and (with ``even``) in the progress order its *even-pieces* file when that differs
    (:func:`forestcoll.msccl.generated.even_files`: ``name-even<s>``, every tree's range in as many pieces as the
    others', which fills a large k's thin trees in enough pipeline units at 1 GiB; the latency order is for the small
    sizes, where pieces this fine only add steps); and (with ``narrow``, for an RCCL file) its plain and even-pieces files
    on fewer channels (:func:`forestcoll.msccl.generated.narrow_files`: ``name-c<c>``, ``name-even<s>-c<c>``, the
    latter in both step orders: ``name-even<s>-c<c>-latency``), and for a packing (:func:`packed`) the single RCCL
    file's other layouts (:func:`forestcoll.msccl.generated.rccl_layouts`: ``name-c<c>-latency``,
    ``name-even<s>-finest``).  Returns (name -> export result, name -> schedule of each file, notes on the candidates
    whose files do not fit)."""
    from forestcoll.msccl.export import ExportError, ExportOptions, export_msccl
    from forestcoll.msccl.generated import even_files, narrow_files, rccl_layouts, split_files

    base = options or ExportOptions()
    orders = [("", base)]
    if base.order == "progress":
        orders.append((LATENCY, replace(base, order="latency")))
    variants = [(name, sched, suffix, opts) for suffix, opts in orders for name, sched in cands.items()]
    files: dict[str, Any] = {}
    named: dict[str, Schedule] = {}
    notes: list[str] = []
    for i, (name, sched, suffix, opts) in enumerate(variants):
        report(progress, "exporting candidates", i, len(variants))
        try:
            first = export_msccl(sched, opts)
        except ExportError as exc:
            if not suffix:  # the same limits: said once
                notes.append(f"{name} left out: its MSCCL file {str(exc)[:1].lower()}{str(exc)[1:]}")
            continue
        files[name + suffix], named[name + suffix] = first, sched
        if base.split == 1 and base.max_cnt is None:
            finer = [(f"{name}{SPLIT}{s}{suffix}", r) for s, r in split_files(sched, opts, first)]
            evens = even_files(sched, opts, first) if even and not suffix else []
            finer += [(f"{name}{EVEN}{s}", r) for s, r in evens]
            if narrow and not suffix:  # fewer channels: for RCCL's 1 GiB, in the progress order (plain and even pieces)
                finer += [(f"{name}{NARROW}{c}", r) for c, r in narrow_files(sched, opts, first)]
                finer += [(f"{v}{NARROW}{c}{order}", r) for v, e in list(finer) if EVEN in v
                          for order, o in (("", opts), (LATENCY, replace(opts, order="latency")))
                          for c, r in narrow_files(sched, replace(o, per_tree=None), e)
                          if r.algo.nchunksperloop != first.algo.nchunksperloop]  # else the plain pieces again
                if packed(name):  # the single file's RCCL layouts for these packings that are not offered above
                    got = rccl_layouts(sched, opts, [("plain", 1, first)] + [("even pieces", s, r) for s, r in evens],
                                       ("narrow latency", "finest"))
                    finer += [(f"{name}{NARROW}{c}{LATENCY}", r) for _kind, c, r in got["narrow latency"]]
                    finer += [(f"{name}{EVEN}{s}{FINEST}", r) for _kind, s, r in got["finest"]]
            for variant, result in finer:
                files[variant], named[variant] = result, sched
    return files, named, notes




def smallest_sizes(names: Iterable[str]) -> dict[str, int]:
    """name -> the smallest size its file competes at, for the files of ``names`` that do not compete at every size:
    even pieces (cut for 1 GiB) and files on fewer channels from AUTO_MIN_BYTES up, except the packings' files on
    fewer channels (:func:`packed`), which compete at every size as the single file's do (MI300 x4 rail allreduce: the
    optimum kept on one socket, 2 channels, latency order, is the fastest file at 16 MiB too, 105.2 GB/s)."""
    from forestcoll.msccl.ordering import AUTO_MIN_BYTES

    return {name: AUTO_MIN_BYTES for name in names if EVEN in name or (narrowed(name) and not packed(name))}


def export_by_size(topology, collective: str, sizes: Sequence[int], outdir: str, *,
                   extra: Mapping[str, str] | None = None, root: str | None = None, options=None,
                   fairness: str = "max-min", check: bool = True, latency_us: Mapping[str, float] | None = None,
                   workers: int | None = None, progress: Progress | None = None,
                   format: str = "msccl", candidates: str = "default",
                   shard_weights: Sequence[int] | None = None, equal_shards: bool = True) -> SizeExport:
    """Select the best schedule per size range on ``topology`` and write one MSCCL file per range into
    ``outdir`` (``options``: :class:`~forestcoll.msccl.export.ExportOptions`, whose size range and name each
    file replaces), self-checked unless ``check`` is False.  ``format="mscclpp"`` writes MSCCL++ plans instead
    (:func:`forestcoll.simulate.plan_sizes.export_plans_by_size`: candidates that fit the executor, ranked by their
    plans (:func:`~forestcoll.simulate.plan_sizes.select_plans`), LL where it wins, each plan cut for its sizes; ``options`` a :class:`forestcoll.mscclpp.export.ExportOptions`).
    ``candidates``: ``"default"`` (:func:`default_ks` for ``sizes``) or ``"all"`` (also every power of two up to 64).
    ``shard_weights`` (allreduce): the forestcoll candidates built again with those shards (named
    :data:`WEIGHTED` + name: the optimum, the ks, the height limit, their packings without the CPUs) compete beside
    the equal-shard ones (without them when ``equal_shards`` is False: ``generate --shards box``), each file or plan
    with its own chunks per loop (:func:`usable`); TopologyError where no tree schedule has those shards.  A size that no
    candidate's chunks divide is chosen for at the nearest size below that they divide, with a note
    (:func:`forestcoll.simulate.fit_sizes.runnable_sizes`)."""
    from forestcoll.fileio import ensure_directory
    from forestcoll.msccl.export import ExportOptions, write_checked
    from forestcoll.simulate.fit_sizes import runnable_sizes
    from forestcoll.simulate.network import load_network

    if format not in ("msccl", "mscclpp"):
        raise UsageError(f"unknown format {format!r}; choose msccl or mscclpp")
    if candidates not in CANDIDATE_SETS:
        raise UsageError(f"unknown candidate set {candidates!r}; choose {' or '.join(CANDIDATE_SETS)}")
    ensure_directory(outdir)
    net = load_network(topology, extra, latency_us)
    topo = net.topology
    collective = collectives.canonical(collective)
    element_bytes = 16 if format == "mscclpp" else 4
    notes: list[str] = []
    if format == "mscclpp":  # the candidates are packed, and compete, on the network ports the executor drives
        net, notes = _on_driven_ports(net, collective, root, latency_us)
        topo = net.topology
    cands = _shard_candidates(topo, net, collective, root, sizes, element_bytes, candidates, shard_weights,
                              equal_shards, notes)
    if format == "mscclpp":
        from forestcoll.mscclpp.recut import Cuts
        from forestcoll.simulate.plan_sizes import export_plans_by_size, fitting_candidates, select_plans

        cuts = Cuts(topo)  # each candidate's plan exported once per protocol, recut for every size
        fitted, left_out = fitting_candidates(cands, topo, options, cuts)
        notes += left_out
        if candidates == "default":
            fitted = _next_fitting_powers(cands, fitted, notes, topo, collective, root, options, cuts)
        cands = fitted
        sizes, moved = runnable_sizes(sizes, cands, element_bytes)
        notes += moved
        sel, rates, how = select_plans(net, collective, sizes, cands, options, fairness=fairness,
                                       workers=workers or default_workers(), progress=progress, cuts=cuts)
        out = SizeExport(topo.name, topo.num_compute, collective, list(cands), sel, notes=notes + [how],
                         shard_weights=None if shard_weights is None else tuple(shard_weights))
        out.ranges = export_plans_by_size(net, sel, outdir, collective, options, check, fairness, rates, cuts,
                                          workers or default_workers())
        return out
    # every candidate's file once (in both step orders); the files, not the trees, compete (a file's layout decides
    # its rate too)
    sizes, moved = runnable_sizes(sizes, cands, element_bytes)  # before the files: a size too small is refused here
    notes += moved
    base = options or ExportOptions()
    t0, cpu0 = time.perf_counter(), time.process_time()
    from forestcoll.msccl.ordering import AUTO_MIN_BYTES

    # even pieces are cut for a design size of 1 GiB (the exporter makes them only for files used up to 256 MiB or
    # more): they compete from AUTO_MIN_BYTES up, and the split files serve the sizes below (docs/msccl.md); so do the
    # RCCL files on fewer channels (faster at 1 GiB, slower at 16 MiB)
    big = max(sizes) >= AUTO_MIN_BYTES
    files, named, left_out = candidate_files(cands, base, progress, even=big, narrow=big)
    notes += left_out
    if not files:
        raise UsageError(f"no candidate's MSCCL file fits {base.runtime}: {'; '.join(notes)}")
    t1, cpu1 = time.perf_counter(), time.process_time()
    smallest = smallest_sizes(files)
    sel = select_schedules(topo, net, collective, sizes, named, workers=workers or default_workers(), fairness=fairness,
                           element_bytes=element_bytes, progress=progress,
                           files={name: r.algo for name, r in files.items()}, smallest=smallest)
    runs = sum(usable(named[name], size, nchunks=files[name].algo.nchunksperloop) and size >= smallest.get(name, 0)
               for name in files for size in sizes)
    notes.append(f"ranked by the candidates' MSCCL files simulated at each size, not by their trees ({len(files)} files "
                 f"exported in {t1 - t0:.1f} s, {cpu1 - cpu0:.1f} s CPU; {len(sel.table)} of {runs} file simulations "
                 f"run in {time.perf_counter() - t1:.1f} s, the others skipped by their lower bounds)")
    out = SizeExport(topo.name, topo.num_compute, collective, list(cands), sel, notes=notes,
                     shard_weights=None if shard_weights is None else tuple(shard_weights))
    for i, rng in enumerate(sel.ranges):
        exported = files[rng.name]
        algo = replace(exported.algo, min_bytes=rng.min_bytes, max_bytes=rng.max_bytes,
                       name=f"{rng.name}_{collective}_{i}".replace("-", "_"))
        upper = f"{rng.max_bytes}" if rng.max_bytes else "any"
        path = os.path.join(outdir, f"{collective}-{i:02d}-{rng.name}-{rng.min_bytes}-{upper}.xml")
        result = write_checked(replace(exported, algo=algo, notes=list(exported.notes), checks=[]), path, check, None)
        out.ranges.append(ExportedRange(rng, path, result))
    return out

