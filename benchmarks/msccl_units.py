"""Benchmark: how the MSCCL kernel's unit decides a file's rate on deep trees (what-if rows included).

    python benchmarks/msccl_units.py                                   # mi250:nodes=2 allreduce, k=2 and 8, 1 GiB
    python benchmarks/msccl_units.py mi250:nodes=2 allreduce --k 2,8 --splits 4,8,16 --size 1024
    python benchmarks/msccl_units.py dgx-a100:nodes=2 allreduce --k 8 --splits 8

msccl-executor-nccl moves a step of ``cnt`` MSCCL chunks in slices of ``cnt`` x 1 MiB while a chunk holds 2 MiB
or more per loop iteration (MSCCL_CHUNKSTEPS x a 512 KiB step, two slices; docs/simulate.md "How messages are
cut"), so a tree whose range of data is R MiB crosses each of its stages in at most R *units*, however its
range is cut into steps; finer units need chunks below 2 MiB (``split``), where a range cut into p steps moves
in 2p units, and a thread block holds p steps for every range it forwards.  For each k the table gives the
trees (simulated schedule), the file as exported (default options), then what-if files that cut every range
into s pieces of s chunks (``split=s, per_tree=s``) for a runtime *without* the 64-step limit: their steps per
thread block say what the kernel would have to accept.  Same simulator, default model; algbw GB/s, in brackets
the ratio to the trees and to the exact bound.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from forestcoll.generate import generate
from forestcoll.msccl.export import ExportError, ExportOptions, export_msccl
from forestcoll.msccl.lint import RUNTIMES
from forestcoll.pieces import RUNTIME_SLICE_BYTES, cut_pieces, shape_trees, slices_for
from forestcoll.simulate.core import simulate
from forestcoll.simulate.msccl import simulate_msccl
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

WHAT_IF = "what-if: no step limit"


def units(sched, algo, split: int, size: int) -> tuple[int, int]:
    """(unit in KiB: the largest step's bytes per kernel slice, units the smallest tree range moves in)."""
    nchunks = algo.nchunksperloop
    iterations = slices_for(size / nchunks, RUNTIME_SLICE_BYTES, None, rule="ring")
    cnt = max(st.cnt for g in algo.gpus for tb in g.tbs for st in tb.steps)
    unit = cnt * size / nchunks / iterations
    _k, whole = cut_pieces(sched, shape_trees(sched), 1 << 40, split)
    smallest = min(pc.cnt for pc in whole) * size / nchunks
    return round(unit / 1024), max(1, round(smallest / unit))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology", nargs="?", default="mi250:nodes=2")
    ap.add_argument("collective", nargs="?", default="allreduce")
    ap.add_argument("--k", default="2,8", help="comma-separated chunks per shard (default 2,8)")
    ap.add_argument("--splits", default="8,16", help="what-if splits s (pieces per range = s), comma-separated")
    ap.add_argument("--size", type=int, default=1024, help="call size in MiB (default 1024)")
    ap.add_argument("--nodes", help="boxes, for a topology file")
    ap.add_argument("--fabric", help="fabric between boxes, for a topology file")
    args = ap.parse_args()
    size = args.size << 20
    extra = {key: val for key, val in (("nodes", args.nodes), ("fabric", args.fabric)) if val} or None
    topo = load_topology(args.topology, extra)
    net = build_network(topo)
    # the what-if runtime lives only while this script runs (the exporter looks limits up by name)
    RUNTIMES[WHAT_IF] = replace(RUNTIMES["msccl-executor-nccl"], name=WHAT_IF, steps_per_tb=1 << 20)
    label = args.topology.rsplit("/", 1)[-1] + (f" x{args.nodes} {args.fabric}" if extra else "")
    print(f"{label} {args.collective} at {args.size} MiB\n")
    print("| k | file | unit KiB | units (smallest tree) | tbs/GPU | steps/tb | fits | algbw GB/s (of trees; of bound) |")
    print("|---:|---|---:|---:|---:|---:|---|---|")
    t0 = time.process_time()
    try:
        for k in (int(x) for x in args.k.split(",")):
            sched = generate(topo, args.collective, k=k)
            bound = float(sched.bound_algbw)
            trees = simulate(net, sched, size=size).algbw_gbps
            print(f"| {sched.k} | the trees (exact {float(sched.algbw):.1f}, bound {bound:.1f}) | | | | | | "
                  f"{trees:.1f} (1.00; {trees / bound:.3f}) |", flush=True)
            rows = [("as exported", ExportOptions(), 1)]
            rows += [(f"s={s}, {s} pieces per range", ExportOptions(runtime=WHAT_IF, split=s, per_tree=s), s)
                     for s in (int(x) for x in args.splits.split(","))]
            for name, opts, split in rows:
                try:
                    res = export_msccl(sched, opts)
                except ExportError as exc:
                    print(f"| {sched.k} | {name}: {exc} | | | | | | |", flush=True)
                    continue
                unit, count = units(sched, res.algo, split, size)
                rate = simulate_msccl(res.algo, net, size).algbw_gbps
                fits = "yes" if res.fits("msccl-executor-nccl") else "no"
                print(f"| {sched.k} | {name} | {unit} | {count} | {res.tbs_per_gpu} | {res.steps_per_tb} | {fits} | "
                      f"{rate:.1f} ({rate / trees:.2f}; {rate / bound:.3f}) |", flush=True)
    finally:
        del RUNTIMES[WHAT_IF]
    print(f"\n({time.process_time() - t0:.0f} s CPU)")


if __name__ == "__main__":
    main()
