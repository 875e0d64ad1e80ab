"""Benchmark: start-up, exact bound and whole schedule generation on DGX-A100 and MI250 clusters.

Prints markdown tables (paste them into the README):

1. *Start-up*, whole processes in the same run, best of ``--repeat`` interleaved runs: ``python -c "import
   numpy"`` (the yardstick), ``forestcoll --help`` and ``forestcoll generate dgx-a100:nodes=2 -o FILE``, with
   their ratios to the yardstick (targets: help <= 2x, generate <= 4x).
2. *Generation*, per topology: in a fresh process with imports warmed up, the bound alone and the whole
   optimal generation (bound, k search, switch removal, packing, routing), k, trees, height and whether the
   independent verifier certifies it; the *whole process* ``forestcoll generate SPEC -c allgather -o FILE`` (start-up,
   topology, generation and writing the file; best of ``--repeat`` for cases under 2 s); the same generation with
   symmetry off (a baseline in the same run); and the public reference implementation (ForestColl, Python +
   networkx, github.com/liangyuRain/ForestColl at 3c13aee) with the ratio of the whole processes.

What is measured is the package as ``make`` leaves it: ``make bench`` (and ``demo`` / ``test`` / ``check``) first
compiles forestcoll's bytecode (``python -m compileall -q src``, the Makefile's ``.venv/.pyc``), as a regular ``pip
install`` does; without it, under ``PYTHONDONTWRITEBYTECODE=1``, every process compiles its ~40 modules again
(~0.07-0.1 s more).  The first line says how many of the package's modules had up-to-date bytecode.

The reference runs in this run, unmodified, when ``--reference DIR`` names a checkout of it (``git clone
https://github.com/liangyuRain/ForestColl DIR``; it needs networkx, which forestcoll installs): its whole process
(start-up, building its graph, ``optimal_pipeline_spanning_trees``) for each case whose recorded time is under
``--reference-limit`` seconds (default 300: dgx-a100 x1, x2, x4 and mi250 x1, x2).  Without it the times recorded
on this machine class (../shared/reference/reference-results.json) are shown, marked "recorded".

    python benchmarks/generate.py --reference ../ForestColl      # everything (several minutes)
    python benchmarks/generate.py --quick                        # small cases, recorded reference times
    python benchmarks/generate.py --timeout 600                  # per-case limit for the largest cases
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

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

# the reference's own entry points, called as its README shows; nothing of it is copied here
REFERENCE_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from pipeline_allgather import optimal_pipeline_spanning_trees
from topologies import a100_topology, mi250_topology
G, gpus = {"dgx-a100": a100_topology, "mi250": mi250_topology}[sys.argv[2]](int(sys.argv[3]))
t1 = time.perf_counter()
(U, k), (Ts, Cs) = optimal_pipeline_spanning_trees(G, compute_nodes=gpus)
t2 = time.perf_counter()
print(json.dumps({"k": k, "algbw": str(len(gpus) * k / U), "compute_s": t2 - t1, "import_s": t1 - t0}))
"""


def forestcoll_command() -> list[str]:
    """The console script next to this interpreter (what a user types), else ``python -m forestcoll``."""
    script = Path(sys.executable).with_name("forestcoll")
    return [str(script)] if script.exists() else [sys.executable, "-m", "forestcoll"]


def children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def whole(cmd: list[str], timeout: float, cpu: list[float] | None = None) -> float | None:
    """Wall seconds of one whole process (None when it fails or times out); its CPU seconds are appended to
    ``cpu`` (less sensitive than wall time to other jobs on the machine)."""
    c0, t0 = children_cpu(), time.perf_counter()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.stderr.write(f"failed: {' '.join(cmd)}: {proc.stderr.decode(errors='replace').strip()[-300:]}\n")
        return None
    if cpu is not None:
        cpu.append(children_cpu() - c0)
    return elapsed


def best_of(cmds: dict[str, list[str]], repeat: int, timeout: float) -> dict[str, float | None]:
    """The fastest of ``repeat`` runs of each command, the commands interleaved (so load drifts hit all alike)."""
    best: dict[str, float | None] = dict.fromkeys(cmds)
    for _ in range(repeat):
        for name, cmd in cmds.items():
            t = whole(cmd, timeout)
            if t is not None and (best[name] is None or t < best[name]):
                best[name] = t
    return best


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


