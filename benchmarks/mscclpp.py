"""Benchmark: MSCCL++ plans exported from tree schedules, their simulated rate against their trees, the interpreter.

Table 1 (export): for dgx-a100 nodes=2 and mi250 nodes=2, allgather, reduce-scatter and allreduce, the optimal k
and k = 1: the layout the exporter chose, thread blocks per GPU, operations per thread block (the executor allows
64), memory / port channels per GPU, export time (in process, without and with the self-check), and the simulated
algbw of one call at 1 GiB and at 16 MiB of the plan (exported for that size: pipeline slices are cut for it)
against its own trees, both on the same network model.  An optimal k whose plan needs more thread blocks than a GPU
runs at once (104) is refused; the row after it measures the schedule `generate --format mscclpp` exports then
(`fitting_schedule` ranked as `write_generated_plan` ranks it: of the powers of two below it whose plans fit, the
one whose *plan* simulates fastest at 1 GiB).  "trees (runtime routes)" runs the trees on the routes a GPU-to-GPU
transfer takes inside a box (CUDA IPC): where it differs from "trees", the schedule uses paths the runtime does not
take by itself (PCIe instead of NVLink, the network between two GPUs of one box).  "plan" simulates port channels
as the executor sets them up (CUDA IPC inside a host), "plan (NIC ports)" with every port channel through the
network, as the trees' paths say ("=": the plan has no port channel inside a box).

Table 2 (interpreter): run time of every real plan in ../shared/data/mscclpp-plans and of exported plans, with the
race detector (the default) and, as the baseline measured in the same run, without.

Table 3 (with ``--generated``, instead of tables 1 and 2): the plan ``forestcoll generate FABRIC -c COLL --format
mscclpp`` writes (`write_generated_plan` with the fabric's GPU's resident blocks and the plan-ranked fallback, as
the CLI calls it), simulated at 1 MiB, 16 MiB and 1 GiB against the fabric's exact bound and, at 1 GiB, against
the bound on the network ports the executor drives (one per GPU: `mscclpp/ports.py`; the trees are packed there);
``dumps``: the imported NCCL / RCCL
dumps H100-topology.xml and topo_8p_940.xml as 4 boxes on a rail fabric (skipped when absent), the H100 dump also with
its dual-port NICs' ports bonded (``--bond-nic-ports``: one device per NIC, the executor drives both ports),
``all``: mi250:nodes=2 too (its fallbacks take minutes each), ``h100`` / ``mi300``: that dump's rows only,
``bonded``: the bonded H100 rows only.

    python benchmarks/mscclpp.py             # both tables
    python benchmarks/mscclpp.py --quick     # skips the mi250 nodes=2 optimal-k rows (minutes of simulation each)
    python benchmarks/mscclpp.py --markdown  # tables to paste into the README
    python benchmarks/mscclpp.py --generated dumps --markdown  # table 3 only: what generate writes
    python benchmarks/mscclpp.py --generated mi300 --markdown  # table 3, the MI300 dump's rows only
    python benchmarks/mscclpp.py --generated bonded --markdown  # table 3, the H100 dump with bonded NIC ports
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from tables import show

from forestcoll.bound.optimal import optimal_bound
from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportError, ExportOptions, export_mscclpp, fitting_schedule, write_generated_plan
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.mscclpp.plan import read_plan
from forestcoll.simulate import build_network, simulate
from forestcoll.simulate.mscclpp import plan_rate, simulate_plan
from forestcoll.simulate.runtime_trees import runtime_trees
from forestcoll.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "mscclpp-plans"
SIZES = (1 << 30, 16 << 20)


def fallback(topo, coll: str, sched):
    """The fitting k ``generate --format mscclpp`` exports when ``sched`` does not fit: ranked by their plans
    (exported unchecked once each, by ``fitting_powers``) simulated, as ``write_generated_plan`` with ``plan_rate``."""
    by_plan = plan_rate(topo)
    exported: dict = {}
    return fitting_schedule(topo, coll, sched, None, lambda s, size: by_plan(exported[s.k].plan, size), "plans",
                            exported)[0]


def export_table(console: Console, markdown: bool, quick: bool) -> list:
    columns = ("topology", "collective", "k", "layout", "tbs/GPU", "ops/tb", "channels/GPU (mem+port)", "export s",
               "self-check s", "1 GiB: trees GB/s", "trees (runtime routes)", "plan", "plan/trees",
               "plan (NIC ports)", "/trees", "16 MiB: trees", "plan", "plan/trees", "plan (NIC ports)", "/trees",
               "sim s")
    rows: list[list[str]] = []
    exported = []
    for spec in ("dgx-a100:nodes=2", "mi250:nodes=2"):
        topo = load_topology(spec)
        net = build_network(topo)
        for coll in ("allgather", "reduce_scatter", "allreduce"):
            for k in (None, 1):
                sched = generate(topo, coll, k=k)
                label = f"{sched.k}" + (" (opt)" if k is None else "")
                try:
                    export_mscclpp(sched, topo, check=False)
                except ExportError as exc:
                    # over the thread-block limit: say so, and measure the way out (generate --format mscclpp picks it)
                    rows.append([spec, coll, label, "refused: " + str(exc).split(" (--max-threadblocks")[0]]
                                + ["-"] * (len(columns) - 4))
                    sched = fallback(topo, coll, sched)
                    label = f"{sched.k} (fallback)"
                if quick and spec == "mi250:nodes=2" and k is None:
                    rows.append([spec, coll, label] + ["skipped (--quick)"] + ["-"] * (len(columns) - 4))
                    continue
                t0 = time.perf_counter()
                res = export_mscclpp(sched, topo, check=False)
                t_export = time.perf_counter() - t0
                t0 = time.perf_counter()
                res_checked = export_mscclpp(sched, topo)
                t_check = time.perf_counter() - t0 - t_export
                s = res.stats
                cells = [spec, coll, label, res.layout, str(s.threadblocks_per_gpu), str(s.ops_per_threadblock),
                         f"{s.memory_channels}+{s.port_channels}", f"{t_export:.2f}", f"{t_check:.1f}"]
                t_sim = time.perf_counter()
                for size in SIZES:
                    plan = export_mscclpp(sched, topo, check=False, design_size=size).plan
                    t = simulate(net, sched, size=size).algbw_gbps
                    p = simulate_plan(net, plan, size).algbw_gbps
                    nic = simulate_plan(net, plan, size, port_transport="nic").algbw_gbps if res.inbox_port_edges \
                        else p
                    if size == SIZES[0]:
                        r = runtime_trees(net, sched, size).algbw_gbps
                        cells += [f"{t:.1f}", f"{r:.1f}"]
                    else:
                        cells += [f"{t:.1f}"]
                    cells += [f"{p:.1f}", f"{p / t:.3f}", f"{nic:.1f}" if res.inbox_port_edges else "=",
                              f"{nic / t:.3f}"]
                cells.append(f"{time.perf_counter() - t_sim:.0f}")
                rows.append(cells)
                exported.append((f"{spec} {coll} k={sched.k}", res_checked.plan))
                console.log(" ".join(cells)) if not markdown else None
    show(console, "MSCCL++ export: layout, limits, simulated algbw against the trees", columns, rows, markdown, 4)
    return exported


def interpreter_table(console: Console, markdown: bool, exported: list) -> None:
    columns = ("plan", "GPUs", "thread blocks", "size (bytes)", "calls", "ops executed", "race check s",
               "without s", "verdict")
    rows: list[list[str]] = []
    plans = [(p.name, read_plan(p)) for p in sorted(REAL.glob("*.json"))] if REAL.is_dir() else []
    nreal = len(plans)
    plans += exported
    for i, (name, plan) in enumerate(plans):
        reps = 3 if i < nreal else 1
        for launches in (1, 2):
            best = min((run_plan(plan, source=name, launches=launches) for _ in range(reps)), key=lambda r: r.seconds)
            fast = min((run_plan(plan, source=name, launches=launches, race_check=False) for _ in range(reps)),
                       key=lambda r: r.seconds)
            verdict = best.message.split(":")[0] if best.ok else best.message.split(":")[0] + " (" + (
                best.races + best.errors + [s.format() for s in best.stuck])[0][:60] + "...)"
            rows.append([name, str(plan.ngpus), str(best.threadblocks), str(best.size), str(launches),
                         str(best.ops_executed), f"{best.seconds:.3f}", f"{fast.seconds:.3f}", verdict])
    show(console, "MSCCL++ interpreter: run time (real plans best of 3) with and without race detection", columns, rows,
         markdown, 1)


def generated_table(console: Console, markdown: bool, which: str) -> None:
    """Table 3: what ``generate --format mscclpp`` writes on each fabric, its plan simulated against the bound."""
    import tempfile

    from delivered import RAIL4, dump

    from forestcoll.msccl.fabric import fabric_options

    h100 = dump("H100-topology.xml")
    fabrics = [("H100-topology.xml x4 rail", h100, RAIL4),
               ("H100-topology.xml x4 rail, bonded ports", h100, {**RAIL4, "bond_nic_ports": "1"}),
               ("topo_8p_940.xml x4 rail", dump("topo_8p_940.xml"), RAIL4)]
    if which == "all":
        fabrics.insert(0, ("mi250:nodes=2", "mi250:nodes=2", None))
    if which in ("h100", "mi300", "bonded"):  # one dump's rows only
        fabrics = {"h100": fabrics[:2], "bonded": fabrics[1:2], "mi300": fabrics[2:]}[which]
    columns = ("fabric", "collective", "GPU (resident blocks)", "bound GB/s", "driven ports' bound", "k written",
               "layout", "tbs/GPU", "1 MiB GB/s (of bound)", "16 MiB", "1 GiB", "1 GiB of driven", "generate CPU s")
    rows: list[list[str]] = []
    for label, spec, cluster in fabrics:
        if cluster is not None and not Path(spec).exists():
            continue
        topo = load_topology(spec, cluster)
        net = build_network(topo)
        opts = fabric_options(ExportOptions(), topo)
        for coll in ("allreduce", "allgather"):
            print(f"{label} {coll}: generate --format mscclpp ...", file=sys.stderr, flush=True)
            t0 = time.process_time()
            with tempfile.TemporaryDirectory() as tmp:
                sched, res = write_generated_plan(topo, coll, f"{tmp}/plan.json", options=opts, plan_rate=plan_rate(topo))
            cpu = time.process_time() - t0
            bound = float(optimal_bound(topo, coll).algbw)  # the fabric's; the trees: on the ports the executor drives
            driven = float(sched.bound_algbw)
            fell = any(note.startswith("the optimal k=") and note.split(" ", 3)[3].startswith("does not fit")
                       for note in res.notes)
            off = any(note.endswith("): taken") or "packed without the CPUs, faster than" in note for note in res.notes)
            gpu = f"{topo.gpu.name} ({opts.max_threadblocks})" if topo.gpu else f"- ({opts.max_threadblocks})"
            how = ("fallback" if fell else "opt") + (", off the CPUs" if off else "")
            cells = [label, coll, gpu, f"{bound:.1f}", f"{driven:.1f}", f"{sched.k} ({how})",
                     res.layout, str(res.stats.threadblocks_per_gpu)]
            for size, _name in ((1 << 20, "1MiB"), (16 << 20, "16MiB"), (1 << 30, "1GiB")):
                rate = simulate_plan(net, res.plan, size).algbw_gbps
                cells.append(f"{rate:.1f} ({rate / bound:.3f})")
            cells.append(f"{rate / driven:.3f}")
            cells.append(f"{cpu:.0f}")
            rows.append(cells)
            print(" ".join(cells), file=sys.stderr, flush=True)  # each row as it comes: a fallback takes minutes
    show(console, "MSCCL++ plans generate writes (cut for 1 GiB), simulated against the exact bound", columns, rows,
         markdown, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    ap.add_argument("--quick", action="store_true", help="skip the slowest simulations (mi250 nodes=2 at the optimal k)")
    ap.add_argument("--generated", choices=("dumps", "all", "h100", "mi300", "bonded"),
                    help="only table 3: the plan generate --format mscclpp writes (dumps: H100 and MI300 dumps x4 "
                         "rail, H100 also with bonded NIC ports; all: mi250:nodes=2 too; h100, mi300: that dump's "
                         "rows only; bonded: the bonded H100 rows)")
    args = ap.parse_args()
    console = Console()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average {load:.2f} ({os.cpu_count()} cores)")
    if args.generated:
        generated_table(console, args.markdown, args.generated)
        return
    exported = export_table(console, args.markdown, args.quick)
    interpreter_table(console, args.markdown, exported)


if __name__ == "__main__":
    main()
