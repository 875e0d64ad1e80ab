"""Lower a tree schedule to an MSCCL++ execution plan: schedule -> actions (:mod:`.lower`) -> thread blocks and
operations (:mod:`.emit`; LL: :mod:`.export_ll`) -> :class:`Plan`, checked by lint and the interpreter.

Chunks.  Every root's shard is ``k`` chunks; root r's chunk j is plan chunk
``r*k + j`` of a buffer that holds every shard (allgather output, reduce-scatter
input, allreduce) and chunk ``j`` of one that holds only the rank's own
(allgather input, reduce-scatter output); broadcast and reduce use chunks
``0..k-1`` of the whole buffer.  :func:`forestcoll.pieces.cut_pieces` cuts each
root's chunks into pieces that lie in one tree of every phase.  An allreduce
with shard weights (:attr:`forestcoll.schedule.Schedule.shard_weights`) has
k*D plan chunks (D the sum of the weights), root r's k*w_r from
k*(w_0 + ... + w_{r-1}) (:mod:`forestcoll.shard_pieces`); other collectives with
weights are refused (an executor call gives every rank size/N).

Pipelines.  At ``design_size`` every piece moves in the slices the trees
simulator cuts it in (:func:`forestcoll.pieces.piece_rule`: NCCL's tree rule for
the height of the piece's trees, 512 KiB chunks halved for small pieces on deep
trees, the ring or step rule for chains; no cap unless ``max_slices``; the finest
of the pieces of one size), never more than 65,535 iterations at the largest
size (the kernel's 16-bit count).

Limits.  The layout (blocks per tree edge; where that exceeds ``max_threadblocks``
on a GPU, per source GPUs or per tree level for the groups of actions that move
the fewest chunks per block saved) keeps the thread blocks per GPU within
``max_threadblocks`` (every block of the executor's kernel must be resident,
since blocks wait on each other); a schedule that fits no layout, or needs more
than 64 operations or 16 channels in a block, is refused with one line naming
the limit and the way out.

The LL protocol (packets; for small sizes) uses the same trees without
signals: puts are ``ppkt`` / ``rppkt`` into scratch slots, partial sums travel
as packets, arrivals are unpacked; the packets' flags order everything.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forestcoll import collectives
from forestcoll.errors import ScheduleError, UsageError
from forestcoll.mscclpp.emit import ALIGN, Emitter, group
from forestcoll.mscclpp.fallback import fitting_powers, fitting_schedule
from forestcoll.mscclpp.floor import floors, lanes_of, lowering_for
from forestcoll.mscclpp.lower import Act, Lowering, Ref
from forestcoll.mscclpp.plan import Plan, PlanStats, plan_stats
from forestcoll.mscclpp.semantics import MAX_CHANNEL, MAX_OPERATION, U32
from forestcoll.mscclpp.share import OUT_ROLES, block_info, share_blocks
from forestcoll.pieces import Piece
from forestcoll.progress import Progress
from forestcoll.schedule import Schedule, schedule_topology
from forestcoll.topology import Topology

if TYPE_CHECKING:
    from forestcoll.fileio import Output

__all__ = ["LAYOUTS", "ExportError", "ExportOptions", "ExportResult", "chunk_bytes", "export_mscclpp", "self_check",
           "fitting_powers", "fitting_schedule", "write_generated_plan", "write_mscclpp"]

DEFAULT_MAX_MESSAGE = U32 - 1  # the executor's offsets are 32-bit
DEFAULT_LL_MAX_MESSAGE = 1 << 20
LAYOUTS = ("auto", "edge", "shared", "mixed", "source", "level")
GRAINS = ("edge", "source", "level")  # a block per tree edge and piece / per sending GPUs / per tree level and peer
_BUG = "the exported plan fails its self-check (a forestcoll bug; please report it with the schedule)"


class ExportError(ScheduleError):
    """The schedule cannot become a plan within the executor's limits (the message says which and what to do)."""


