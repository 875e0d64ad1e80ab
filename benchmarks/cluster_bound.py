"""Benchmark: ``forestcoll bound`` on huge box clusters, answered without building the fabric (bound/cluster.py).

Every row is a whole process, start-up included, with its own peak RSS
(``os.wait4``):

* ``cluster``: ``forestcoll bound SPEC`` (the CLI takes the cluster path for a box family
  with >= 2 boxes on a rail or switch fabric);
* ``materialised``: the same report from the built fabric (``bound_report(load_topology(SPEC))``
  printed the same way), the baseline, run only where the fabric can be built;
  *vs materialised* is its wall time over the cluster row's, measured in the same run,
  and *same output* says whether the two printed texts are byte for byte equal.

    python benchmarks/cluster_bound.py            # up to 1,000,000 boxes (baselines up to 8,000 GPUs)
    python benchmarks/cluster_bound.py --quick    # two small cases
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = [  # (spec, extra flags, run the materialised baseline)
    ("dgx-a100:nodes=16", (), True),
    ("mi250:nodes=64", (), True),
    ("dgx-a100:nodes=128", (), True),
    ("dgx-a100:nodes=1000", (), True),
    ("dgx-a100:nodes=100000", (), False),
    ("dgx-a100:nodes=100000", ("--json",), False),
    ("mi250:nodes=100000", (), False),
    ("dgx-h100:nodes=100000,fabric=switch", (), False),
    ("dgx-a100:nodes=1000000", (), False),
]
QUICK = [("dgx-a100:nodes=16", (), True), ("dgx-a100:nodes=100000", (), False)]

MATERIALISED = """
import sys
from forestcoll.bound.report import bound_report
from forestcoll.cli import render
from forestcoll.topology import load_topology
topo = load_topology(sys.argv[1])
render.print_bound(bound_report(topo, "allreduce"), topo)
"""


def run(args: list[str], timeout: float = 600) -> tuple[float, float, int, str, int]:
    """(wall seconds, peak RSS MB, exit status, stdout's first MB, stdout bytes) of one child process.

    Only the first MB of the output is read: a child forked from a large parent would report the parent's
    pages in its peak RSS."""
    with tempfile.TemporaryFile("w+") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                proc.kill()
            time.sleep(0.005)
        wall = time.perf_counter() - t0
        size = out.seek(0, os.SEEK_END)
        out.seek(0)
        text = out.read(1 << 20)
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), text, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two small cases")
    opts = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f} (1-minute average; timings are noisy above the core count)\n")
    print("| spec | flags | GPUs | path | wall s | peak RSS MB | output MB | vs materialised | same output |")
    print("|---|---|---:|---|---:|---:|---:|---:|---|")
    for spec, flags, baseline in QUICK if opts.quick else CASES:
        wall, rss, code, text, size = run([sys.executable, "-m", "forestcoll", "bound", spec, *flags])
        gpus = next((line.split("(")[1].split()[0] for line in text.splitlines() if line.startswith("topology")), "?")
        if flags:
            gpus = text.split('"compute_nodes": ')[1].split(",")[0] if code == 0 else "?"
        row = f"| {spec} | {' '.join(flags) or '-'} | {gpus} | cluster | {wall:.2f} | {rss:.0f} | {size / 1e6:.2f}"
        if not baseline:
            print(row + " | - | - |" + ("" if code == 0 else f" (exit {code})"))
            continue
        b_wall, b_rss, b_code, b_text, b_size = run([sys.executable, "-c", MATERIALISED, spec])
        print(row + f" | {b_wall / wall:.1f}x | {'yes' if (b_text, b_size) == (text, size) and code == b_code == 0 else 'NO'} |")
        print(f"| {spec} | - | {gpus} | materialised | {b_wall:.2f} | {b_rss:.0f} | {b_size / 1e6:.2f} | 1.0x | |")
    print(f"\nload after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