def run_reference(directory: str, name: str, nodes: int, timeout: float) -> dict:
    """The reference's whole process on one case: wall seconds, its own compute seconds, k and algbw."""
    c0, t0 = children_cpu(), time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", REFERENCE_CHILD, directory, name, str(nodes)],
                              capture_output=True, text=True, timeout=timeout, check=False, cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return {"whole_s": wall, "cpu_s": cpu, **json.loads(proc.stdout.strip().splitlines()[-1])}


def recorded_times() -> dict[tuple[str, int], float]:
    if not REFERENCE.exists():
        return {}
    data = json.loads(REFERENCE.read_text())
    return {(e["topology"], e["nodes"]): e["seconds"] for e in data.get("optimal", [])}


def fmt_s(x: float | None) -> str:
    return "-" if x is None else (f"{x:.3f}" if x < 10 else f"{x:.1f}")


def bytecode() -> str:
    """How many of forestcoll's modules have bytecode newer than their source (what Python will use)."""
    import importlib.util

    sources = sorted((ROOT / "src" / "forestcoll").rglob("*.py"))
    fresh = 0
    for src in sources:
        pyc = Path(importlib.util.cache_from_source(str(src)))
        fresh += pyc.exists() and pyc.stat().st_mtime >= src.stat().st_mtime
    return f"bytecode: {fresh} of {len(sources)} forestcoll modules precompiled"


def load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
        return f"load {one:.2f} {five:.2f} {fifteen:.2f}"
    except OSError:
        return "load ?"


def same_rate(ours: str | None, theirs: str | None) -> bool | None:
    """Whether the reference's algbw (a float or a fraction, as it prints it) equals ours (exact)."""
    if ours is None or theirs is None:
        return None
    return abs(float(Fraction(ours)) - float(theirs)) <= 1e-9 * float(Fraction(ours))