@dataclass(frozen=True)
class ExportOptions:
    """Knobs of :func:`export_mscclpp`."""

    protocol: str = "Simple"  # or "LL" (packets, for small messages)
    inplace: bool = True  # the plan serves in-place calls (False: out-of-place)
    min_message_size: int = 0
    max_message_size: int | None = None  # default: 4 GiB - 1 (Simple), 1 MiB (LL)
    design_size: int | None = None  # message size the pipelines are cut for (default: min(max_message_size, 1 GiB))
    slice_bytes: int = 1 << 20  # the runtimes' ring slice the slicing rules scale with (pieces.slices_for) ...
    max_slices: int | None = None  # ... and at most this many slices per piece (None: no cap, as the simulator)
    unit_bytes: int | None = None  # bytes of every chunk moved per iteration (overrides the above)
    name: str | None = None
    check: bool = True  # lint + interpret before returning (self_check)
    check_launches: int = 2  # back-to-back calls interpreted by the self-check
    # thread blocks: "edge" one per tree edge and piece; "source" one per (level, peer, piece size, GPUs the data
    # comes from); "level" one per (level, peer, piece size); "mixed" per GPU and tree level the finest of these that
    # keeps within max_threadblocks (_mixed_layout); "shared" (allreduce): mixed, counting a GPU's in-tree and out-tree
    # blocks apart, then pairs of them share a thread block (mscclpp/share.py); "auto": edge if it fits, else shared
    # (allreduce), else mixed (else level, for the error)
    layout: str = "auto"
    lanes: int | None = None  # every piece cut in this many, each moved on its own (default 1; LL: 4, which pipelines)
    max_threadblocks: int = 104  # blocks a GPU runs at once (MI250 GCD: 104 CUs; A100: 108 SMs; H100: 132)
    # pieces of several chunks move in half the tree rule's unit (one-chunk pieces keep theirs): a lowering choice
    # write_generated_plan's fallback takes when its plan simulates faster (finer lockstep pipelines)
    fine_units: bool = False

    def resolved_max(self) -> int:
        if self.max_message_size is not None:
            return self.max_message_size
        return DEFAULT_LL_MAX_MESSAGE if self.protocol == "LL" else DEFAULT_MAX_MESSAGE

    def validate(self) -> None:
        if self.protocol not in ("Simple", "LL"):
            raise UsageError(f"unknown protocol {self.protocol!r}; choose Simple or LL")
        hi = self.resolved_max()
        if self.min_message_size < 0 or hi < self.min_message_size:
            raise UsageError(f"bad size range {self.min_message_size}..{hi}")
        if hi >= U32:
            raise UsageError(f"max_message_size {hi}: the executor's offsets are 32-bit; stay below 4 GiB")
        if (self.max_slices is not None and self.max_slices < 1) or self.slice_bytes < 1:
            raise UsageError("max_slices and slice_bytes must be >= 1")
        if self.unit_bytes is not None and (self.unit_bytes < ALIGN or self.unit_bytes % ALIGN):
            raise UsageError(f"unit_bytes must be a positive multiple of {ALIGN}, got {self.unit_bytes}")
        if self.check_launches < 1:
            raise UsageError("check_launches must be >= 1")
        if self.lanes is not None and self.lanes < 1:
            raise UsageError(f"lanes must be >= 1, got {self.lanes}")
        if self.layout not in LAYOUTS:
            raise UsageError(f"unknown layout {self.layout!r}; choose {', '.join(LAYOUTS)}")


@dataclass
class ExportResult:
    """The plan, the figures a user checks against the executor's limits, and the self-check's verdicts."""

    plan: Plan
    stats: PlanStats
    chunks_per_root: int
    units: dict[int, int]  # pipeline unit (bytes per iteration) of the blocks moving pieces of each chunk count
    seconds: float
    layout: str = ""
    checks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    output: str | None = None  # the file written (write_mscclpp)
    inbox_port_edges: int = 0  # tree edges between GPUs of one box whose path leaves the box: port channels
    pieces: list[Piece] = field(default_factory=list, repr=False)  # the lowering's, which the units are cut for

    @property
    def ok(self) -> bool:
        return True  # an export that fails raises ExportError

    @property
    def message(self) -> str:
        s = self.stats
        checked = "; self-checked: lint clean, interpreter OK" if self.checks else "; not self-checked"
        return (f"{self.plan.name}: {self.plan.collective} on {s.gpus} GPUs, {self.plan.protocol}, "
                f"{'in-place' if self.plan.inplace else 'out-of-place'}; {s.threadblocks_per_gpu} thread blocks/GPU, "
                f"<= {s.ops_per_threadblock} ops/thread block, {s.memory_channels} memory + {s.port_channels} port "
                f"channels/GPU{checked}")

    def to_dict(self) -> dict[str, Any]:
        s = self.stats
        return {"ok": self.ok, "message": self.message, "name": self.plan.name, "collective": self.plan.collective,
                "protocol": self.plan.protocol, "inplace": self.plan.inplace, "gpus": s.gpus,
                "threadblocks_per_gpu": s.threadblocks_per_gpu, "ops_per_threadblock": s.ops_per_threadblock,
                "memory_channels": s.memory_channels, "port_channels": s.port_channels,
                "scratch_chunks": s.scratch_chunks, "chunks_per_root": self.chunks_per_root,
                "layout": self.layout, "pipeline_units": {str(c): u for c, u in sorted(self.units.items())},
                "min_message_size": self.plan.setting("min_message_size"),
                "max_message_size": self.plan.setting("max_message_size"), "seconds": round(self.seconds, 4),
                "inbox_port_edges": self.inbox_port_edges, "checks": self.checks, "notes": self.notes,
                "output": self.output}


# ----- the export ---------------------------------------------------------------------------------------


