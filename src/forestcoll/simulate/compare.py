"""Sweeps over sizes and algorithms, the plot of them, and the per-size choice of a schedule.

``compare`` simulates forestcoll's optimal schedule, its k = 1 schedule and
every baseline that applies, at every size, with the exact bound alongside.
``select_schedules`` simulates candidate schedules (forestcoll at the optimal
k and at powers of two, and the ring written as a schedule) at every size and
returns the best per size range, ready for MSCCL export with minBytes/maxBytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from forestcoll import collectives
from forestcoll.errors import ForestCollError, UsageError
from forestcoll.schedule import Schedule
from forestcoll.simulate import baselines
from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE, SimResult, simulate
from forestcoll.simulate.network import Network
from forestcoll.topology import Topology
from forestcoll.units import format_size


@dataclass
class Comparison:
    """Every (algorithm, size) result of a sweep, and the exact bound (GB/s, nccl-tests algbw)."""

    topology: str
    collective: str
    ranks: int
    bound_algbw: Fraction
    results: list[SimResult] = field(default_factory=list)

    def algorithms(self) -> list[str]:
        return list(dict.fromkeys(r.algorithm for r in self.results))

    def sizes(self) -> list[int]:
        return sorted({r.size_bytes for r in self.results})

    def get(self, algorithm: str, size: int) -> SimResult | None:
        return next((r for r in self.results if r.algorithm == algorithm and r.size_bytes == size), None)

    def speedup(self, size: int, over: str, of: str = "forestcoll") -> float | None:
        a, b = self.get(of, size), self.get(over, size)
        return a.algbw_gbps / b.algbw_gbps if a and b else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "topology": self.topology,
            "collective": self.collective,
            "ranks": self.ranks,
            "bound_algbw_gbps": float(self.bound_algbw),
            "rows": [r.to_dict() for r in self.results],
        }


# ----- running many simulations --------------------------------------------------------------

_WORKER_NET: Network | None = None


def _init_worker(net: Network) -> None:
    global _WORKER_NET
    _WORKER_NET = net


def _run_one(job: tuple) -> SimResult:
    algorithm, collective, size, kwargs = job
    assert _WORKER_NET is not None
    return simulate(_WORKER_NET, algorithm, collective, size, **kwargs)


def run_jobs(net: Network, jobs: list[tuple], workers: int, progress: Callable[[SimResult], None] | None = None) -> list[SimResult]:
    """Simulate every (algorithm, collective, size, options) job, in ``workers`` processes when > 1."""
    results: list[SimResult] = []
    if workers <= 1 or len(jobs) <= 1:
        _init_worker(net)
        for job in jobs:
            results.append(_run_one(job))
            if progress:
                progress(results[-1])
        return results
    with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(net,)) as pool:
        for res in pool.map(_run_one, jobs):
            results.append(res)
            if progress:
                progress(res)
    return results


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


# ----- compare -------------------------------------------------------------------------------


def compare(topo: Topology, net: Network, collective: str, sizes: Sequence[int], schedules: dict[str, Schedule],
            baseline_names: Sequence[str] | None = None, *, fairness: str = "max-min", slice_bytes: int = DEFAULT_SLICE,
            max_slices: int = DEFAULT_MAX_SLICES, root: str | None = None, workers: int = 1,
            progress: Callable[[SimResult], None] | None = None) -> Comparison:
    """Simulate ``schedules`` (name -> schedule) and the baselines at every size."""
    from forestcoll.bound import optimal_bound

    collective = collectives.canonical(collective)
    names = [b for b in (baseline_names if baseline_names is not None else baselines.BASELINES)
             if baselines.applicable(b, net, collective)]
    opts = {"fairness": fairness, "slice_bytes": slice_bytes, "max_slices": max_slices}
    jobs = []
    for size in sizes:
        for name, sched in schedules.items():
            jobs.append((sched, collective, size, {**opts, "name": name}))
        for b in names:
            jobs.append((b, collective, size, {**opts, "root": root}))
    results = run_jobs(net, jobs, workers, progress)
    bound = optimal_bound(topo, collective, root).algbw
    order = {name: i for i, name in enumerate([*schedules, *names])}
    results.sort(key=lambda r: (order.get(r.algorithm, 99), r.size_bytes))
    return Comparison(topo.name, collective, len(net.ranks), bound, results)


def plot_comparison(comp: Comparison, path: str) -> None:
    """algbw against size for every algorithm, with the exact bound as a line; PNG, SVG or PDF by extension."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from forestcoll.fileio import atomic_write_bytes

    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in ("png", "svg", "pdf"):
        raise UsageError(f"{path}: the plot must be .png, .svg or .pdf")
    styles = {"forestcoll": ("#d62728", "o", "-"), "forestcoll-k1": ("#ff7f0e", "s", "-"),
              "ring": ("#1f77b4", "^", "--"), "double-binary-tree": ("#2ca02c", "v", "--"),
              "hierarchical": ("#9467bd", "D", ":"), "direct": ("#7f7f7f", "x", ":")}
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    sizes = comp.sizes()
    ax.axhline(float(comp.bound_algbw), color="black", lw=1.2, ls="-.", label=f"exact bound ({float(comp.bound_algbw):.1f} GB/s)")
    for name in comp.algorithms():
        pts = [(r.size_bytes, r.algbw_gbps) for r in comp.results if r.algorithm == name]
        color, marker, ls = styles.get(name, (None, ".", "-"))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, ls=ls, color=color, label=name, ms=5)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([format_size(s) for s in sizes], rotation=45, ha="right")
    ax.set_xlabel("size (nccl-tests bytes)")
    ax.set_ylabel("algbw (GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"{comp.collective} on {comp.topology} ({comp.ranks} ranks), simulated")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format=ext)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


# ----- per-size selection ----------------------------------------------------------------------


@dataclass
class SizeRange:
    """The schedule chosen for calls of ``min_bytes`` to ``max_bytes`` bytes (0: no upper limit)."""

    min_bytes: int
    max_bytes: int
    name: str
    schedule: Schedule
    measured: dict[int, float]  # size -> algbw of the chosen schedule at the sizes inside the range


@dataclass
class Selection:
    ranges: list[SizeRange]
    table: list[SimResult]  # every candidate at every size


def candidate_schedules(topo: Topology, net: Network, collective: str, root: str | None = None,
                        ks: Sequence[int] | None = None) -> dict[str, Schedule]:
    """forestcoll at the optimal k and at powers of two below it, and the ring as a schedule (when it verifies)."""
    from forestcoll.generate import generate
    from forestcoll.verify import verify

    best = generate(topo, collective, root=root)
    cands: dict[str, Schedule] = {"forestcoll": best}
    powers = ks if ks is not None else [2**i for i in range(0, 7) if 2**i < best.k]
    for k in powers:
        cands[f"forestcoll-k{k}"] = generate(topo, collective, k=k, root=root)
    try:
        ring = baselines.ring_schedule(net, collective, root)
        if verify(ring, topo).ok:
            cands["ring"] = ring
    except ForestCollError:
        pass
    return cands


def usable(sched: Schedule, size: int, element_bytes: int = 4) -> bool:
    """Whether the runtimes would use ``sched``'s MSCCL file for a call of ``size`` bytes: the element count
    must split into nchunksperloop chunks (N*k for allgather / reduce-scatter / allreduce, k otherwise)."""
    nchunks = collectives.get(sched.collective).chunks_per_loop(len(sched.ranks), sched.k)
    return size % element_bytes == 0 and (size // element_bytes) % nchunks == 0


def select_schedules(topo: Topology, net: Network, collective: str, sizes: Sequence[int],
                     candidates: dict[str, Schedule], *, fairness: str = "max-min", workers: int = 1,
                     margin: float = 0.02, runtime_sizes: bool = True,
                     progress: Callable[[SimResult], None] | None = None) -> Selection:
    """The candidate with the highest simulated algbw at each size, merged into size ranges.

    With ``runtime_sizes`` a candidate competes at a size only if the runtimes can use its file there
    (:func:`usable`, 4-byte elements).  The previous size's winner is kept while it is within ``margin``
    of the best, so near-ties do not split the ranges."""
    jobs = [(sched, collective, size, {"fairness": fairness, "name": name})
            for size in sizes for name, sched in candidates.items()]
    table = run_jobs(net, jobs, workers, progress)
    winners: list[tuple[int, str]] = []
    for size in sorted(sizes):
        rows = [r for r in table if r.size_bytes == size
                and (not runtime_sizes or usable(candidates[r.algorithm], size))]
        if not rows:
            raise UsageError(f"no candidate schedule can run a {format_size(size)} call (its chunking does not divide it)")
        best = max(rows, key=lambda r: (r.algbw_gbps, -list(candidates).index(r.algorithm)))
        if winners:
            prev = next((r for r in rows if r.algorithm == winners[-1][1]), None)
            if prev is not None and prev.algbw_gbps >= best.algbw_gbps * (1 - margin):
                best = prev
        winners.append((size, best.algorithm))
    ranges: list[SizeRange] = []
    for i, (size, name) in enumerate(winners):
        algbw = next(r.algbw_gbps for r in table if r.size_bytes == size and r.algorithm == name)
        if ranges and ranges[-1].name == name:
            ranges[-1].measured[size] = algbw
            continue
        if ranges:
            ranges[-1].max_bytes = size - 1
        ranges.append(SizeRange(0 if i == 0 else size, 0, name, candidates[name], {size: algbw}))
    return Selection(ranges, table)

