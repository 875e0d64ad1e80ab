"""Benchmark: fabrics as users bring them (JSON files, shuffled and renamed) and at scale (2,048 / 4,096 GPUs).

Every measurement is a whole process (``forestcoll generate ... -o FILE`` then
``forestcoll verify FILE``), start-up included, with its wall time and its own
peak RSS (``os.wait4`` of that child).  For each fabric three forms run:

* ``built-in``: the catalog name (declared symmetries);
* ``json``: ``forestcoll topo export NAME --no-symmetries -o x.json`` (same node order, no symmetries);
* ``shuffled``: the same JSON with nodes and links in a random order and every node renamed
  (:func:`forestcoll.topology.model.shuffled`, seed 1).

*vs built-in* is the form's generate time over the built-in's, measured in the
same run (target: <= 2x up to 1,024 GPUs).  ``--big`` adds dgx-a100:nodes=256
and nodes=512 (2,048 and 4,096 GPUs; targets < 30 s / 1.5 GB and < 2 min / 4 GB
for generate + verify) under an address-space limit (``--mem-limit-gb``,
default 8), and ``bound dgx-a100:nodes=100000``.  Prints a markdown table.

    python benchmarks/scale.py              # catalog fabrics up to 1,024 GPUs, three forms each
    python benchmarks/scale.py --quick      # three small fabrics
    python benchmarks/scale.py --cases dgx-a100:nodes=128 --collective allgather   # one fabric, one collective
    python benchmarks/scale.py --big        # add 2,048 / 4,096 GPUs and the 100,000-box bound
    python benchmarks/scale.py --big-only   # only the 2,048 / 4,096 GPU rows
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORESTCOLL = [sys.executable, "-m", "forestcoll"]

CASES = ["dgx-a100:nodes=4", "mi250:nodes=2", "hgx-h100:nodes=8", "mi300x:nodes=8", "torus:dims=4x4x4",
         "switch:n=256", "dgx-a100:nodes=32", "dgx-h100:nodes=32", "dgx-a100:nodes=128"]
QUICK = ["dgx-a100:nodes=4", "mi250:nodes=2", "switch:n=64"]
BIG = ["dgx-a100:nodes=256", "dgx-a100:nodes=512"]


def run_measured(args: list[str], timeout: float, mem_gb: float | None = None) -> dict:
    """Run one command: wall seconds (start-up included), the child's own peak RSS (``os.wait4``: each child
    measured alone), exit status, stdout and the last stderr line."""
    def limit() -> None:
        if mem_gb:
            cap = int(mem_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err, text=True, preexec_fn=limit, cwd=ROOT)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                return {"seconds": None, "cpu": None, "rss_mb": None, "rc": "timeout", "err": f"> {timeout:.0f} s", "out": ""}
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        lines = err.read().strip().splitlines()
        return {"seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
                "rc": proc.returncode, "out": out.read(), "err": lines[-1] if lines else ""}


def forms(spec: str, tmp: Path) -> list[tuple[str, str]]:
    """(form, topology argument) for the built-in, its plain JSON export and the shuffled, renamed JSON."""
    from forestcoll.topology import load_topology, write_topology
    from forestcoll.topology.model import shuffled

    plain = tmp / f"{spec.replace(':', '_').replace(',', '_')}.json"
    subprocess.run([*FORESTCOLL, "topo", "export", spec, "--no-symmetries", "-o", str(plain)], check=True,
                   capture_output=True, cwd=ROOT)
    mixed = plain.with_name(plain.stem + ".shuffled.json")
    write_topology(shuffled(load_topology(spec), 1), str(mixed), symmetries=False)
    return [("built-in", spec), ("json", str(plain)), ("shuffled", str(mixed))]


def gpus(spec: str) -> int:
    from forestcoll.topology import load_topology

    return load_topology(spec).num_compute


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def measure(spec: str, topo_arg: str, tmp: Path, timeout: float, mem_gb: float | None,
            collective: str | None = None) -> dict:
    out = tmp / "sched.json"
    if out.exists():
        out.unlink()
    extra = ["-c", collective] if collective else []
    gen = run_measured([*FORESTCOLL, "generate", topo_arg, *extra, "-o", str(out)], timeout, mem_gb)
    row = {"generate": gen}
    if gen["rc"] == 0 and out.exists():
        row["size_mb"] = out.stat().st_size / 2**20
        head = out.read_text()[:200]
        row["version"] = "v2" if '"version": 2' in head else "v1"
        row["verify"] = run_measured([*FORESTCOLL, "verify", str(out)], timeout, mem_gb)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="three small fabrics")
    ap.add_argument("--big", action="store_true", help="add 2,048 and 4,096 GPUs and the 100,000-box bound")
    ap.add_argument("--cases", nargs="*", help="topology specs to run instead of the default list")
    ap.add_argument("--big-only", action="store_true",
                    help="only the 2,048 and 4,096 GPU rows (no catalog fabrics, no 100,000-box bound)")
    ap.add_argument("--big-collectives", nargs="+", default=["allgather"],
                    help="collectives of the 2,048 / 4,096 GPU rows (default: allgather, the issue's target; the "
                         "catalog rows use generate's default, allreduce)")
    ap.add_argument("--collective", help="collective of the catalog rows (default: generate's default, allreduce)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per process (default 600)")
    ap.add_argument("--mem-limit-gb", type=float, default=8, help="address-space limit for --big processes")
    args = ap.parse_args()
    cases = [] if args.big_only else args.cases or (QUICK if args.quick else CASES)
    print(f"load before: {os.getloadavg()[0]:.2f} (1-minute average; timings are noisy above the core count)\n")
    print("| topology | GPUs | form | generate s | generate CPU s | generate RSS MB | vs built-in | vs built-in, CPU "
          "| schedule | file MB | verify s | verify RSS MB |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for spec in cases:
            base = base_cpu = None
            for form, topo_arg in forms(spec, tmp):
                row = measure(spec, topo_arg, tmp, args.timeout, None, args.collective)
                g = row["generate"]
                if form == "built-in":
                    base, base_cpu = g["seconds"], g["cpu"]
                ratio = f"{g['seconds'] / base:.2f}x" if g["seconds"] and base else "-"
                ratio_cpu = f"{g['cpu'] / base_cpu:.2f}x" if g["cpu"] and base_cpu else "-"
                v = row.get("verify", {})
                status = row.get("version", g["err"][:60] if g["rc"] != 0 else "-")
                print(f"| {spec} | {gpus(spec)} | {form} | {fmt(g['seconds'])} | {fmt(g['cpu'])} | {fmt(g['rss_mb'], 0)} "
                      f"| {ratio} | {ratio_cpu} "
                      f"| {status} | {fmt(row.get('size_mb'))} | {fmt(v.get('seconds'))} | {fmt(v.get('rss_mb'), 0)} |",
                      flush=True)
        if args.big or args.big_only:
            for spec, collective in [(s, c) for c in args.big_collectives for s in BIG]:
                row = measure(spec, spec, tmp, args.timeout, args.mem_limit_gb, collective)
                g = row["generate"]
                v = row.get("verify", {})
                status = row.get("version", (g["err"] or str(g["rc"]))[:60] if g["rc"] != 0 else "-")
                print(f"| {spec} | {gpus(spec)} | built-in, {collective} | {fmt(g['seconds'])} | {fmt(g['cpu'])} "
                      f"| {fmt(g['rss_mb'], 0)} | - | - "
                      f"| {status} | {fmt(row.get('size_mb'))} | {fmt(v.get('seconds'))} | {fmt(v.get('rss_mb'), 0)} |",
                      flush=True)
        if args.big:
            b = run_measured([*FORESTCOLL, "bound", "dgx-a100:nodes=100000"], args.timeout, args.mem_limit_gb)
            result = next((line for line in b["out"].splitlines() if line.startswith("optimal algbw")), b["err"])
            print(f"\n`forestcoll bound dgx-a100:nodes=100000`: {fmt(b['seconds'])} s, {fmt(b['rss_mb'], 0)} MB, "
                  f"exit {b['rc']}: {result}")
    print(f"\nload after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
