"""Benchmark: where the time goes when deep trees pipeline a large call (mi250:nodes=2 by default).

For each schedule (the optimal one, fixed k, ``--max-height``) it prints the
exact rate (share of the bound), the tree heights, the trees per root, the
median pipeline slices per tree edge at the largest size (the model cuts each
piece into at most 16 slices: a tree that carries one piece is one stream of
<= 16 slices), the simulated algbw at each size (share of the bound), the
*pipeline efficiency* at the largest size (simulated / exact rate), and when
the busiest link sends its last byte (fraction of the simulated time: after
that only the pipelines drain).  Default simulator model throughout.

``--finer`` adds, for the largest size only, the same schedules simulated with
finer slices (256 KiB, up to 64 per piece): NOT the default model, a diagnostic
that shows how much of the gap is pipeline fill and drain (slow: about 4x the
transfers, minutes per allreduce row on 32 ranks).

    python benchmarks/pipelines.py --markdown
    python benchmarks/pipelines.py --collectives allgather --schedules opt,k1,k8,h7 --finer
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from fractions import Fraction

import numpy as np
from rich.console import Console
from tables import show

from forestcoll import collectives
from forestcoll.generate import generate
from forestcoll.pieces import cut_pieces, piece_rule, shape_trees, slices_for
from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE, simulate
from forestcoll.simulate.engine import run
from forestcoll.simulate.network import load_network
from forestcoll.simulate.trees import tree_program

SIZES = [1 << 20, 16 << 20, 1 << 30]
SCHEDULES = "opt,k1,k2,k3,k4,k8,k16,h6,h7"


def build(topo, collective: str, spec: str):
    """``opt``, ``k<K>``, ``h<H>`` or ``k<K>h<H>``: the schedule generate makes for it."""
    k = h = None
    rest = spec
    if rest.startswith("k"):
        digits = "".join(c for c in rest[1:] if c.isdigit())
        k, rest = int(digits), rest[1 + len(digits):]
    if rest.startswith("h"):
        h = int(rest[1:])
    return generate(topo, collective, k=k, max_height=h)


def slices_per_stream(sched, size: int) -> list[int]:
    """Pipeline slices each tree's edges send at ``size`` (sum over the pieces the tree carries)."""
    shapes = shape_trees(sched)
    k, pieces = cut_pieces(sched, shapes, 71 * 10**9)
    chunk = collectives.get(sched.collective).shard_bytes(size, len(sched.ranks)) / k
    count: dict[int, int] = defaultdict(int)
    for pc in pieces:
        rule, depth = piece_rule(pc.trees, collectives.get(sched.collective).rooted)  # as simulate.trees
        s = slices_for(pc.cnt * chunk, DEFAULT_SLICE, DEFAULT_MAX_SLICES, rule=rule, depth=depth)
        for t in pc.trees:
            count[id(t)] += s
    return list(count.values())


def busiest_link_end(sched, net, size: int) -> float:
    """When the most loaded link sends its last byte, as a fraction of the call's simulated time."""
    prog = tree_program(sched, net, float(size), float(DEFAULT_SLICE), DEFAULT_MAX_SLICES)
    program = prog.build()
    res = run(program, net.capacity)
    load = np.zeros(len(net.capacity))
    last = np.zeros(len(net.capacity))
    ptr, idx = program.class_ptr, program.class_idx
    for t in range(program.size):
        c = program.cls[t]
        for link in idx[ptr[c]:ptr[c + 1]]:
            load[link] += program.nbytes[t]
            last[link] = max(last[link], res.sent[t])
    busiest = int(np.argmax(load / net.capacity))
    return float(last[busiest] / res.time)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="mi250:nodes=2")
    ap.add_argument("--collectives", default="allreduce,allgather")
    ap.add_argument("--schedules", default=SCHEDULES, help=f"comma-separated (default {SCHEDULES})")
    ap.add_argument("--finer", action="store_true", help="also simulate with finer slices (diagnostic, not the model)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    console = Console()
    net = load_network(args.topology)
    topo = net.topology
    big = SIZES[-1]
    for collective in args.collectives.split(","):
        t0 = time.perf_counter()
        opt = generate(topo, collective)
        bound = Fraction(opt.algbw)
        columns = ["schedule", "k", "height max/mean", "trees per root", "slices per tree edge (1 GiB)", "exact rate"]
        columns += [f"{s >> 20} MiB" if s < 1 << 30 else "1 GiB" for s in SIZES]
        columns += ["1 GiB / exact rate", "busiest link done"]
        if args.finer:
            columns += ["1 GiB, 256 KiB x64 slices (not the model)"]
        rows = []
        for spec in args.schedules.split(","):
            try:
                sched = opt if spec == "opt" else build(topo, collective, spec)
            except Exception as exc:  # a height the search cannot reach: say so in the row
                rows.append([spec, "-", "-", "-", "-", str(exc).split(";")[0][:60]] + [""] * (len(columns) - 6))
                continue
            rate = Fraction(sched.algbw) / bound
            heights = [t.height() for t in sched.trees]
            phases = len({t.phase for t in sched.trees})
            row = [spec, str(sched.k), f"{max(heights)} / {statistics.mean(heights):.2f}",
                   f"{len(sched.trees) / phases / len(sched.ranks):.1f}",
                   f"{statistics.median(slices_per_stream(sched, big)):.0f}", f"{float(rate):.3f}"]
            got = 0.0
            for size in SIZES:
                got = simulate(net, sched, size=size).algbw_gbps
                row.append(f"{got:.1f} ({got / float(bound):.3f})")
            row.append(f"{got / float(bound) / float(rate):.3f}")
            row.append(f"{busiest_link_end(sched, net, big):.3f}")
            if args.finer:
                r = simulate(net, sched, size=big, slice_bytes=256 << 10, max_slices=64).algbw_gbps
                row.append(f"{r:.1f} ({r / float(bound):.3f})")
            rows.append(row)
        title = (f"{args.topology} {collective}: bound {float(bound):.1f} GB/s; default model unless a column says "
                 f"otherwise ({time.perf_counter() - t0:.0f} s)")
        show(console, title, columns, rows, args.markdown, 1)


if __name__ == "__main__":
    main()
