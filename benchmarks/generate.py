"""Benchmark: exact bound and whole schedule generation on DGX-A100 and MI250 clusters.

For each topology it measures, in a fresh process (imports warmed up first):
the bound alone, the whole optimal generation (bound, k search, switch removal,
tree packing, routing), the schedule's k, trees and height, and whether the
independent verifier certifies it optimal.  As a baseline measured in the same
run it times the same generation with symmetry turned off (``--no-symmetry``).
The public reference implementation's recorded times (../shared/reference, same
machine class) are shown next to them when that file is present.

    python benchmarks/generate.py                  # the full table (takes a few minutes)
    python benchmarks/generate.py --quick          # small cases only
    python benchmarks/generate.py --timeout 600    # per-case limit for the largest cases
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference" / "reference-results.json"

CASES = [("dgx-a100", n) for n in (1, 2, 4, 8, 16, 32, 64, 128)] + [("mi250", n) for n in (1, 2, 4, 8)]
QUICK = [("dgx-a100", 1), ("dgx-a100", 2), ("dgx-a100", 4), ("mi250", 1), ("mi250", 2)]

CHILD = r"""
import json, sys, time
from forestcoll import generate, load_topology, optimal_bound, verify
spec, symmetry, do_verify = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
generate(load_topology("ring:n=4"), "allgather")            # warm up imports and caches
topo = load_topology(spec)
t0 = time.perf_counter(); bound = optimal_bound(topo, symmetry=symmetry); tb = time.perf_counter() - t0
t0 = time.perf_counter(); sched = generate(topo, "allgather", symmetry=symmetry); tg = time.perf_counter() - t0
out = {"bound_s": tb, "generate_s": tg, "k": sched.k, "trees": len(sched.trees), "height": sched.max_height(),
       "algbw": str(sched.algbw), "bound": str(bound.algbw)}
if do_verify:
    t0 = time.perf_counter(); report = verify(sched, topo); out["verify_s"] = time.perf_counter() - t0
    out["certified"] = report.certified_optimal
print(json.dumps(out))
"""


def measure(spec: str, symmetry: bool, timeout: float, verify: bool) -> dict:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, spec, "1" if symmetry else "0", "1" if verify else "0"],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def reference_times() -> dict[tuple[str, int], float]:
    if not REFERENCE.exists():
        return {}
    data = json.loads(REFERENCE.read_text())
    return {(e["topology"], e["nodes"]): e["seconds"] for e in data.get("optimal", [])}


def fmt_s(x: float | None) -> str:
    return "-" if x is None else (f"{x:.3f}" if x < 10 else f"{x:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only the small cases")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed per case (default 600)")
    ap.add_argument("--baseline-timeout", type=float, default=120, help="seconds allowed per no-symmetry baseline")
    ap.add_argument("--max-gpus", type=int, default=1024, help="skip cases with more GPUs")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    cases = QUICK if args.quick else CASES
    ref = reference_times()
    console = Console(width=160)
    table = Table(title="forestcoll: optimal allgather schedule generation (seconds, one process per case)")
    for col in ("topology", "GPUs", "bound s", "generate s", "k", "trees", "height", "certified",
                "no-sym s", "sym speed-up", "ref s (recorded)", "vs ref"):
        table.add_column(col, justify="right", no_wrap=True)
    rows = []
    for name, nodes in cases:
        gpus = nodes * (8 if name == "dgx-a100" else 16)
        if gpus > args.max_gpus:
            continue
        spec = f"{name}:nodes={nodes}"
        console.print(f"[dim]measuring {spec} ...[/dim]")
        res = measure(spec, True, args.timeout, verify=True)
        base = measure(spec, False, args.baseline_timeout, verify=False)
        row = {"topology": spec, "gpus": gpus, **{f"sym_{k}": v for k, v in res.items()},
               **{f"base_{k}": v for k, v in base.items()}, "reference_s": ref.get((name, nodes))}
        rows.append(row)
        gen = res.get("generate_s")
        bgen = base.get("generate_s")
        refs = ref.get((name, nodes))
        table.add_row(
            spec, str(gpus), fmt_s(res.get("bound_s")),
            fmt_s(gen) if gen is not None else (f"> {res['timeout']:.0f}" if "timeout" in res else res.get("error", "?")),
            str(res.get("k", "-")), str(res.get("trees", "-")), str(res.get("height", "-")),
            {True: "yes", False: "NO"}.get(res.get("certified"), "-"),
            fmt_s(bgen) if bgen is not None else (f"> {base['timeout']:.0f}" if "timeout" in base else "-"),
            f"{bgen / gen:.1f}x" if gen and bgen else (f"> {base['timeout'] / gen:.0f}x" if gen and "timeout" in base else "-"),
            fmt_s(refs), f"{refs / gen:.0f}x" if refs and gen else "-",
        )
    console.print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