def chunk_bytes(collective: str, size: int, n: int, k: int) -> float:
    """Bytes of one plan chunk in a call of ``size`` bytes (the executor's size: allgather's output, others' input)."""
    return size / collectives.get(collective).chunks_per_loop(n, k)


def export_mscclpp(sched: Schedule, topology: Topology | str | None = None, options: ExportOptions | None = None,
                   *, progress: Progress | None = None, lowering: Lowering | None = None,
                   **kwargs: Any) -> ExportResult:
    """The MSCCL++ execution plan of ``sched`` on ``topology`` (default: the one the schedule names), see the
    module docstring; raises :class:`ExportError` with a one-line message when it cannot fit the executor's
    limits.  With ``check`` (default) the plan is linted and interpreted (its declared mode, ``check_launches``
    calls back to back, race detection) first; ``progress`` (:mod:`forestcoll.progress`) hears that check.
    ``lowering``: :func:`~forestcoll.mscclpp.floor.lowering_for` of the same schedule, topology and options (its
    actions built, e.g. by :func:`~forestcoll.mscclpp.floor.fits_nowhere`, or not), which the export takes over
    instead of lowering the schedule again; ValueError for another's or one an export already took."""
    t0 = time.perf_counter()
    opts = options or ExportOptions(**kwargs)
    opts.validate()
    coll = collectives.get(sched.collective)
    if coll.mscclpp is None:
        raise ExportError(f"{coll.name} has no MSCCL++ execution plan form; export it as MSCCL XML (--format msccl)")
    n = len(sched.ranks)
    if n < 2:
        raise ExportError("a plan needs at least 2 ranks")
    topo = topology if isinstance(topology, Topology) else schedule_topology(sched, topology)
    low = _taken(lowering, sched, topo, opts)
    lanes = low.lanes
    hi = opts.resolved_max()
    design = opts.design_size or min(hi, 1 << 30)
    k = low.k
    units = _tree_units(sched.collective, low.shares, k, lanes, low.pieces, design, hi, opts)
    name = plan_name(sched, opts)
    if opts.protocol == "LL":
        from forestcoll.mscclpp.export_ll import lower_ll

        if coll.rooted:
            raise ExportError(f"LL plans are made for allgather, reducescatter and allreduce; in a {coll.name} a GPU "
                              "that waits for no one can run two calls ahead and overwrite packets a peer has not read "
                              "yet (the interpreter shows it with 3 back-to-back calls): use protocol Simple")
        plan = lower_ll(low, name, opts.inplace, opts.min_message_size, hi)
        units = {}
        layout = "ll"
    else:
        tried = []
        if opts.layout == "shared" and coll.name != "allreduce":  # in-tree and out-tree blocks share thread blocks
            raise UsageError(f"layout 'shared' pairs an allreduce's reduce-scatter and allgather blocks; {coll.name} "
                             "has only one of them: use auto, edge, mixed, source or level")
        order = layouts_tried(coll.name, opts.layout)
        # a layout whose floor exceeds the limit cannot fit: emitted only if the error must name its count
        floor = floors(low.build(), order) if len(order) > 1 else {}
        skipped = [x for x in order if floor.get(x, 0) > opts.max_threadblocks]
        fresh: Lowering | None = low  # its actions (built for the floors, or not yet) serve the first layout emitted
        for layout in (*(x for x in order if x not in skipped), *sorted(skipped, key=lambda x: floor[x])):
            if layout in skipped and tried and floor[layout] > min(tried)[0]:
                continue  # it cannot fit, and cannot have the fewest blocks of a failed export either
            low, fresh = fresh or lowering_for(sched, topo, opts), None
            acts = low.build()
            for a in acts:
                if a.reduce_srcs:
                    a.input_ref = _input_ref(low, a)
                if layout in ("edge", "source"):
                    a.key = _grain_key(a, GRAINS.index(layout))
            if layout in ("mixed", "shared"):
                plan = _mixed_layout(low, acts, units, name, opts, hi, share=layout == "shared")
            else:
                plan = _layout_and_emit(low, acts, units, name, opts, hi)
            tbs = max(len(g.threadblocks) for g in plan.gpus)
            tried.append((tbs, layout))
            if tbs <= opts.max_threadblocks:
                break
        else:
            tried.sort(key=lambda x: order.index(x[1]))
            tbs, layout = min(reversed(tried), key=lambda x: x[0])  # the coarsest of the fewest
            raise ExportError(
                f"{coll.name} k={sched.k} needs {tbs} thread blocks per GPU even at the '{layout}' layout, more than the "
                f"{opts.max_threadblocks} a GPU runs at once (--max-threadblocks: its SMs or CUs; every block of the "
                "executor's kernel must be resident, as they wait on each other): "
                + ("generate with a smaller k (fewer trees; a power of two such as --k 4 also lets the executor take "
                   "power-of-two sizes)" if sched.k > 1 else
                   "no smaller k exists; raise --max-threadblocks only if the GPU runs that many blocks at once"))
    stats = plan_stats(plan)
    result = ExportResult(plan, stats, k, units, 0.0, layout=layout,
                          inbox_port_edges=sum(1 for edges in low.ports.values() for u, v in edges
                                               if low.boxes[u] == low.boxes[v]), pieces=low.pieces)
    if result.inbox_port_edges:
        result.notes.append(f"{result.inbox_port_edges} tree edge(s) join two GPUs of one box through the network: "
                            "they take port channels, which the executor (1f5f065) carries over CUDA IPC inside a "
                            "host, not the NIC (docs/mscclpp.md)")
    step = coll.chunks_per_loop(low.shares, k)
    if step & (step - 1):
        result.notes.append(f"the executor takes calls whose size is a multiple of {step * ALIGN} bytes ({step} chunks "
                            f"of whole {ALIGN}-byte units); power-of-two sizes are not: a power-of-two k avoids this")
    ranks = set(sched.ranks)
    if all(node.box is None for node in topo.nodes if node.name in ranks):
        result.notes.append("the topology records no boxes: every GPU is taken to share one host (memory channels "
                            "only); give its nodes a box if it spans hosts")
    if opts.check:
        # packets are double-buffered: a GPU two calls ahead reuses a slot, so LL plans are checked over 3 calls
        result.checks = self_check(plan, launches=max(opts.check_launches, 3 if plan.packet else 1), progress=progress)
    result.seconds = time.perf_counter() - t0
    return result


