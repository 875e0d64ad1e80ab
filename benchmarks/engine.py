"""Benchmark: the simulator engine's rate solving, split by connected component against the whole mix.

For each case one program is built, then run twice on the same network: with
the default engine (fair shares solved per connected component of the active
classes, cached per component) and, as the baseline measured in the same run,
with ``split=False`` (the whole mix of active classes solved at every change,
cached by mix: the engine before the split).  The table gives CPU seconds of
each run, the ratio, the solver calls of each, and the relative gap between
the two simulated times (the tests hold it under 1e-9).

    python benchmarks/engine.py             # the quick cases (~1 min on 2 cores)
    python benchmarks/engine.py --large     # also k = 64 at 1 GiB (the whole-mix run alone takes ~3 min)
    python benchmarks/engine.py --markdown  # a markdown table
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from tables import show

from forestcoll.generate import generate
from forestcoll.simulate import baselines
from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE
from forestcoll.simulate.engine import run
from forestcoll.simulate.network import build_network
from forestcoll.simulate.trees import tree_program
from forestcoll.topology import load_topology

MiB, GiB = 1 << 20, 1 << 30
QUICK = [("mi250:nodes=2", 64, 16 * MiB), ("mi250:nodes=2", 1, GiB), ("dgx-a100:nodes=2", None, GiB),
         ("dgx-a100:nodes=2", "ring", 16 * MiB)]
LARGE = [("mi250:nodes=2", 64, GiB)]


def cpu_run(program, capacity, split: bool):
    t0 = time.process_time()
    res = run(program, capacity, split=split)
    return time.process_time() - t0, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--large", action="store_true", help="also the k = 64 schedule at 1 GiB (minutes)")
    args = ap.parse_args()
    rows = []
    for spec, what, size in QUICK + (LARGE if args.large else []):
        topo = load_topology(spec)
        net = build_network(topo)
        slicing = (float(DEFAULT_SLICE), DEFAULT_MAX_SLICES)
        if isinstance(what, str):
            program = baselines.BASELINES[what](net, "allreduce", float(size), slicing).build()
            label = what
        else:
            sched = generate(topo, "allreduce", k=what)
            program = tree_program(sched, net, float(size), *slicing).build()
            label = f"forestcoll k={sched.k}"
        t_split, split = cpu_run(program, net.capacity, True)
        t_whole, whole = cpu_run(program, net.capacity, False)
        gap = abs(split.time - whole.time) / whole.time
        rows.append([spec, f"allreduce {label}", f"{size // MiB} MiB", str(program.size), str(split.events),
                     f"{t_whole:.2f}", f"{t_split:.2f}", f"{t_whole / t_split:.1f}x", str(whole.recomputes),
                     str(split.recomputes), f"{gap:.1e}"])
    show(Console(width=200), "Engine: CPU s of one run, whole-mix solve (before) vs per component (now)",
         ("topology", "algorithm", "size", "transfers", "events", "whole mix s", "split s", "speed-up",
          "whole-mix solves", "component solves", "time gap"), rows, args.markdown, 3)


if __name__ == "__main__":
    main()
