"""Benchmark: MSCCL files at the runtime's buffer (NCCL_BUFFSIZE), with a per-slice cost (a what-if's sensitivity).

    python benchmarks/msccl_buffer.py mi250:nodes=2 allreduce a.xml b.xml
    python benchmarks/msccl_buffer.py mi250:nodes=2 allgather a.xml --buffers 4MiB,512KiB --costs 0,1,2 --sizes 1MiB,1GiB
    python benchmarks/msccl_buffer.py ../shared/data/topo_8p_940.xml allreduce a.xml --nodes 4 --fabric rail

The MSCCL kernel moves a step in slices of the buffer / 4 (``stepSize = buffSize / NCCL_STEPS``, two steps a
slice), so ``NCCL_BUFFSIZE`` sets the unit every file pipelines in (docs/msccl.md, "Runtime buffer").  For each
file, buffer and per-slice cost the table gives the simulated algbw (GB/s) at each size: the default model with
``--slice`` = buffer / 4, and every slice a thread block sends charged the cost (``simulate_msccl``'s
``slice_cost_s``: 0 is the default model), then the ratio to the exact bound at the last size.
"""

from __future__ import annotations

import argparse
import time

from forestcoll.bound.optimal import optimal_bound
from forestcoll.msccl.buffer import buffer_slice
from forestcoll.msccl.ir import read_algo
from forestcoll.simulate.msccl import simulate_msccl
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology
from forestcoll.units import format_size, parse_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology")
    ap.add_argument("collective")
    ap.add_argument("files", nargs="+", help="MSCCL XML files for that topology")
    ap.add_argument("--buffers", default="4MiB,1MiB,512KiB", help="NCCL_BUFFSIZE values (default 4MiB,1MiB,512KiB)")
    ap.add_argument("--costs", default="0,1,2", help="per-slice costs in microseconds (default 0,1,2)")
    ap.add_argument("--sizes", default="1MiB,16MiB,1GiB", help="call sizes (default 1MiB,16MiB,1GiB)")
    ap.add_argument("--nodes", help="boxes, for a topology file")
    ap.add_argument("--fabric", help="fabric between boxes, for a topology file")
    args = ap.parse_args()
    extra = {key: val for key, val in (("nodes", args.nodes), ("fabric", args.fabric)) if val} or None
    topo = load_topology(args.topology, extra)
    net = build_network(topo)
    bound = float(optimal_bound(topo, args.collective).algbw)
    buffers = [parse_size(x) for x in args.buffers.split(",")]
    costs = [float(x) for x in args.costs.split(",")]
    sizes = [parse_size(x) for x in args.sizes.split(",")]
    label = args.topology.rsplit("/", 1)[-1] + (f" x{args.nodes} {args.fabric}" if extra else "")
    print(f"{label} {args.collective}: exact bound {bound:.1f} GB/s; algbw GB/s at "
          f"{' / '.join(format_size(x) for x in sizes)} (of the bound at {format_size(sizes[-1])})\n")
    print("| file | NCCL_BUFFSIZE | " + " | ".join(f"{c:g} us per slice" for c in costs) + " |")
    print("|---|---|" + "---|" * len(costs))
    t0 = time.process_time()
    for path in args.files:
        algo, _text = read_algo(path)
        for buffsize in buffers:
            cells = []
            for cost in costs:
                rates = [simulate_msccl(algo, net, x, slice_bytes=buffer_slice(buffsize),
                                        slice_cost_s=cost * 1e-6).algbw_gbps for x in sizes]
                cells.append(" / ".join(f"{r:.1f}" for r in rates) + f" ({rates[-1] / bound:.3f})")
            print(f"| {path.rsplit('/', 1)[-1]} | {format_size(buffsize)} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n({time.process_time() - t0:.0f} s CPU)")


if __name__ == "__main__":
    main()
