"""Benchmark: how fast the simulator runs, and what it says forestcoll gains over ring and double binary tree.

Table 1 (simulator speed): wall time of one simulated 1 GiB call, with the
default weighted max-min sharing and, as the baseline measured in the same
run, the faster per-link sharing; the issue's yardstick is the optimal
allreduce on mi250:nodes=2 (a few seconds at most).

Table 2 (speed-up at 1 GiB): simulated algbw of forestcoll's optimal schedule,
of the best of forestcoll's schedules over k (what `generate --sizes` would
pick), of NCCL-style rings and of the double binary tree, for dgx-a100 nodes=2
and mi250 nodes=2; the exact bound alongside.  The paper reports up to +52 %
over NCCL / RCCL measured on real clusters.

    python benchmarks/simulate.py             # both tables
    python benchmarks/simulate.py --markdown  # markdown tables for the README
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from tables import show

from forestcoll.generate import generate
from forestcoll.simulate import simulate
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

GiB = 1 << 30


def timed(net, what, collective, fairness):
    t0 = time.perf_counter()
    res = simulate(net, what, collective, GiB, fairness=fairness)
    return time.perf_counter() - t0, res


def speed_table(console: Console, markdown: bool) -> None:
    rows = []
    cases = [("mi250:nodes=2", "allreduce", None), ("mi250:nodes=2", "allreduce", 1), ("dgx-a100:nodes=2", "allreduce", None),
             ("mi250:nodes=2", "allreduce", "ring"), ("mi250:nodes=2", "allreduce", "double-binary-tree"),
             ("dgx-a100:nodes=2", "allreduce", "ring")]
    nets = {}
    for spec, coll, what in cases:
        topo = nets.setdefault(spec, load_topology(spec))
        net = build_network(topo)
        algo = what if isinstance(what, str) else generate(topo, coll, k=what)
        label = what if isinstance(what, str) else f"forestcoll k={algo.k}"
        t_mm, r = timed(net, algo, coll, "max-min")
        t_link, r_link = timed(net, algo, coll, "link")
        rows.append([spec, f"{coll} {label}", str(r.transfers), str(r.events), f"{t_mm:.2f}", f"{t_link:.2f}",
                     f"{t_mm / t_link:.1f}x", f"{r.algbw_gbps:.1f}", f"{r_link.algbw_gbps:.1f}"])
    show(console, "Simulator speed: one 1 GiB call (2-core machine)",
         ("topology", "algorithm", "transfers", "events", "max-min s", "link s", "max-min / link", "algbw max-min",
          "algbw link"), rows, markdown, 2)


def speedup_table(console: Console, markdown: bool) -> None:
    rows = []
    for spec in ("dgx-a100:nodes=2", "mi250:nodes=2"):
        topo = load_topology(spec)
        net = build_network(topo)
        for coll in ("allreduce", "allgather"):
            opt = generate(topo, coll)
            fc = simulate(net, opt, size=GiB)
            best = fc
            for k in (1, 2, 4, 8, 16, 32):
                if k < opt.k:
                    r = simulate(net, generate(topo, coll, k=k), size=GiB)
                    if r.algbw_gbps > best.algbw_gbps:
                        best = r
            ring = simulate(net, "ring", coll, GiB)
            dbt = simulate(net, "double-binary-tree", coll, GiB) if coll == "allreduce" else None
            rows.append([
                spec, coll, f"{float(opt.bound_algbw):.1f}", f"{fc.algbw_gbps:.1f}",
                f"{best.algbw_gbps:.1f} (k={best.extra.get('k')})", f"{ring.algbw_gbps:.1f}",
                f"{dbt.algbw_gbps:.1f}" if dbt else "-",
                f"{(best.algbw_gbps / ring.algbw_gbps - 1) * 100:+.0f}%",
                f"{(best.algbw_gbps / dbt.algbw_gbps - 1) * 100:+.0f}%" if dbt else "-",
            ])
    show(console, "Simulated algbw at 1 GiB, GB/s (forestcoll best = best k; speed-ups of forestcoll best)",
         ("topology", "collective", "exact bound", "forestcoll (optimal k)", "forestcoll best", "ring",
          "double binary tree", "vs ring", "vs tree"), rows, markdown, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print markdown tables")
    args = ap.parse_args()
    console = Console(width=180)
    speed_table(console, args.markdown)
    speedup_table(console, args.markdown)


if __name__ == "__main__":
    main()
