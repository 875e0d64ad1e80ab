"""Sweeps over sizes and algorithms (in worker processes) and the plot of them.

:func:`compare` simulates named schedules and every baseline that applies, at
every size, with the exact bound alongside; :func:`compare_topology` is what
``forestcoll compare`` runs: forestcoll's optimal schedule, its k = 1 schedule
and the baselines on a topology.  The per-size choice of a schedule is
:mod:`.select`'s job.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from forestcoll import collectives
from forestcoll.errors import UsageError
from forestcoll.progress import Progress, report
from forestcoll.schedule import Schedule
from forestcoll.simulate import baselines
from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE, SimResult, simulate
from forestcoll.simulate.network import Network
from forestcoll.topology import Topology
from forestcoll.units import format_size

__all__ = ["BEST", "COMPARED", "Comparison", "best_rows", "compare", "compare_topology", "default_workers", "plot_comparison", "run_jobs"]


@dataclass
class Comparison:
    """Every (algorithm, size) result of a sweep, and the exact bound (GB/s, nccl-tests algbw).

    A result (:mod:`forestcoll.results`): ``ok`` when every run finished; ``plot`` is the picture written, if any."""

    topology: str
    collective: str
    ranks: int
    bound_algbw: Fraction
    results: list[SimResult] = field(default_factory=list)
    plot: str | None = None
    shard_weights: tuple[int, ...] | None = None  # forestcoll's allreduce shards (the bound is theirs), None: equal
    shards_note: str = ""  # what those shards are and the equal-shard bound

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    @property
    def message(self) -> str:
        last = self.sizes()[-1] if self.results else None
        best = max((r for r in self.results if r.size_bytes == last), key=lambda r: r.algbw_gbps, default=None)
        head = f"{self.collective} on {self.topology} ({self.ranks} ranks): {len(self.results)} runs"
        return head + (f"; at {format_size(last)} {best.algorithm} is fastest, {best.algbw_gbps:.1f} GB/s "
                       f"(bound {float(self.bound_algbw):.1f})" if best else "")

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
            **({"plot": self.plot} if self.plot else {}),
            **({} if self.shard_weights is None else {"shard_weights": list(self.shard_weights)}),
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


def run_jobs(net: Network, jobs: list[tuple], workers: int, progress: Progress | None = None,
             stage: str = "simulating", done: int = 0, total: int | None = None) -> list[SimResult]:
    """Simulate every (algorithm, collective, size, options) job, in ``workers`` processes when > 1; reports
    ``(stage, done, total)`` to ``progress`` after each job, counting on from ``done``."""
    total = total if total is not None else done + len(jobs)
    results: list[SimResult] = []
    if workers <= 1 or len(jobs) <= 1:
        _init_worker(net)
        for job in jobs:
            results.append(_run_one(job))
            report(progress, stage, done + len(results), total)
        return results
    with ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(net,)) as pool:
        for res in pool.map(_run_one, jobs):
            results.append(res)
            report(progress, stage, done + len(results), total)
    return results


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


# ----- compare -------------------------------------------------------------------------------


def compare(topo: Topology, net: Network, collective: str, sizes: Sequence[int], schedules: dict[str, Schedule],
            baseline_names: Sequence[str] | None = None, *, fairness: str = "max-min", slice_bytes: int = DEFAULT_SLICE,
            max_slices: int | None = DEFAULT_MAX_SLICES, root: str | None = None, workers: int = 1,
            progress: Progress | None = None, total: int | None = None) -> Comparison:
    """Simulate ``schedules`` (name -> schedule) and the baselines at every size; ``progress`` gets
    ``("simulating", done, total)`` per run (``total``: all the runs the caller will report, default these)."""
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
    results = run_jobs(net, jobs, workers, progress, "simulating", 0, total)
    if collectives.get(collective).tree_based:
        bound = optimal_bound(topo, collective, root).algbw
    else:
        bound = _flow_bound(topo, schedules)
    order = {name: i for i, name in enumerate([*schedules, *names])}
    results.sort(key=lambda r: (order.get(r.algorithm, 99), r.size_bytes))
    return Comparison(topo.name, collective, len(net.ranks), bound, results)


def _flow_bound(topo: Topology, schedules: Mapping[str, Any]) -> Fraction:
    """All-to-all: the certified optimum a schedule carries, else the bound's certified upper end."""
    known = next((s.bound_algbw for s in schedules.values() if s.bound_algbw is not None), None)
    if known is not None:
        return known
    from forestcoll.alltoall.bound import alltoall_bound

    found = alltoall_bound(topo)
    return found.algbw if found.algbw is not None else (found.upper or Fraction(found.algbw_float))


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
              BEST: ("#000000", "*", "-"),
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


def _flow_schedule(topo: Topology, root: str | None):
    """All-to-all: forestcoll's schedule with the chunk count the MSCCL export would use."""
    from forestcoll.alltoall.generate import generate_alltoall

    if root is not None:
        raise UsageError("alltoall has no root")
    made = generate_alltoall(topo, chunks="auto")
    if made.schedule is None:
        raise UsageError(made.message)
    return made.schedule


