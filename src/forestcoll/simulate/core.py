"""One simulated call: build the program of an algorithm, run it, report time, algbw and busbw."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from forestcoll import collectives
from forestcoll.errors import ForestCollError, UsageError
from forestcoll.progress import Progress
from forestcoll.rational import format_rational
from forestcoll.schedule import Schedule
from forestcoll.simulate import baselines
from forestcoll.simulate.engine import Program, ProgramBuilder, run
from forestcoll.simulate.network import Network
from forestcoll.simulate.trees import tree_program

if TYPE_CHECKING:
    from forestcoll.alltoall.schedule import AlltoallSchedule

__all__ = ["ALGORITHMS", "DEFAULT_MAX_SLICES", "DEFAULT_SLICE", "SimResult", "simulate", "simulate_program", "simulate_spec"]

ALGORITHMS = ("forestcoll", *baselines.BASELINES)
DEFAULT_SLICE = 1 << 20  # a ring's pipeline slice (NCCL_BUFFSIZE / 4); every runtime rule scales with it (pieces.slices_for)
DEFAULT_MAX_SLICES: int | None = None  # no cap per block: the runtimes loop over the data in chunks without one


@dataclass
class SimResult:
    """What a simulated call took (nccl-tests conventions: algbw = size / time, busbw = algbw x bus factor).

    A result (:mod:`forestcoll.results`): ``ok`` when the call finished in a finite time (always, for the
    programs forestcoll builds)."""

    algorithm: str
    collective: str
    size_bytes: int
    ranks: int
    time_s: float
    algbw_gbps: float
    busbw_gbps: float
    transfers: int
    events: int
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return math.isfinite(self.time_s) and self.time_s > 0

    @property
    def message(self) -> str:
        return (f"{self.algorithm}: {self.collective} of {self.size_bytes} bytes on {self.ranks} ranks in "
                f"{self.time_s * 1e3:.4f} ms, algbw {self.algbw_gbps:.2f} GB/s, busbw {self.busbw_gbps:.2f} GB/s")

    def to_dict(self) -> dict[str, Any]:
        out = {
            "algorithm": self.algorithm,
            "collective": self.collective,
            "size_bytes": self.size_bytes,
            "ranks": self.ranks,
            "time_s": self.time_s,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "transfers": self.transfers,
            "events": self.events,
            "wall_s": round(self.wall_s, 4),
        }
        out.update(self.extra)
        return out


def simulate_program(prog: ProgramBuilder | Program, net: Network, name: str, collective: str, size: int,
                     extra: dict[str, Any] | None = None, sharing: str = "weighted", fairness: str = "max-min",
                     bus_factor: Fraction | None = None, stop_at: float = math.inf,
                     progress: Progress | None = None) -> SimResult | None:
    """Run a program (a builder is built with ``sharing`` first) and package the result (``bus_factor``:
    busbw / algbw, default the collective's).  None when the call would take longer than ``stop_at`` seconds
    (the run stops there); ``progress`` (:mod:`forestcoll.progress`) hears the transfers delivered."""
    t0 = time.perf_counter()
    program = prog if isinstance(prog, Program) else prog.build(sharing)
    if program.size == 0:
        raise UsageError(f"{name}: moves no data between ranks (no transfers), so it has no time or rate to simulate")
    res = run(program, net.capacity, fairness, stop_at, progress)
    if res.stopped:
        return None
    unfinished = int(np.isnan(res.delivered).sum())
    if unfinished:
        raise UsageError(f"{name}: {unfinished} of {program.size} transfers never run (their dependencies never happen); "
                         "`forestcoll msccl run` shows where a file waits")
    wall = time.perf_counter() - t0
    ranks = len(net.ranks)
    t = res.time
    algbw = size / t / 1e9 if t > 0 else float("inf")
    busbw = algbw * float(collectives.bus_factor(collective, ranks) if bus_factor is None else bus_factor)
    extra = dict(extra or {})
    extra["rate_recomputations"] = res.recomputes
    return SimResult(name, collective, int(size), ranks, t, algbw, busbw, program.size, res.events, wall, extra)


def simulate(net: Network, algorithm: str | Schedule | AlltoallSchedule, collective: str | None = None, size: int = 1 << 30, *,
             slice_bytes: int = DEFAULT_SLICE, max_slices: int | None = DEFAULT_MAX_SLICES, root: int | str | None = None,
             name: str | None = None, sharing: str = "weighted", fairness: str = "max-min",
             progress: Progress | None = None) -> SimResult:
    """Simulate one call of ``size`` bytes (nccl-tests size: the whole buffer; for allgather the output,
    for reduce-scatter the input; for all-to-all a rank's input) with ``algorithm``: a forestcoll
    :class:`Schedule` or :class:`~forestcoll.alltoall.schedule.AlltoallSchedule`, or a baseline name.
    Every program cuts its blocks as its runtime does (:func:`forestcoll.pieces.slices_for`; ``slice_bytes``: a
    ring's slice, the unit of every rule); ``max_slices`` caps the slices per block (None: no cap, as the runtimes)."""
    if size < 1:
        raise UsageError(f"size must be >= 1 byte, got {size}")
    if slice_bytes < 1 or (max_slices is not None and max_slices < 1):
        raise UsageError("slice size and slices per block must be >= 1")
    if sharing not in ("weighted", "equal"):
        raise UsageError(f"sharing must be 'weighted' or 'equal', got {sharing!r}")
    slicing = (float(slice_bytes), None if max_slices is None else int(max_slices))
    if isinstance(algorithm, Schedule):
        sched = algorithm
        collective = sched.collective
        prog = tree_program(sched, net, float(size), *slicing)
        label = name or ("forestcoll" if sched.optimal else f"forestcoll-k{sched.k}")
        extra: dict[str, Any] = {"k": sched.k}
        if sched.shard_weights is not None:  # say which contract the rate is for (docs/simulate.md)
            extra["notes"] = [f"weighted shards (rank i owns k x w_i of the k x {sum(sched.weights)} chunks, "
                              f"w from the schedule): its bound for these shards is {format_rational(sched.bound_algbw)} "
                              f"GB/s (~{float(sched.bound_algbw):.2f}), not the equal-shard bound"]
        return simulate_program(prog, net, label, collective, size, extra, sharing, fairness, progress=progress)
    if not isinstance(algorithm, str) or (collective is not None and not collectives.get(collective).tree_based):
        return _simulate_alltoall(net, algorithm, size, slice_bytes, max_slices, name, sharing, fairness)
    if collective is None:
        raise UsageError("a baseline needs a collective")
    coll = collectives.get(collective)
    collective = coll.name
    if algorithm not in baselines.BASELINES:
        raise UsageError(f"unknown algorithm {algorithm!r}; choose from {', '.join(ALGORITHMS)}")
    if not baselines.applicable(algorithm, net, collective):
        raise UsageError(f"{algorithm} has no {collective} form on this fabric")
    kwargs: dict[str, Any] = {}
    if coll.rooted and algorithm in ("ring", "direct"):
        kwargs["root"] = _root_rank(net, root)
    prog = baselines.BASELINES[algorithm](net, collective, float(size), slicing, **kwargs)
    return simulate_program(prog, net, name or algorithm, collective, size, None, sharing, fairness, progress=progress)


def _simulate_alltoall(net: Network, algorithm, size: int, slice_bytes: int, max_slices: int | None, name: str | None,
                       sharing: str, fairness: str) -> SimResult:
    """An all-to-all schedule or baseline (:mod:`forestcoll.simulate.alltoall`)."""
    from forestcoll.alltoall.schedule import AlltoallSchedule
    from forestcoll.simulate import alltoall

    if not isinstance(algorithm, AlltoallSchedule) and not alltoall.applicable(algorithm, net):
        choices = [b for b in alltoall.BASELINES if alltoall.applicable(b, net)]
        raise UsageError(f"{algorithm} has no alltoall form on this fabric; choose {' or '.join(choices)}")
    return alltoall.simulate_alltoall(net, algorithm, size, slice_bytes=slice_bytes, max_slices=max_slices, name=name,
                                      sharing=sharing, fairness=fairness)


def _root_rank(net: Network, root: int | str | None) -> int:
    if root is None:
        return 0
    if isinstance(root, int):
        if not 0 <= root < len(net.ranks):
            raise UsageError(f"root {root} is not a rank")
        return root
    if root not in net.ranks:
        raise UsageError(f"unknown root {root!r}")
    return net.ranks.index(root)


def simulate_spec(what: str, topology=None, *, extra: Mapping[str, str] | None = None, collective: str = "allreduce",
                  root: str | None = None, size: int = 1 << 30, latency_us: Mapping[str, float] | None = None,
                  slice_bytes: int = DEFAULT_SLICE, max_slices: int | None = DEFAULT_MAX_SLICES,
                  fairness: str = "max-min", trees: str | None = None, port_transport: str = "executor",
                  progress: Progress | None = None):
    """Simulate what ``forestcoll simulate`` takes: a baseline name (on ``topology``), or a file told by its
    content: an MSCCL XML file or an MSCCL++ execution plan (on ``topology``; a plan against the schedule file
    ``trees`` when given, its port channels by ``port_transport``) or a schedule JSON file (on ``topology`` or
    the one it names); ``extra`` are cluster options (nodes, fabric), ``latency_us`` per link class overrides.
    Returns the network and the result (a :class:`~forestcoll.simulate.mscclpp.PlanSimulation` for a plan).
    ``progress`` (:mod:`forestcoll.progress`) hears the transfers of a schedule or baseline run."""
    from forestcoll.fileio import file_kind, is_plan, kind_of, sniff
    from forestcoll.simulate.network import load_network

    opts = {"slice_bytes": slice_bytes, "max_slices": max_slices, "fairness": fairness}
    if what in baselines.BASELINES:
        if trees is not None:
            raise UsageError("--trees compares an MSCCL++ plan or an MSCCL file with its schedule, not a baseline")
        if not topology:
            raise UsageError(f"simulating {what} needs --topology")
        net = load_network(topology, extra, latency_us)
        return net, simulate(net, what, collective, size, root=root, progress=progress, **opts)
    if not os.path.exists(what) and not (os.sep in what or what.lower().endswith((".json", ".xml"))):
        import difflib

        close = difflib.get_close_matches(what, list(baselines.BASELINES), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise UsageError(f"{what}: no such file, and not a baseline; {hint}baselines: {', '.join(baselines.BASELINES)} "
                         "(or a schedule, an MSCCL++ plan or an MSCCL XML file)")
    try:
        kind, data = sniff(what, "schedule, MSCCL or MSCCL++ file")
        found = kind_of(data) if kind == "json" else file_kind(what, data)
    except ForestCollError:
        if not os.path.isfile(what):
            raise
        found = file_kind(what)  # a YAML topology, ...
        if not found.name.startswith("topology"):
            raise
    if found.name in ("topology", "topology-declarative", "nccl-topology"):
        raise UsageError(f"{what} is {found.label}, not a schedule, plan or MSCCL file; simulate a baseline on it with "
                         f"`forestcoll simulate ring -t {what}`, or generate a schedule with `forestcoll generate {what}`")
    if trees is not None and not (kind == "xml" or (kind == "json" and is_plan(data))):
        raise UsageError("--trees compares an MSCCL++ plan or an MSCCL file with its schedule; give one to simulate")
    if kind == "xml":
        from forestcoll.msccl.ir import read_algo
        from forestcoll.simulate.msccl import msccl_collective, simulate_msccl

        if not topology:
            raise UsageError("simulating an MSCCL file needs --topology")
        algo, _text = read_algo(what, data)  # as sniffed: read once (a FIFO gives its text once)
        msccl_collective(algo, what)
        net = load_network(topology, extra, latency_us)
        res = simulate_msccl(algo, net, size, source=what, **opts)
        if trees is not None:  # the schedule the file came from, simulated as trees on the same network
            from forestcoll.schedule import read_schedule

            tree = simulate(net, read_schedule(trees), size=size, **opts)
            res.extra["trees_algbw_gbps"] = tree.algbw_gbps
            res.extra.setdefault("notes", []).insert(0, (
                f"the schedule as trees ({trees}): {tree.algbw_gbps:.2f} GB/s algbw; the file reaches "
                f"{res.algbw_gbps / tree.algbw_gbps:.1%} of its trees"))
        return net, res
    from forestcoll.schedule import read_schedule, schedule_from_dict, schedule_topology

    if is_plan(data):
        from forestcoll.mscclpp.plan import plan_from_json
        from forestcoll.simulate.mscclpp import plan_simulation

        if not topology:
            raise UsageError("simulating an MSCCL++ plan needs --topology (a plan does not name its fabric)")
        plan = plan_from_json(data, what)
        net = load_network(topology, extra, latency_us)
        sched = read_schedule(trees) if trees is not None else None
        return net, plan_simulation(net, plan, size, sched, source=what, fairness=fairness,
                                    port_transport=port_transport)
    sched = schedule_from_dict(data, what)
    net = load_network(schedule_topology(sched, topology, extra), None, latency_us)
    return net, simulate(net, sched, size=size, progress=progress, **opts)
