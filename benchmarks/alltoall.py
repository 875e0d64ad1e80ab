"""Benchmark: all-to-all — exact bound, generation time, and simulated algbw against direct and hierarchical.

Table 1 (fabrics): the certified optimal algbw, whether it is certified, the
time to generate the whole schedule in-process and as a whole process
(interpreter start-up and imports included), and the simulated algbw of the
forestcoll schedule, of direct (NCCL's alltoall) and of hierarchical
(PXN-style) at 1 MiB / 64 MiB / 1 GiB, with forestcoll's gain over the best
baseline measured in the same run at 1 GiB.

Table 3 (MSCCL XML): the file exported from the ``chunks="auto"`` schedule:
its size figures, the export time (lint and a run in the interpreter
included), and its simulated algbw at 1 GiB with the simulator's MSCCL model
(``forestcoll.simulate.msccl``), which routes every channel of a GPU pair
over the same single route: where the schedule spreads a pair over two NIC
ports or two spines (H100 dump, leaf-spine) it shows half, because the model
cannot map channels to NICs as the runtime does.

Table 4 (MSCCL++): the plan exported from the same schedule (lint and a run in
the interpreter included in its export time), simulated with the plan model
(``forestcoll.simulate.mscclpp``) at 1 MiB / 64 MiB / 1 GiB next to the
schedule itself and direct.

Table 2 (scale): generation with the fabric's symmetry and, as the baseline
measured in the same run, without it (the plain source-aggregated LP), for
64 / 256 / 1024 ranks; runs longer than --limit seconds are cut off.

    python benchmarks/alltoall.py                       # all tables
    python benchmarks/alltoall.py --markdown            # markdown for the README
    python benchmarks/alltoall.py --plot docs/img/alltoall.png
    python benchmarks/alltoall.py --markdown --table mscclpp
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from rich.console import Console
from tables import show

from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.rational import format_rational
from forestcoll.simulate.alltoall import BASELINES
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

MiB = 1 << 20
ALGOS = ("forestcoll", *BASELINES)
SIZES = [MiB, 64 * MiB, 1024 * MiB]
H100 = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "nccl-topo", "H100-topology.xml")
FABRICS = [
    ("dgx-a100:nodes=2", None),
    ("dgx-a100:nodes=4", None),
    ("dgx-a100:nodes=16", None),
    ("mi250:nodes=2", None),
    ("H100-topology.xml:nodes=4,fabric=rail", (H100, {"nodes": "4", "fabric": "rail"})),
    ("dgx-h100:nodes=8,fabric=leaf-spine,oversub=2", None),
    ("dgx-1:nodes=2", None),  # beyond the list: fabrics where routing decides
    ("torus:dims=4x4", None),
]

WHOLE = """
import sys, time
t = time.perf_counter()
from forestcoll.alltoall.generate import generate_alltoall
from forestcoll.topology import load_topology
spec, path, nodes, fabric, sym = sys.argv[1:6]
topo = load_topology(path, {"nodes": nodes, "fabric": fabric}) if path != "-" else load_topology(spec)
gen = generate_alltoall(topo, chunks="auto", symmetry=sym == "1")
assert gen.ok, gen.message
"""


def whole_process(spec: str, how, symmetry: bool = True, limit: float | None = None) -> float | None:
    """Seconds for a fresh interpreter to import forestcoll and generate the schedule (None: over ``limit``)."""
    path, opts = how if how else ("-", {"nodes": "", "fabric": ""})
    args = [sys.executable, "-c", WHOLE, spec, path, opts.get("nodes", ""), opts.get("fabric", ""), "1" if symmetry else "0"]
    t0 = time.perf_counter()
    try:
        subprocess.run(args, check=True, timeout=limit, capture_output=True)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - t0


def fabric_table(console: Console, markdown: bool, plot: str | None) -> None:
    from forestcoll.simulate.compare import compare

    rows = []
    curves = {}
    for label, how in FABRICS:
        if how and not os.path.exists(how[0]):
            console.print(f"[yellow]skipping {label}: {how[0]} not found[/yellow]")
            continue
        topo = load_topology(*how) if how else load_topology(label)
        t0 = time.perf_counter()
        gen = generate_alltoall(topo, chunks="auto")
        gen_s = time.perf_counter() - t0
        assert gen.ok, gen.message
        whole = whole_process(label, how)
        bound = gen.bound
        net = build_network(topo)
        comp = compare(topo, net, "alltoall", SIZES, {"forestcoll": gen.schedule}, BASELINES)

        def rate(algo, size, comp=comp):
            r = comp.get(algo, size)
            return r.algbw_gbps if r else None

        best_base = max(v for a in BASELINES for v in [rate(a, SIZES[-1])] if v is not None)
        cells = [" / ".join("-" if rate(a, size) is None else f"{rate(a, size):.1f}" for a in ALGOS) for size in SIZES]
        exact = format_rational(bound.algbw) if bound.certified else f"~{bound.algbw_float:.4g}"
        rows.append([label, str(topo.num_compute), f"{exact} ({float(gen.schedule.algbw):.2f})",
                     "yes" if bound.certified else f"no (gap {bound.relative_gap:.1e})", str(gen.schedule.k),
                     f"{gen_s:.2f}", f"{whole:.2f}" if whole is not None else "-", *cells,
                     f"{rate('forestcoll', SIZES[-1]) / best_base:.2f}x"])
        curves[label] = (float(gen.schedule.algbw), {a: [rate(a, size) for size in SIZES] for a in ALGOS})
    show(console, "Table 1: all-to-all bound and simulated algbw (GB/s; forestcoll / direct / hierarchical)",
         ["topology", "ranks", "optimum GB/s (schedule)", "certified", "k", "generate s", "whole process s",
          "1 MiB", "64 MiB", "1 GiB", "vs best baseline @1 GiB"], rows, markdown, 1)
    if plot:
        _plot(curves, plot)


def _plot(curves, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(17, 7), sharex=True)
    for ax, (label, (bound, rows)) in zip(axes.flat, curves.items()):
        mib = [s / MiB for s in SIZES]
        for algo, style in zip(ALGOS, ("o-", "s--", "^:")):
            ys = rows[algo]
            pts = [(x, y) for x, y in zip(mib, ys) if y is not None]
            if pts:
                ax.plot(*zip(*pts), style, label=algo)
        ax.axhline(bound, color="grey", lw=1, label="exact optimum")
        ax.set_xscale("log", base=2)
        ax.set_title(label, fontsize=9)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("size per rank (MiB)")
        ax.set_ylabel("algbw (GB/s)")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("all-to-all, simulated: forestcoll vs direct (NCCL) vs hierarchical (PXN)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def scale_table(console: Console, markdown: bool, limit: float) -> None:
    from forestcoll.alltoall import alltoall_bound

    rows = []
    for nodes in (8, 32, 128, 512):
        spec = f"dgx-a100:nodes={nodes}"
        topo = load_topology(spec)
        t0 = time.perf_counter()
        if nodes <= 128:
            gen = generate_alltoall(topo)
            b, flows = gen.bound, str(len(gen.schedule.flows))
        else:  # 4,096 ranks: 16.8 M flows would not fit a useful file; the bound alone
            b, flows = alltoall_bound(topo), "not built"
        sym_s = time.perf_counter() - t0
        whole = whole_process(spec, None) if nodes <= 128 else None
        plain = whole_process(spec, None, symmetry=False, limit=limit) if nodes <= 32 else None
        rows.append([spec, str(topo.num_compute), format_rational(b.algbw) if b.certified else "-",
                     f"{b.seconds['total']:.2f}", f"{sym_s:.2f}" if flows != "not built" else "-",
                     f"{whole:.2f}" if whole else "-",
                     f"{plain:.1f}" if plain is not None else (f"> {limit:.0f}" if nodes <= 32 else "not run"),
                     f"{plain / whole:.0f}x" if plain is not None and whole else "-",
                     b.symmetry["group"], f"{b.symmetry['lp_rows']} x {b.symmetry['lp_columns']}", flows])
    show(console, "Table 2: scale (symmetry vs the plain source-aggregated LP, whole process)",
         ["topology", "ranks", "optimum GB/s", "bound s", "schedule s", "whole process s", "no symmetry, whole s",
          "symmetry speed-up", "group", "reduced LP", "flows"], rows, markdown, 1)


def xml_table(console: Console, markdown: bool) -> None:
    from forestcoll.alltoall.msccl import export_alltoall_msccl
    from forestcoll.msccl.export import ExportError, ExportOptions, self_check
    from forestcoll.simulate.msccl import simulate_msccl

    rows = []
    for label, how in FABRICS:
        if how and not os.path.exists(how[0]):
            continue
        topo = load_topology(*how) if how else load_topology(label)
        sched = generate_alltoall(topo, chunks="auto").schedule
        t0 = time.perf_counter()
        out = export_alltoall_msccl(sched)
        self_check(out)
        export_s = time.perf_counter() - t0
        try:
            rccl = export_alltoall_msccl(sched, ExportOptions(runtime="rccl"))
            rccl_cell = f"{rccl.tbs_per_gpu}" + (" (shared)" if rccl.notes and "share" in " ".join(rccl.notes) else "")
        except ExportError as exc:
            rccl_cell = f"refused: {str(exc)[:60]}..."
        net = build_network(topo)
        xml_bw = simulate_msccl(out.algo, net, 1 << 30).algbw_gbps
        rows.append([label, str(sched.k), str(out.channels), str(out.tbs_per_gpu), rccl_cell, str(out.steps_per_tb),
                     f"{export_s:.2f}", "yes", f"{xml_bw:.1f}", f"{xml_bw / float(sched.algbw):.2f}"])
    show(console, "Table 3: MSCCL XML of the chunks='auto' schedule (simulated with the MSCCL model)",
         ["topology", "k", "channels", "tbs/GPU", "tbs/GPU for rccl", "steps/tb", "export + check s",
          "lint + interpreter ok", "XML algbw @1 GiB", "of schedule"], rows, markdown, 1)


def mscclpp_table(console: Console, markdown: bool, fabrics: list[str] | None = None) -> None:
    """The MSCCL++ plan of each fabric's chunks='auto' schedule, routed on the network ports the executor drives (as
    ``generate --format mscclpp`` does: :func:`forestcoll.simulate.alltoall_ports.generate_for_executor`): its size figures, export +
    self-check time, and its simulated algbw against the schedule's own and direct's (the plan is cut for 1 GiB, the
    default design size)."""
    from forestcoll.alltoall.mscclpp import export_alltoall_mscclpp
    from forestcoll.mscclpp.export import ExportError, ExportOptions
    from forestcoll.simulate.alltoall import simulate_alltoall
    from forestcoll.simulate.alltoall_ports import generate_for_executor
    from forestcoll.simulate.mscclpp import simulate_plan

    rows = []
    for label, how in FABRICS + [("ring:n=5", None), ("torus:dims=2x4", None), ("dgx-1", None)]:
        if fabrics and label not in fabrics:
            continue
        if how and not os.path.exists(how[0]):
            continue
        topo = load_topology(*how) if how else load_topology(label)
        sched = generate_for_executor(topo, ExportOptions(inplace=False), chunks="auto", symmetry=True).schedule
        t0 = time.perf_counter()
        try:
            out = export_alltoall_mscclpp(sched, topo, ExportOptions(inplace=False))
        except ExportError as exc:
            rows.append([label, str(sched.k), f"refused: {exc}", *["-"] * 8])
            continue
        export_s = time.perf_counter() - t0
        net = build_network(topo)
        t1 = time.perf_counter()
        cells = []
        for size in SIZES:
            plan_bw = simulate_plan(net, out.plan, size).algbw_gbps
            sched_bw = simulate_alltoall(net, sched, size).algbw_gbps
            direct_bw = simulate_alltoall(net, "direct", size).algbw_gbps
            cells.append(f"{plan_bw:.1f} / {sched_bw:.1f} / {direct_bw:.1f}")
        last = (plan_bw, sched_bw)
        s = out.stats
        rows.append([label, str(sched.k), str(s.threadblocks_per_gpu), str(s.ops_per_threadblock),
                     f"{s.memory_channels}+{s.port_channels}", str(s.scratch_chunks), f"{export_s:.2f}", *cells,
                     f"{last[0] / last[1]:.2f}", f"{time.perf_counter() - t1:.1f}"])
    show(console, "Table 4: MSCCL++ plan of the chunks='auto' schedule (simulated algbw GB/s: plan / schedule / direct)",
         ["topology", "k", "tbs/GPU", "ops/tb", "channels/GPU (mem+port)", "scratch chunks", "export + check s",
          "1 MiB", "64 MiB", "1 GiB", "plan / schedule @1 GiB", "sim s"], rows, markdown, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--plot", default=None, help="write the algbw-vs-size plot here (png/svg)")
    ap.add_argument("--limit", type=float, default=300.0, help="cut-off for the runs without symmetry (seconds)")
    ap.add_argument("--table", choices=("fabrics", "scale", "xml", "mscclpp", "all"), default="all")
    ap.add_argument("--fabric", action="append", default=None, help="with --table mscclpp: only these rows")
    args = ap.parse_args()
    console = Console()
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average), {os.cpu_count()} cores")
    if args.table in ("fabrics", "all"):
        fabric_table(console, args.markdown, args.plot)
    if args.table in ("xml", "all"):
        xml_table(console, args.markdown)
    if args.table in ("mscclpp", "all"):
        mscclpp_table(console, args.markdown, args.fabric)
    if args.table in ("scale", "all"):
        scale_table(console, args.markdown, args.limit)


if __name__ == "__main__":
    main()