def plan_name(sched: Schedule, opts: ExportOptions) -> str:
    """The name :func:`export_mscclpp` gives the plan of ``sched`` with ``opts`` (``opts.name``, made safe)."""
    coll = collectives.get(sched.collective)
    name = opts.name or f"forestcoll_{coll.mscclpp}_n{len(sched.ranks)}_k{sched.k}" + ("_ll" if opts.protocol == "LL" else "")
    return re.sub(r"[^A-Za-z0-9_.:-]", "_", name)[:200]


def _taken(low: Lowering | None, sched: Schedule, topo: Topology, opts: ExportOptions) -> Lowering:
    """``low`` (export_mscclpp's ``lowering``), now taken, when it lowers ``sched`` on ``topo`` as the export with
    ``opts`` would (:func:`~forestcoll.mscclpp.floor.lowering_for`); a new lowering when None; ValueError otherwise
    (an export re-keys the actions it takes)."""
    if low is None:
        return lowering_for(sched, topo, opts)
    if (low.taken or low.sched is not sched or low.topology is not topo or low.outofplace == opts.inplace
            or low.lanes != lanes_of(opts)):
        raise ValueError("export_mscclpp(lowering=...): not a fresh lowering of this schedule, topology and options")
    low.taken = True
    return low


def layouts_tried(coll: str, layout: str) -> tuple[str, ...]:
    """The layouts :func:`export_mscclpp` tries, in order, for collective ``coll`` and the ``layout`` option."""
    if layout != "auto":
        return (layout,)
    return ("edge", "shared", "mixed", "level") if coll == "allreduce" else ("edge", "mixed", "level")


def write_mscclpp(sched: Schedule, path: Output, topology: Topology | str | None = None,
                  options: ExportOptions | None = None, *, progress: Progress | None = None, **kwargs: Any) -> ExportResult:
    """:func:`export_mscclpp` (self-checked unless ``check=False``) and write the plan to ``path`` whole (temporary
    file, then rename): what ``forestcoll export --format mscclpp`` does."""
    from forestcoll.fileio import atomic_write_text
    from forestcoll.mscclpp.plan import write_plan
    from forestcoll.mscclpp.ports import idle_port_note

    topo = topology if isinstance(topology, Topology) else schedule_topology(sched, topology)
    result = export_mscclpp(sched, topo, options, progress=progress, **kwargs)
    if note := idle_port_note(sched, topo):
        result.notes.append(note)
    atomic_write_text(path, write_plan(result.plan))
    result.output = str(path)
    return result


def write_generated_plan(topology: Topology, collective: str, path: Output, **kwargs: Any) -> tuple[Schedule, ExportResult]:
    """Generate the schedule and write its plan (what ``forestcoll generate --format mscclpp`` does): the trees are
    packed on the network ports the executor drives (:func:`forestcoll.mscclpp.ports.executor_ports`, one per GPU;
    a note says so when that leaves ports idle), then as :func:`_generated_plan`."""
    from forestcoll.bound.optimal import optimal_bound
    from forestcoll.mscclpp.ports import executor_ports

    ports = executor_ports(topology)
    sched, result = _generated_plan(ports.topology, collective, path, **kwargs)
    if ports.dropped and sched.shard_weights is not None:  # the whole fabric's rate with the same shards
        from forestcoll.shard_pieces import weighted_bound

        result.notes.append(ports.note(collective, weighted_bound(topology, sched.shard_weights), sched.bound_algbw)
                            + " (both with the schedule's shard weights)")
    elif ports.dropped:
        full = optimal_bound(topology, collective, kwargs.get("root"), kwargs.get("symmetry", True)).algbw
        result.notes.append(ports.note(collective, full, sched.bound_algbw))
    return sched, result