# forestcoll's schedules compare_topology shows by default besides the baselines, and the per-size best of every
# candidate; the other candidates (k = 2, the height-limited "forestcoll-h<H>", the ring written as a forestcoll
# schedule "forestcoll-ring", which generate --sizes can export) compete for the best row and get rows when named
SHOWN = ("forestcoll", "forestcoll-k1")
COMPARED = ("forestcoll", "forestcoll-k1", "forestcoll-k2", "forestcoll-k4", "forestcoll-k8", "forestcoll-h", "forestcoll-ring",
            "forestcoll-best")
BEST = "forestcoll-best"


def _wanted(name: str, algorithms: Sequence[str] | None) -> bool:
    if algorithms is None:
        return name in SHOWN
    return name in algorithms or (name.startswith("forestcoll-h") and "forestcoll-h" in algorithms)


def best_rows(results: Sequence[SimResult], pruned: Mapping[int, Sequence[str]] | None = None) -> list[SimResult]:
    """Per size, the fastest of forestcoll's schedules (``algorithm`` starting ``forestcoll``) renamed
    ``forestcoll-best``, with ``extra["chosen"]`` naming it: what ``generate --sizes`` picks at that size (before its
    2% hysteresis and its rule that the runtime's chunking must divide the size).  ``pruned[size]``: candidates not
    simulated there because their lower bound was already slower (listed in ``extra["pruned"]``)."""
    from dataclasses import replace

    out = []
    for size in sorted({r.size_bytes for r in results}):
        ours = [r for r in results if r.size_bytes == size and r.algorithm.startswith("forestcoll")]
        if ours:
            top = max(ours, key=lambda r: r.algbw_gbps)
            skipped = sorted((pruned or {}).get(size, ()))
            out.append(replace(top, algorithm=BEST, extra={**top.extra, "chosen": top.algorithm,
                                                           **({"pruned": skipped} if skipped else {})}))
    return out


EQUAL = "forestcoll-equal"  # the name prefix of the equal-shard candidates beside weighted ones (best row only)


def _candidates(topo: Topology, net: Network, collective: str, root: str | None, equal: bool = False,
                **options: Any) -> tuple[dict[str, Schedule], tuple[int, ...] | None]:
    """:func:`~forestcoll.simulate.select.candidate_schedules` with the allreduce shards ``generate`` chooses
    (``--shards auto``: :func:`forestcoll.bound.best_shards.auto_shard_weights`, the rule
    :func:`forestcoll.cli.shards.choose_shard_weights` applies: weighted where they beat equal shards by exact
    rate, with ``with_shards``' fallback to equal shards where they have no tree schedule), and those weights (None:
    equal); with
    ``equal`` and weights, the equal-shard candidates too, named :data:`EQUAL` + the rest of their name, as
    ``generate --sizes`` offers both."""
    from forestcoll.bound.best_shards import auto_shard_weights
    from forestcoll.errors import TopologyError
    from forestcoll.simulate.select import candidate_schedules

    node = auto_shard_weights(topo) if collectives.canonical(collective) == "allreduce" else None
    weights = None if node is None else tuple(w for w, c in zip(node[0], topo.is_compute) if c)  # per rank
    try:
        cands = candidate_schedules(topo, net, collective, root, **options, shard_weights=weights)
    except TopologyError:  # no tree schedule has those shards: equal shards, as generate falls back to
        if weights is None:
            raise
        cands = candidate_schedules(topo, net, collective, root, **options)
    chosen = cands["forestcoll"].shard_weights
    if chosen is not None and equal:  # generate --sizes offers equal shards beside them: so does the best row
        more = candidate_schedules(topo, net, collective, root, **{**options, "ring": False})
        cands.update({EQUAL + name.removeprefix("forestcoll"): sched for name, sched in more.items()})
    return cands, chosen


