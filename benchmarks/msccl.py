"""Benchmark: MSCCL export layouts against the runtimes' limits, and the interpreter's speed.

Table 1 (layout): for dgx-a100 nodes=2 and mi250 nodes=2, allgather and
allreduce, the optimal k and k = 1: channels, thread blocks per GPU, steps per
thread block, and whether msccl-executor-nccl's and RCCL's limits hold; k = 16
is there too because the runtimes use a file only when the call's count splits
into nchunksperloop chunks, which power-of-two sizes do for power-of-two k.

Table 2 (interpreter): run time of files we export (the 32-rank allreduce of
mi250 nodes=2 is the issue's yardstick: a few seconds at most) and of the real
files in ../shared/data/msccl-xml, with the race detector on (the default) and,
as the baseline measured in the same run, off.

Table 3 (delivered): the simulated algbw of the exported files at 1 GiB (the
simulator's MSCCL model, ``forestcoll.simulate.msccl``) next to the schedule's
own simulated rate and the bound, with one instance and with two (the second
instance's connections run on other channels), on fabrics with one route per
GPU pair (dgx-a100, mi250) and with several equal-cost routes (two spines; the
H100 dump's two-port NICs), where the model's mapping of channels to routes
decides what a file can deliver.

    python benchmarks/msccl.py            # all tables
    python benchmarks/msccl.py --quick    # skip the real files
    python benchmarks/msccl.py --markdown # tables to paste into the README
    python benchmarks/msccl.py --table delivered
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from rich.console import Console
from tables import show

from forestcoll.generate import generate
from forestcoll.msccl.export import ExportError, export_msccl
from forestcoll.msccl.interpreter import run_algo
from forestcoll.msccl.ir import parse_algo
from forestcoll.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "msccl-xml"


def layout_table(console: Console, markdown: bool) -> list:
    columns = ("topology", "collective", "k", "algbw GB/s (of opt)", "channels", "tbs/GPU", "steps/tb", "nchunksperloop",
               "msccl-executor-nccl", "rccl", "export s")
    rows: list[list[str]] = []
    exported = []
    for spec in ("dgx-a100:nodes=2", "mi250:nodes=2"):
        topo = load_topology(spec)
        for coll in ("allgather", "allreduce"):
            for k in (None, 1, 16):
                sched = generate(topo, coll, k=k)
                share = f" ({float(sched.algbw / sched.bound_algbw) * 100:.1f}%)"
                row = [spec, coll, f"{sched.k}" + (" (opt)" if k is None else ""), f"{float(sched.algbw):.1f}{share}"]
                t0 = time.perf_counter()
                try:
                    res = export_msccl(sched)
                except ExportError as exc:
                    rows.append([*row, "-", "-", "-", "-", "no", "no", str(exc)[:40]])
                    continue
                dt = time.perf_counter() - t0
                rows.append([*row, str(res.channels), str(res.tbs_per_gpu), str(res.steps_per_tb),
                             str(res.algo.nchunksperloop), "yes" if res.fits("msccl-executor-nccl") else "NO",
                             "yes" if res.fits("rccl") else "NO", f"{dt:.2f}"])
                exported.append((f"{spec} {coll} k={sched.k}", res.algo))
    show(console, "MSCCL layout of forestcoll schedules (Simple protocol, 1 instance)", columns, rows, markdown, 2)
    return exported


def time_run(algo, race: bool, repeat: int = 3) -> tuple[float, object]:
    """Best of ``repeat`` runs (wall clock, seconds) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run_algo(algo, race_check=race)
        best = min(best, time.perf_counter() - t0)
    return best, result


def interpreter_table(console: Console, exported: list, quick: bool, markdown: bool) -> None:
    columns = ("file", "result", "gpus", "steps", "transmissions", "calls", "s (race check)", "s (no race check)", "ratio")
    rows: list[list[str]] = []
    cases = list(exported)
    if not quick and REAL.is_dir():
        cases += [(p.name, parse_algo(p.read_text(), p.name)) for p in sorted(REAL.glob("*.xml"))]
    for name, algo in cases:
        steps = sum(len(tb.steps) for g in algo.gpus for tb in g.tbs)
        t_race, r = time_run(algo, True)
        t_plain, _ = time_run(algo, False)
        rows.append([name, "OK" if r.ok else r.summary()[:30], str(algo.ngpus), str(steps), str(r.transmissions),
                     str(r.calls), f"{t_race:.2f}", f"{t_plain:.2f}", f"{t_race / max(t_plain, 1e-9):.1f}x"])
    show(console, "Interpreter: one run (out-of-place when declared), 2 iterations, default slots; best of 3", columns, rows,
         markdown, 2)


H100 = ROOT.parent / "shared" / "data" / "nccl-topo" / "H100-topology.xml"
DELIVERED = [
    ("dgx-a100:nodes=2", None),
    ("mi250:nodes=2", None),
    ("dgx-h100:nodes=2,fabric=leaf-spine,leaf_ports=8,oversub=2", None),
    ("H100-topology.xml:nodes=2,fabric=rail", (str(H100), {"nodes": "2", "fabric": "rail"})),
]


def delivered_table(console: Console, markdown: bool) -> None:
    from forestcoll.msccl.export import ExportOptions
    from forestcoll.simulate import simulate
    from forestcoll.simulate.msccl import simulate_msccl
    from forestcoll.simulate.network import build_network

    gib = 1 << 30
    columns = ("topology", "collective", "k", "bound GB/s", "schedule (trees) GB/s", "file, 1 instance GB/s",
               "file, 2 instances GB/s", "channels (1 / 2 inst.)")
    rows: list[list[str]] = []
    for label, how in DELIVERED:
        if how and not Path(how[0]).exists():
            continue
        topo = load_topology(*how) if how else load_topology(label)
        net = build_network(topo)
        for coll in ("allgather", "allreduce"):
            sched = generate(topo, coll)
            trees = simulate(net, sched, size=gib).algbw_gbps
            cells, chans = [], []
            for inst in (1, 2):
                try:
                    res = export_msccl(sched, ExportOptions(instances=inst))
                except ExportError as exc:
                    cells.append(f"- ({str(exc)[:30]})")
                    chans.append("-")
                    continue
                cells.append(f"{simulate_msccl(res.algo, net, gib).algbw_gbps:.1f}")
                chans.append(str(res.channels))
            rows.append([label, coll, str(sched.k), f"{float(sched.bound_algbw):.1f}", f"{trees:.1f}", *cells,
                         " / ".join(chans)])
    show(console, "Delivered: simulated algbw of exported MSCCL files at 1 GiB", columns, rows, markdown, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the real files")
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    ap.add_argument("--table", choices=("layout", "interpreter", "delivered", "all"), default="all")
    args = ap.parse_args()
    console = Console(width=160)
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average)")
    if args.table in ("layout", "interpreter", "all"):
        exported = layout_table(console, args.markdown)
        if args.table != "layout":
            interpreter_table(console, exported, args.quick, args.markdown)
    if args.table in ("delivered", "all"):
        delivered_table(console, args.markdown)


if __name__ == "__main__":
    main()