def _generated_plan(topology: Topology, collective: str, path: Output, *, k: int | None = None,
                    root: str | None = None, symmetry: bool = True, max_k: int | None = None,
                    options: ExportOptions | None = None,
                    rate: Callable[[Schedule, int], float] | None = None,
                    progress: Progress | None = None, plan_rate: Callable[[Plan, int], float] | None = None,
                    shard_weights: tuple[int, ...] | None = None) -> tuple[Schedule, ExportResult]:
    """Generate the schedule and write its plan.  Without ``k`` the optimal schedule is used when its plan fits the
    executor's thread blocks, else :func:`fitting_schedule`'s, with a note saying so: ranked by
    ``plan_rate(plan, size)`` when given (each fitting k's plan as exported, since a plan's layout, not only its
    trees, decides its rate), else by ``rate``; either raced against the same trees packed without the CPUs
    (:mod:`forestcoll.mscclpp.offcpu`), then in its other layouts and half units (:mod:`forestcoll.mscclpp.layouts`,
    with ``plan_rate`` and the ``auto`` layout).  A given ``k`` is used as it is (or refused), its layout not raced.
    ``shard_weights``: every schedule generated (the optimum, the fallback's k) has those shards (allreduce)."""
    from dataclasses import replace

    from forestcoll.generate import generate
    from forestcoll.mscclpp.layouts import ceiling, laid_out, once, raced
    from forestcoll.mscclpp.offcpu import design_size, off_cpu_rival, race_fallback, race_plans, routed_laid_out

    kwargs: dict[str, Any] = {"root": root, "symmetry": symmetry}
    if max_k is not None:
        kwargs["max_k"] = max_k
    if shard_weights is not None:
        kwargs["shard_weights"] = shard_weights
    sched = generate(topology, collective, k=k, progress=progress, **kwargs)
    rival = None if k is not None or plan_rate is None else off_cpu_rival(topology, sched, True, **kwargs)
    opts = options or ExportOptions()
    try:
        if rival is None and (k is not None or plan_rate is None or not raced(opts)):
            return sched, write_mscclpp(sched, path, topology, options, progress=progress)
        plan_rate = once(plan_rate)  # the optimum's plan races its packing without the CPUs, then its layouts
        chosen, result, note = sched, export_mscclpp(sched, topology, replace(opts, check=False)), ""
        if rival is not None:
            chosen, result, note = race_plans(topology, sched, result, rival, opts, plan_rate)
        more = ""
        if raced(opts):  # then half units on the layout taken, as the fallback; then the fabric as routed
            result, more = laid_out(topology, chosen, result, plan_rate(result.plan, design_size(opts)), opts,
                                    plan_rate)
            chosen, result, more = routed_laid_out(topology, sched, chosen, result, more, opts, plan_rate, kwargs)
        result = _write_exported(result, path, opts, progress)
        result.notes[:0] = [n for n in (note, more.lstrip("; ")) if n]
        return chosen, result
    except ExportError as exc:
        if k is not None or "thread blocks per GPU" not in str(exc):
            raise
        first = exc
    exported: dict[int, ExportResult] = {}  # each fitting k's plan, exported once (unchecked)
    rates: dict[int, float] = {}
    scheds: dict[int, Schedule] = {}
    if plan_rate is not None:  # the fitting k ranked by their plans, as the executor would run them
        def rate(s: Schedule, size: int) -> float:
            scheds[s.k] = s
            return rates.setdefault(s.k, plan_rate(exported[s.k].plan, size))

        def top(s: Schedule, size: int) -> float | None:  # the fallback skips a k whose plan cannot win
            scheds[s.k] = s
            return ceiling(plan_rate, exported[s.k].plan, size)
        rate.ceiling = top  # type: ignore[attr-defined]
    found = fitting_schedule(topology, collective, sched, options, rate, "plans" if plan_rate else "trees", exported,
                             **kwargs)
    if found is None:
        raise first
    fallback, how = found
    if plan_rate is not None:
        ranked = fallback
        fallback, more = race_fallback(topology, sched, fallback, scheds, exported, rates, opts, plan_rate, **kwargs)
        if fallback is not ranked:
            how = f"packed without the CPUs, faster than k={ranked.k}, " + how
        exported[fallback.k], laid = laid_out(topology, fallback, exported[fallback.k], rates[fallback.k], opts,
                                              plan_rate)
        how += more + laid
        fallback, exported[fallback.k], how = routed_laid_out(  # (exported at the new fallback's k)
            topology, sched, fallback, exported[fallback.k], how, opts, plan_rate, kwargs)
    result = _write_exported(exported[fallback.k], path, options or ExportOptions(), progress)
    result.notes.insert(0, f"the optimal k={sched.k} does not fit: " + str(first).split(" (--max-threadblocks")[0]
                        + f"; exported k={fallback.k}, {how}; its trees reach "
                        + f"{float(fallback.algbw / sched.bound_algbw):.1%} of the bound")
    return fallback, result