def compare_topology(topology, collective: str = "allreduce", sizes: Sequence[int] = (1 << 20, 1 << 30), *,
                     extra: Mapping[str, str] | None = None, algorithms: Sequence[str] | None = None,
                     root: str | None = None, latency_us: Mapping[str, float] | None = None, workers: int = 1,
                     plot: str | None = None, fairness: str = "max-min", slice_bytes: int = DEFAULT_SLICE,
                     max_slices: int | None = DEFAULT_MAX_SLICES, status: Callable[[str], Any] | None = None,
                     progress: Progress | None = None, exhaustive: bool = False) -> Comparison:
    """What ``forestcoll compare`` does: forestcoll's candidates (the optimal k, k = 1, 2, 4 and 8, one height-limited
    schedule, the ring written as a forestcoll schedule: :func:`~forestcoll.simulate.select.candidate_schedules`),
    every baseline that applies (or just ``algorithms``), simulated at every size on ``topology``, and first the
    ``forestcoll-best`` row per size (:func:`best_rows`); with ``plot`` the picture is written there.  An allreduce's
    candidates have the shards ``generate`` chooses (:func:`_candidates`); where those are weighted the bound is
    theirs and ``shard_weights`` / ``shards_note`` say so (the baselines keep equal shards).

    Rows: ``forestcoll`` and ``forestcoll-k1`` (or the candidates ``algorithms`` names) at every size; the other
    candidates compete for the best row only, each simulated only where its lower bound
    (:func:`forestcoll.simulate.race.race`) does not already lose to the best found (``exhaustive``: everywhere,
    the same best rows).  ``status(text)``, if given, returns a context manager shown while the runs go;
    ``progress`` gets ``(stage, done, total)`` per candidate (or baseline) and size."""
    from forestcoll.simulate.network import load_network
    from forestcoll.simulate.race import STAGE, race_sizes
    from forestcoll.simulate.select import SMALL_KS

    if algorithms is not None:
        unknown = [a for a in algorithms if a not in baselines.BASELINES and a not in COMPARED]
        if unknown:
            raise UsageError(f"unknown algorithm {unknown[0]!r}; choose from {', '.join(COMPARED)}, "
                             f"{', '.join(baselines.BASELINES)}")
    if plot and os.path.splitext(plot)[1].lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"{plot}: the plot must be .png, .svg or .pdf")
    net = load_network(topology, extra, latency_us)
    topo = net.topology
    collective = collectives.canonical(collective)
    tree_based = collectives.get(collective).tree_based
    want_best = tree_based and (algorithms is None or BEST in algorithms)
    hidden: dict[str, Schedule] = {}
    shown: list[str] = []
    weights: tuple[int, ...] | None = None
    if tree_based:
        report(progress, "generating candidates", 0, None)
        if want_best:
            made = _candidates(topo, net, collective, root, equal=True, ks=SMALL_KS, ring_name="forestcoll-ring")
        else:  # only what --algorithms names: the height search and the ring schedule cost seconds to minutes
            named = algorithms or ()
            made = _candidates(topo, net, collective, root, ks=[k for k in SMALL_KS if f"forestcoll-k{k}" in named],
                               ring="forestcoll-ring" in named, height="forestcoll-h" in named,
                               ring_name="forestcoll-ring")
        cands, weights = made
        shown = [k for k in cands if _wanted(k, algorithms)]
        schedules = {k: cands[k] for k in shown}
        if want_best:
            hidden = {k: v for k, v in cands.items() if k not in schedules}
            if exhaustive:
                schedules, hidden = cands, {}
    else:
        schedules = {"forestcoll": _flow_schedule(topo, root)}
        if algorithms is not None:
            schedules = {k: v for k, v in schedules.items() if k in algorithms}
    if tree_based:
        names: Sequence[str] = tuple(baselines.BASELINES)
    else:
        from forestcoll.simulate.alltoall import BASELINES as names
    base = [b for b in names if algorithms is None or b in algorithms]
    applicable = [b for b in base if baselines.applicable(b, net, collective)] if tree_based else base
    shown_runs = len(sizes) * (len(schedules) + len(applicable))
    total = shown_runs + len(sizes) * len(hidden)
    raced: dict = {}
    with status(f"simulating up to {total} runs ...") if status else contextlib.nullcontext():
        comp = compare(topo, net, collective, sizes, schedules, base, root=root, workers=workers, fairness=fairness,
                       slice_bytes=slice_bytes, max_slices=max_slices, progress=progress, total=total)
        if tree_based and weights is not None:  # the bound of the shards forestcoll's schedules have
            from forestcoll.rational import format_rational

            equal = comp.bound_algbw
            comp.bound_algbw, comp.shard_weights = cands["forestcoll"].bound_algbw, weights
            comp.shards_note = (f"weighted (rank i owns k x w_i of the k x {sum(weights)} chunks, w {min(weights)}.."
                                f"{max(weights)}): algbw and bound are for these shards; equal shards' bound "
                                f"{format_rational(equal)} GB/s (~{float(equal):.4g})")
        if hidden:
            known = {size: min((r.time_s for r in comp.results if r.size_bytes == size and r.algorithm in schedules),
                               default=float("inf")) for size in sizes}
            raced = race_sizes(net, list(sizes), {size: hidden for size in sizes}, best_s=known, workers=workers,
                               progress=progress, done=shown_runs, total=total, fairness=fairness,
                               slice_bytes=slice_bytes, max_slices=max_slices)
    if want_best:
        extra_rows = [r for res in raced.values() for r in res.results]
        best = best_rows(comp.results + extra_rows, {size: list(res.pruned) for size, res in raced.items()})
        comp.results = best + [r for r in comp.results if not r.algorithm.startswith("forestcoll") or r.algorithm in shown]
    report(progress, STAGE, total, total)
    if plot:
        plot_comparison(comp, plot)
        comp.plot = plot
    return comp
