"""Benchmark: what each MSCCL layout choice buys, against the trees' own simulated rate.

    python benchmarks/msccl_layout.py                                   # dgx-a100:nodes=2 allreduce
    python benchmarks/msccl_layout.py mi250:nodes=2 allreduce 1,16      # sizes in MiB
    python benchmarks/msccl_layout.py ../shared/data/nccl-topo/H100-topology.xml allreduce 16,1024 --nodes 4 \\
        --fabric rail --k 4                                             # a dump as 4 boxes, a given k

Prints a markdown table (docs/msccl.md has one): algbw in GB/s and, in
brackets, the ratio to the simulated trees of the same schedule.  Same
simulator, default model.  Each row adds one choice to the row above it.
"""

from __future__ import annotations

import argparse
import time

from forestcoll.generate import generate
from forestcoll.msccl.export import ExportError, export_msccl
from forestcoll.simulate.core import simulate
from forestcoll.simulate.msccl import simulate_msccl
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

VARIANTS = [("tree, 71-chunk pieces (the first layout)", {"layout": "tree", "max_cnt": 71, "order": "tree",
                                                          "ports": False}),
            ("tree, finer pieces", {"layout": "tree", "order": "tree", "ports": False}),
            ("stage, 71-chunk pieces", {"layout": "stage", "max_cnt": 71, "order": "tree", "ports": False}),
            ("stage, finer pieces", {"layout": "stage", "order": "tree", "ports": False}),
            ("+ steps in the trees' progress order", {"layout": "stage", "ports": False}),
            ("+ a channel per port (default)", {})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?", default="dgx-a100:nodes=2")
    ap.add_argument("collective", nargs="?", default="allreduce")
    ap.add_argument("sizes", nargs="?", default="1,16,1024", help="comma-separated MiB (default 1,16,1024)")
    ap.add_argument("--nodes", help="boxes, for a topology file")
    ap.add_argument("--fabric", help="fabric between boxes, for a topology file")
    ap.add_argument("--k", type=int, help="chunks per shard (default: the optimal k)")
    args = ap.parse_args()
    sizes = [int(x) << 20 for x in args.sizes.split(",")]
    extra = {key: val for key, val in (("nodes", args.nodes), ("fabric", args.fabric)) if val} or None
    topo = load_topology(args.topology, extra)
    net = build_network(topo)
    sched = generate(topo, args.collective, k=args.k)
    trees = {z: simulate(net, sched, size=z).algbw_gbps for z in sizes}
    label = args.topology.rsplit("/", 1)[-1] + (f" x{args.nodes} {args.fabric}" if extra else "")
    print(f"{label} {args.collective}, k={sched.k}, bound {float(sched.bound_algbw):.1f} GB/s\n")
    print("| layout | channels | tbs/GPU | steps/tb | " + " | ".join(f"{z >> 20} MiB" for z in sizes) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(sizes))
    print("| the trees (simulated schedule) | - | - | - | " + " | ".join(f"{trees[z]:.1f}" for z in sizes) + " |",
          flush=True)
    t0 = time.process_time()
    for name, kw in VARIANTS:
        try:
            res = export_msccl(sched, **kw)
        except ExportError as exc:
            print(f"| {name} | does not fit: {exc} |" + " |" * (len(sizes) + 2), flush=True)
            continue
        cells = []
        for z in sizes:
            x = simulate_msccl(res.algo, net, z).algbw_gbps
            cells.append(f"{x:.1f} ({x / trees[z]:.2f})")
        print(f"| {name} | {res.channels} | {res.tbs_per_gpu} | {res.steps_per_tb} | " + " | ".join(cells) + " |",
              flush=True)
    print(f"\n({time.process_time() - t0:.0f} s CPU for the files)")


if __name__ == "__main__":
    main()