def _write_exported(result: ExportResult, path: Output, opts: ExportOptions, progress: Progress | None) -> ExportResult:
    """What :func:`write_mscclpp` does with ``opts``, given the unchecked export of the same schedule and options
    (the self-check does not change the plan): self-check it (unless ``check=False``), write it whole."""
    from forestcoll.fileio import atomic_write_text
    from forestcoll.mscclpp.plan import write_plan

    t0 = time.perf_counter()
    text = write_plan(result.plan)  # once: the self-check reads the text written
    if opts.check:
        result.checks = self_check(result.plan, launches=max(opts.check_launches, 3 if result.plan.packet else 1),
                                   progress=progress, text=text)
    result.seconds += time.perf_counter() - t0
    atomic_write_text(path, text)
    result.output = str(path)
    return result


def _input_ref(low: Lowering, a: Act) -> Ref:
    """The reducing node's own contribution: its input at the piece."""
    coll = low.coll
    p = a.partial
    if coll == "allreduce":
        return Ref("i", p.index, a.cnt)
    # reduce-scatter / reduce: the piece's full-buffer index (order key holds root and start)
    _order, root, start = a.order
    return Ref("i", low.starts[root] + start if low.per_root else start, a.cnt)


def _units(coll: str, n: int, k: int, cnts: list[int], design: int, hi: int, opts: ExportOptions) -> dict[int, int]:
    """Pipeline unit of each chunk count of an all-to-all plan: slices as the simulator cuts all-to-all flows (the
    fixed rule: about ``slice_bytes``, at least 8 while they stay >= 64 KiB, at most ``max_slices`` or
    ``pieces.FIXED_MAX_SLICES`` as ``simulate.alltoall``; NCCL's
    point-to-point chunk depends on the transport), never more than 65,535 iterations at the largest size."""
    from forestcoll.pieces import FIXED_MAX_SLICES, slices_for

    chunk = chunk_bytes(coll, design, n, k)
    chunk_max = chunk_bytes(coll, hi, n, k)
    units = {}
    for c in cnts:
        if opts.unit_bytes is not None:
            unit = c * opts.unit_bytes
        else:
            piece = c * chunk
            unit = math.ceil(piece / slices_for(piece, opts.slice_bytes, opts.max_slices or FIXED_MAX_SLICES)
                             / ALIGN) * ALIGN
        units[c] = _at_most_65535_iterations(unit, c * chunk_max)
    return units


def _at_most_65535_iterations(unit: int, largest: int) -> int:
    """``unit`` (aligned, >= ALIGN), raised so a ``largest``-byte piece takes at most 65,535 iterations (the
    kernel's 16-bit count)."""
    return max(ALIGN, unit, math.ceil(largest / 65535 / ALIGN) * ALIGN)