def startup_table(repeat: int) -> list[str]:
    fc = forestcoll_command()
    with tempfile.TemporaryDirectory() as tmp:
        best = best_of({
            "python -c \"import numpy\"": [sys.executable, "-c", "import numpy"],
            "forestcoll --help": [*fc, "--help"],
            "forestcoll generate dgx-a100:nodes=2 -o x.json": [*fc, "generate", "dgx-a100:nodes=2", "-o",
                                                               os.path.join(tmp, "x.json")],
        }, repeat, 120)
    yard = best["python -c \"import numpy\""]
    targets = {"forestcoll --help": 2, "forestcoll generate dgx-a100:nodes=2 -o x.json": 4}
    lines = [f"Start-up: whole processes, best of {repeat} interleaved runs ({load()} at the end)", "",
             "| command | whole process s | vs `import numpy` | target |", "|---|---:|---:|---:|"]
    for name, t in best.items():
        ratio = f"{t / yard:.2f}x" if t and yard else "-"
        target = f"<= {targets[name]}x" if name in targets else "-"
        lines.append(f"| `{name}` | {fmt_s(t)} | {ratio} | {target} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only the small cases")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed per case (default 600)")
    ap.add_argument("--baseline-timeout", type=float, default=120, help="seconds allowed per no-symmetry baseline")
    ap.add_argument("--max-gpus", type=int, default=1024, help="skip cases with more GPUs")
    ap.add_argument("--repeat", type=int, default=5, help="runs of each short whole process; the best counts (default 5)")
    ap.add_argument("--reference", metavar="DIR", help="a checkout of github.com/liangyuRain/ForestColl to run in this run")
    ap.add_argument("--reference-limit", type=float, default=300,
                    help="run the reference only where its recorded time is below this (default 300 s)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the no-symmetry baseline")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    if args.reference and not (Path(args.reference) / "pipeline_allgather.py").exists():
        sys.exit(f"{args.reference}: not a checkout of liangyuRain/ForestColl (no pipeline_allgather.py)")
    cases = QUICK if args.quick else CASES
    recorded = recorded_times()
    fc = forestcoll_command()
    print(f"{load()} at the start; {bytecode()}\n")
    out = startup_table(args.repeat)
    ref_col = "reference s (this run)" if args.reference else "reference s (recorded)"
    rows = []
    table = [f"Generation of the optimal allgather ({load()} at the start of the table)", "",
             "| topology | GPUs | bound s | generate s | whole process s (CPU s) | k | trees | height | certified | "
             f"no-sym s | sym speed-up | {ref_col} | whole vs reference (CPU) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for name, nodes in cases:
        gpus = nodes * (8 if name == "dgx-a100" else 16)
        if gpus > args.max_gpus:
            continue
        spec = f"{name}:nodes={nodes}"
        print(f"measuring {spec} ...", file=sys.stderr)
        res = measure(spec, True, args.timeout, verify=True)
        cpu: list[float] = []
        with tempfile.TemporaryDirectory() as tmp:
            # -c allgather: what the in-process columns and the reference compute (the CLI's default is allreduce)
            cmd = [*fc, "generate", spec, "-c", "allgather", "-o", os.path.join(tmp, "s.json")]
            wall = whole(cmd, args.timeout, cpu)
            for _ in range(args.repeat - 1 if wall is not None and wall < 5 else 0):
                again = whole(cmd, args.timeout, cpu)
                wall = min(wall, again) if again is not None else wall
        wall_cpu = min(cpu) if cpu else None
        base = {} if args.no_baseline else measure(spec, False, args.baseline_timeout, verify=False)
        rec = recorded.get((name, nodes))
        ref: dict = {}
        if args.reference and rec is not None and rec < args.reference_limit:
            print(f"  reference on {spec} (recorded {rec} s) ...", file=sys.stderr)
            ref = run_reference(args.reference, name, nodes, max(args.timeout, 3 * rec))
            if same_rate(res.get("algbw"), ref.get("algbw")) is False:
                print(f"  note: the reference's algbw {ref['algbw']} differs from {res.get('algbw')}", file=sys.stderr)
        ref_s = ref.get("whole_s") if args.reference else rec
        rows.append({"topology": spec, "gpus": gpus, "whole_s": wall, "whole_cpu_s": wall_cpu, **{f"sym_{k}": v for k, v in res.items()},
                     **{f"base_{k}": v for k, v in base.items()}, **{f"ref_{k}": v for k, v in ref.items()},
                     "reference_recorded_s": rec})
        gen, bgen = res.get("generate_s"), base.get("generate_s")
        gen_text = fmt_s(gen) if gen is not None else (f"> {res['timeout']:.0f}" if "timeout" in res else res.get("error", "?"))
        if args.no_baseline:
            btext = speed = "-"
        else:
            btext = fmt_s(bgen) if bgen is not None else (f"> {base['timeout']:.0f}" if "timeout" in base else "-")
            speed = f"{bgen / gen:.1f}x" if gen and bgen else (f"> {base['timeout'] / gen:.0f}x" if gen and "timeout" in base else "-")
        if "timeout" in ref:
            ref_text = f"> {ref['timeout']:.0f}"
        else:
            ref_text = fmt_s(ref_s) + (f" ({fmt_s(ref['cpu_s'])})" if "cpu_s" in ref else "")
        ratio = f"{ref_s / wall:.0f}x" if ref_s and wall else "-"
        if "cpu_s" in ref and wall_cpu:
            ratio += f" ({ref['cpu_s'] / wall_cpu:.0f}x)"
        wall_text = fmt_s(wall) + (f" ({fmt_s(wall_cpu)})" if wall_cpu is not None else "")
        table.append(
            f"| {spec} | {gpus} | {fmt_s(res.get('bound_s'))} | {gen_text} | {wall_text} | {res.get('k', '-')} | "
            f"{res.get('trees', '-')} | {res.get('height', '-')} | {({True: 'yes', False: 'NO'}).get(res.get('certified'), '-')} | "
            f"{btext} | {speed} | {ref_text} | {ratio} |")
    out += ["", *table, "", f"{load()} at the end"]
    if args.reference:
        out += ["", "reference: github.com/liangyuRain/ForestColl (Python + networkx), run unmodified in this run; "
                    "its whole process = start-up + building its graph + optimal_pipeline_spanning_trees"]
    else:
        out += ["", "reference: recorded on this machine class (../shared/reference/reference-results.json), its "
                    "generation only; pass --reference DIR to run it in the same run"]
    print("\n".join(out))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
