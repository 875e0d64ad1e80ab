"""Benchmark: MSCCL++ allreduce plans with equal shards and with shards weighted by box, on fabrics whose boxes differ.

For each fabric (a file, or a seed of benchmarks/fabric_sweep.py) it prints the exact equal-shard bound, the exact
rate of shards weighted 1 / (ranks in box) (``bound.shards``), and at 1 MiB, 16 MiB and 1 GiB the simulated algbw
(default model) of the best baseline and of the plan ``write_generated_plan`` writes (as ``generate --format
mscclpp``: trees packed on the executor's ports, cut for 1 GiB, layouts raced) from equal shards (before) and from
weighted shards (after), plus the weighted plan cut for each size (what ``generate --sizes`` cuts), each with its
fraction of the weighted rate.

    python benchmarks/weighted_plans.py                                  # docs/examples/uneven-boxes.yaml, seed 20
    python benchmarks/weighted_plans.py --fabrics docs/examples/uneven-boxes.yaml --seeds 10 --markdown
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parents[1]
SIZES = ((1 << 20, "1MiB"), (16 << 20, "16MiB"), (1 << 30, "1GiB"))


def measure(topo) -> list[list[str]]:
    """Rows of one fabric: bounds, baseline, equal plan, weighted plan, weighted plan cut for each size."""
    from fabric_sweep import best_baseline

    from forestcoll.bound.optimal import optimal_bound
    from forestcoll.bound.shards import box_shard_weights
    from forestcoll.msccl.fabric import fabric_options
    from forestcoll.mscclpp.export import ExportOptions, export_mscclpp, write_generated_plan
    from forestcoll.mscclpp.ports import executor_ports
    from forestcoll.shard_pieces import weighted_bound
    from forestcoll.simulate.mscclpp import plan_rate, simulate_plan
    from forestcoll.simulate.network import build_network

    net = build_network(topo)
    node = box_shard_weights(topo)
    if node is None:
        raise SystemExit(f"{topo.name}: its boxes hold as many ranks each (no weighted shards)")
    weights = tuple(w for w, c in zip(node, topo.is_compute) if c)
    equal = float(optimal_bound(topo, "allreduce").algbw)
    weighted = float(weighted_bound(topo, weights))
    opts = fabric_options(ExportOptions(), topo)
    rows = [[topo.name, "equal-shard bound", *[f"{equal:.2f}"] * 3],
            [topo.name, "weighted bound", *[f"{weighted:.2f}"] * 3]]

    def cells(rates: list[float]) -> list[str]:
        return [f"{r:.2f} ({r / weighted:.2f})" for r in rates]

    base = [best_baseline(net, "allreduce", size) for size, _ in SIZES]
    rows.append([topo.name, "best baseline", *[f"{b.algbw_gbps:.2f} {b.algorithm}" for b in base]])
    with tempfile.TemporaryDirectory() as tmp:
        for label, kw in (("plan, equal shards (before)", {}), ("plan, weighted shards (after)",
                                                                 {"shard_weights": weights})):
            t0 = time.process_time()
            sched, res = write_generated_plan(topo, "allreduce", f"{tmp}/plan.json", options=opts,
                                              plan_rate=plan_rate(topo), **kw)
            rates = [simulate_plan(net, res.plan, size).algbw_gbps for size, _ in SIZES]
            rows.append([topo.name, f"{label} k={sched.k}, {time.process_time() - t0:.0f} s CPU", *cells(rates)])
        cut = replace(opts, layout=res.layout, check=False)
        ports = executor_ports(topo).topology
        rates = [simulate_plan(net, export_mscclpp(sched, ports, replace(cut, design_size=size)).plan,
                               size).algbw_gbps for size, _ in SIZES]
        rows.append([topo.name, "weighted plan cut for the size", *cells(rates)])
    return rows


def main() -> None:
    from fabric_sweep import load_fabric, parse_seeds, random_fabric
    from rich.console import Console
    from tables import show

    from forestcoll.topology import load_topology

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fabrics", default=str(ROOT / "docs" / "examples" / "uneven-boxes.yaml"),
                    help="comma-separated topology files (default docs/examples/uneven-boxes.yaml)")
    ap.add_argument("--seeds", default="20", help="fabric_sweep seeds (default 20; '' for none)")
    ap.add_argument("--markdown", action="store_true", help="print markdown")
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load average {load:.2f}", flush=True)
    topos = [load_topology(f) for f in args.fabrics.split(",") if f]
    topos += [load_fabric(random_fabric(s)) for s in (parse_seeds(args.seeds) if args.seeds else [])]
    rows: list[list[str]] = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    for topo in topos:
        rows += measure(topo)
    show(Console(), "Allreduce MSCCL++ plans: simulated algbw GB/s (fraction of the weighted rate)",
         ["fabric", "what", *(label for _, label in SIZES)], rows, args.markdown, 2)
    print(f"({time.perf_counter() - t0:.0f} s wall, {time.process_time() - cpu0:.0f} s CPU)")


if __name__ == "__main__":
    main()