def _tree_units(coll: str, n: int, k: int, lanes: int, pieces: list[Piece], design: int, hi: int,
                opts: ExportOptions) -> dict[int, int]:
    """Pipeline unit of each piece size (``k`` chunks per root, ``lanes`` per piece of the trees): at the design
    size the slice the trees simulator cuts the piece's trees' share in (:func:`forestcoll.pieces.piece_rule`,
    ``slices_for(..., rule=, depth=)``; the finest of the pieces of one size, since their blocks share the unit),
    never more than 65,535 iterations at the largest size (the kernel's 16-bit count)."""
    from forestcoll.pieces import piece_rule, slices_for

    rooted = collectives.get(coll).rooted
    chunk = chunk_bytes(coll, design, n, k)
    chunk_max = chunk_bytes(coll, hi, n, k)
    rules: dict[tuple[int, ...], tuple[str, int]] = {}
    units: dict[int, int] = {}
    for pc in pieces:
        c = pc.cnt
        if opts.unit_bytes is not None:
            unit = c * opts.unit_bytes
        else:
            key = tuple(id(t) for t in pc.trees)
            if key not in rules:
                rules[key] = piece_rule(pc.trees, rooted)
            rule, depth = rules[key]
            whole = c * chunk * lanes  # the piece as the simulator cuts it: its lanes together
            s = slices_for(whole, opts.slice_bytes, opts.max_slices, rule=rule, depth=depth)
            unit = math.ceil(whole / s / ALIGN) * ALIGN
            if opts.fine_units and c > 1:
                unit = max(ALIGN, unit // 2 // ALIGN * ALIGN)
        unit = _at_most_65535_iterations(unit, c * chunk_max)
        units[c] = min(units.get(c, unit), unit)
    return units


def _grain_key(a: Act, grain: int) -> tuple:
    """The block key of action ``a`` at grain ``grain`` (an index of :data:`GRAINS`); sinks keep theirs."""
    base = a.key[:4]
    if base[2] == "sink" or grain == 2:
        return base
    if grain == 0:
        return (*base, a.order)
    return (*base, tuple(sorted({p.gpu for p, _k in a.producers})))


def _mixed_layout(low: Lowering, acts: list[Act], units: dict[int, int], name: str, opts: ExportOptions,
                  hi: int, share: bool = False) -> Plan:
    """The ``mixed`` layout: every (GPU, phase, tree level, role, peer) group of actions starts a block per tree
    edge and piece; while a GPU has more blocks than ``max_threadblocks``, the group whose next coarser grain
    (per sending GPUs, then per level and peer: :data:`GRAINS`) costs the fewest chunks per block saved takes it.
    Blocks of a coarser grain move their pieces in lockstep (each iteration waits for every producer), so the
    chunks of a group are what the coarsening slows down; a GPU's blocks never depend on another GPU's grain.

    With ``share`` (the ``shared`` layout, allreduce) the in-tree and the out-tree blocks of a GPU are counted apart,
    each against ``max_threadblocks``, and only groups of the side over it are coarsened: pairs of an in-tree and an
    out-tree block then share a thread block (:func:`forestcoll.mscclpp.share.share_blocks`), as many as bring
    the GPU within the limit."""
    groups: dict[tuple[int, tuple], list[Act]] = {}
    for a in acts:
        groups.setdefault((a.gpu, a.key[:4]), []).append(a)
    grain = dict.fromkeys(groups, 0)
    volume = {gk: sum(a.cnt for a in members) for gk, members in groups.items()}

    def blocks(gk: tuple[int, tuple], g: int) -> int:
        return len({(_grain_key(a, g), a.cnt) for a in groups[gk]})

    def side(gk: tuple[int, tuple]) -> int:
        """Which count a group's blocks go to: with ``share``, in-tree leaves and sinks join other blocks for free
        (2: not counted), other in-tree blocks (0) and forwarding out-tree ones (1) pair up."""
        if not share:
            return 0
        role, level = gk[1][2], gk[1][1]
        if role == "sink" or (role not in OUT_ROLES and level == 0):
            return 2
        return int(role in OUT_ROLES)

    def _coarser(gk: tuple[int, tuple], g: int) -> bool:
        """Whether a round could still coarsen group ``gk`` (now at grain ``g``): the while loop's candidates."""
        return g < 2 and gk[1][2] != "sink" and min(blocks(gk, x) for x in range(g + 1, 3)) < blocks(gk, g)

    limit = [opts.max_threadblocks] * low.n
    plan = None
    for _round in range(6):
        est = [[0, 0, 0] for _ in range(low.n)]
        for gk in groups:
            est[gk[0]][side(gk)] += blocks(gk, grain[gk])
        for g in range(low.n):
            while max(est[g][:2]) > limit[g] if share else sum(est[g]) > limit[g]:
                over = est[g].index(max(est[g][:2]))
                best = None
                for gk in groups:
                    if gk[0] != g or grain[gk] >= 2 or gk[1][2] == "sink" or (share and side(gk) != over):
                        continue
                    now = blocks(gk, grain[gk])
                    nxt = min(blocks(gk, x) for x in range(grain[gk] + 1, 3))
                    if nxt < now:
                        cost = (volume[gk] / (now - nxt), gk[1])
                        if best is None or cost < best[0]:
                            best = (cost, gk, now)
                if best is None:
                    break
                _cost, gk, now = best
                grain[gk] += 1
                while grain[gk] < 2 and blocks(gk, grain[gk]) == now:
                    grain[gk] += 1  # a grain that saves nothing here
                est[g][side(gk)] += blocks(gk, grain[gk]) - now
        for gk, members in groups.items():
            for a in members:
                a.key = _grain_key(a, grain[gk])
        plan = _layout_and_emit(low, acts, units, name, opts, hi, opts.max_threadblocks if share else None)
        over = [len(gp.threadblocks) - opts.max_threadblocks for gp in plan.gpus]
        if max(over) <= 0:
            break
        if not any(over[gk[0]] > 0 and _coarser(gk, grain[gk]) for gk in groups):
            break  # no GPU over the limit has a group left to coarsen: every further round emits this same plan
        for g, extra in enumerate(over):  # the executor's op and channel limits split some blocks: aim lower
            if extra > 0:
                limit[g] -= extra
    assert plan is not None
    return plan


def _layout_and_emit(low: Lowering, acts: list[Act], units: dict[int, int], name: str, opts: ExportOptions,
                     hi: int, share: int | None = None) -> Plan:
    """Blocks grouped by the actions' keys and emitted, split further until every block fits the executor; with
    ``share`` (a thread-block limit), in-tree and out-tree blocks then pair up (:func:`share_blocks`) on every GPU
    with more blocks than that."""
    budget, partners = 40, 6
    for _attempt in range(8):
        per_gpu = group(acts, low.n, budget, partners)
        em = Emitter(per_gpu, units)
        plan = em.emit(low.entry, name, opts.inplace, low.k, low.scratch, opts.min_message_size, hi, low.shares)
        if share is not None:
            plan = share_blocks(plan, [[block_info(tb) for tb in tbs] for tbs in per_gpu], share)
        worst = _worst(plan)
        if worst is None:
            return plan
        what, g, t = worst
        if budget <= 1 and partners <= 1:
            break
        budget, partners = max(1, budget // 2), max(1, partners // 2)
    raise ExportError(f"the schedule does not fit the executor: gpu {g} thread block {t} needs {what}: use a smaller k "
                      "(fewer pieces per tree level) or a schedule with fewer trees per GPU pair")


def _worst(plan: Plan) -> tuple[str, int, int] | None:
    from forestcoll.mscclpp.plan import executor_ops
    from forestcoll.mscclpp.semantics import wire

    w = wire(plan)
    for g, gp in enumerate(plan.gpus):
        for t, tb in enumerate(gp.threadblocks):
            nops = executor_ops(tb)
            if nops > MAX_OPERATION:
                return f"{nops} operations (the executor allows {MAX_OPERATION})", g, t
            for ctype, ids in w.tb_channels[(g, t)].items():
                if len(ids) > MAX_CHANNEL:
                    return f"{len(ids)} {ctype} channels (at most {MAX_CHANNEL})", g, t
            for ctype, ids in w.tb_remote[(g, t)].items():
                if len(ids) > MAX_CHANNEL:
                    return f"{len(ids)} remote buffers through {ctype} channels (at most {MAX_CHANNEL})", g, t
    return None


def self_check(plan: Plan, launches: int = 2, progress: Progress | None = None, text: str | None = None) -> list[str]:
    """Lint the plan (``text``: its ``write_plan`` text, when made already) and run it in the interpreter (its declared
    mode, ``launches`` calls back to back, race detection) at a small size with one pipeline iteration and, with a
    smaller unit, with several (the last one partial); returns a line per run and raises :class:`ExportError` on any
    problem (a bug in the exporter)."""
    from dataclasses import replace

    from forestcoll.mscclpp.interpreter import race_clocks_refused, run_plan
    from forestcoll.mscclpp.lint import lint_plan
    from forestcoll.mscclpp.plan import parse_plan, write_plan

    text = write_plan(plan) if text is None else text
    parsed = parse_plan(text, plan.name)
    report = lint_plan(parsed, plan.name)
    if report.errors:
        raise ExportError(f"{_BUG}: it fails lint: {report.errors[0].format(plan.name)}")
    lines = []
    n = len(parsed.gpus)
    g0 = parsed.gpus[0]
    nchunks = g0.output_chunks if parsed.collective == "allgather" else g0.input_chunks
    variants = [("one iteration", parsed, 2 * ALIGN)]
    if any(op.name == "pipeline" for g in parsed.gpus for tb in g.threadblocks for op in tb.ops):
        # chunks of 3 units moved 2 units per iteration: two iterations, the last one partial
        small = replace(parsed, gpus=tuple(replace(g, threadblocks=tuple(
            replace(tb, ops=tuple(replace(op, iter_context=(op.iter_context[1] * 2 * ALIGN, op.iter_context[1]))
                                  if op.name == "pipeline" else op for op in tb.ops)) for tb in g.threadblocks))
            for g in parsed.gpus))
        variants.append(("two iterations", small, 3 * ALIGN))
    del n
    too_big = race_clocks_refused(parsed)  # the detector grows with the square of the GPUs (docs/limits.md)
    for label, p, chunk in variants:
        size = chunk * nchunks
        run = run_plan(p, source=plan.name, size=size, launches=launches, race_check=too_big is None,
                       progress=None if progress is None else _relabel(progress, f"self-check, {label}"))
        if not run.ok:
            problem = run.stuck[0].format() if run.stuck else (run.errors + run.races)[0]
            raise ExportError(f"{_BUG}: it fails in the interpreter ({label}, {size} bytes): {problem}")
        if run.relaxed:
            raise ExportError(f"{_BUG}: it relies on relaxed ordering ({label}): {run.relaxed[0]}")
        lines.append(f"{label}: {run.message} ({run.ops_executed} operations, {run.seconds:.2f} s)")
    if too_big:
        lines.append(f"no race detection: {too_big} (docs/limits.md)")
    return lines


def _relabel(progress: Progress, stage: str) -> Progress:
    """``progress`` with every report's stage replaced by ``stage``."""
    return lambda _stage, done, total=None: progress(stage, done, total)
