"""Benchmark: what each MSCCL layout choice buys, against the trees' own simulated rate.

    python benchmarks/msccl_layout.py                                   # dgx-a100:nodes=2 allreduce
    python benchmarks/msccl_layout.py mi250:nodes=2 allreduce 1,16      # sizes in MiB

Prints a markdown table (docs/msccl.md has one): algbw in GB/s and, in
brackets, the ratio to the simulated trees.  Same simulator, default model.
"""

from __future__ import annotations

import sys

from forestcoll.generate import generate
from forestcoll.msccl.export import export_msccl
from forestcoll.simulate.core import simulate
from forestcoll.simulate.msccl import simulate_msccl
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

VARIANTS = [("tree, 71-chunk pieces (before)", {"layout": "tree", "max_cnt": 71}),
            ("tree, finer pieces", {"layout": "tree"}),
            ("stage, 71-chunk pieces", {"layout": "stage", "max_cnt": 71}),
            ("stage, finer pieces (default)", {"layout": "stage"})]


def main() -> None:
    spec = sys.argv[1] if len(sys.argv) > 1 else "dgx-a100:nodes=2"
    coll = sys.argv[2] if len(sys.argv) > 2 else "allreduce"
    sizes = [int(x) << 20 for x in (sys.argv[3] if len(sys.argv) > 3 else "1,16,1024").split(",")]
    topo = load_topology(spec)
    net = build_network(topo)
    sched = generate(topo, coll)
    trees = {z: simulate(net, sched, size=z).algbw_gbps for z in sizes}
    print(f"{spec} {coll}, k={sched.k}, bound {float(sched.bound_algbw):.1f} GB/s\n")
    print("| layout | channels | " + " | ".join(f"{z >> 20} MiB" for z in sizes) + " |")
    print("|---|---:|" + "---:|" * len(sizes))
    print("| the trees (simulated schedule) | - | " + " | ".join(f"{trees[z]:.1f}" for z in sizes) + " |", flush=True)
    for name, kw in VARIANTS:
        res = export_msccl(sched, **kw)
        cells = []
        for z in sizes:
            x = simulate_msccl(res.algo, net, z).algbw_gbps
            cells.append(f"{x:.1f} ({x / trees[z]:.2f})")
        print(f"| {name} | {res.channels} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
