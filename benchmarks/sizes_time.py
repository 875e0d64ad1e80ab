"""Benchmark: whole-process time of ``generate --sizes ... --format mscclpp`` (per-size MSCCL++ plans), here and in
another checkout.

    python benchmarks/sizes_time.py --nice                              # the dgx-a100:nodes=2 proxy (~15 s CPU)
    python benchmarks/sizes_time.py --nice --before /tmp/main/src       # each case with that src too, same run
    python benchmarks/sizes_time.py --nice --mi300 --only MI300         # the MI300 dump x4 at 1 GiB (minutes)
    python benchmarks/sizes_time.py --nice --mi300 --only "x2 rail"     # the MI300 dump x2, three sizes (~1 min CPU)
    python benchmarks/sizes_time.py --nice --mi300 --only "x4 rail allreduce 1MiB"  # x4, three sizes (~7 min CPU)

Each case runs ``python -m forestcoll generate ... --sizes ... --format mscclpp -o DIR`` in a fresh process
(``nice -n 10`` when ``--nice``).  The table gives its wall and CPU seconds (user + system of the process and its
race workers, from the children's resource usage), the ranking's own time as its note prints it (in-process wall and
CPU), and the sha256 of every file written and of every printed line, the timings and the directory masked.  With
``--before DIR`` (a checkout's ``src``, put first on ``PYTHONPATH``) each case runs there first, then here; the CPU
ratio is before / after and the last column says whether both wrote the same files and lines.  The load average is
printed at the start and the end: on a shared machine CPU seconds are the figure to compare.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from processes import run_timed

ROOT = Path(__file__).resolve().parents[1]
MI300 = str(ROOT.parent / "shared" / "data" / "nccl-topo" / "topo_8p_940.xml")
CASES = [
    ("dgx-a100:nodes=2 allreduce 1MiB,16MiB,1GiB", ["dgx-a100:nodes=2", "-c", "allreduce", "--sizes", "1MiB,16MiB,1GiB"]),
    ("dgx-a100:nodes=2 allgather 1MiB,16MiB,1GiB", ["dgx-a100:nodes=2", "-c", "allgather", "--sizes", "1MiB,16MiB,1GiB"]),
]
BIG = [("MI300 x4 rail allreduce 1GiB", [MI300, "--nodes", "4", "--fabric", "rail", "-c", "allreduce", "--sizes", "1GiB"]),
       ("MI300 x2 rail allreduce 1MiB,16MiB,1GiB",
        [MI300, "--nodes", "2", "--fabric", "rail", "-c", "allreduce", "--sizes", "1MiB,16MiB,1GiB"]),
       ("MI300 x4 rail allreduce 1MiB,16MiB,1GiB",
        [MI300, "--nodes", "4", "--fabric", "rail", "-c", "allreduce", "--sizes", "1MiB,16MiB,1GiB"])]
RANKING = re.compile(r"; ([\d.]+) s, ([\d.]+) s CPU\)")


def timed(src: Path, args: list[str], out: Path, nice: bool) -> tuple[float, float, str, str, str]:
    """(wall s, CPU s, the ranking's 'wall s / CPU s', sha256 of the files, sha256 of the printed lines masked)."""
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = ([*(["nice", "-n", "10"] if nice else [])] + [sys.executable, "-m", "forestcoll", "generate", *args,
                                                         "--format", "mscclpp", "-o", str(out)])
    proc, wall, cpu = run_timed(cmd, env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    files = hashlib.sha256()
    for name in sorted(os.listdir(out)):
        files.update(name.encode() + b"\0" + hashlib.sha256((out / name).read_bytes()).digest())
    found = RANKING.search(proc.stdout)
    ranking = f"{found.group(1)} / {found.group(2)}" if found else "-"
    lines = RANKING.sub("; T)", proc.stdout.replace(str(out), "DIR"))
    return wall, cpu, ranking, files.hexdigest()[:12], hashlib.sha256(lines.encode()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, help="another checkout's src directory, timed first in each case")
    ap.add_argument("--after", type=Path, default=ROOT / "src", help="the src directory timed second (default: this one's)")
    ap.add_argument("--nice", action="store_true", help="run each process under nice -n 10")
    ap.add_argument("--mi300", action="store_true", help="also the MI300 dump cases (minutes of CPU)")
    ap.add_argument("--only", help="only the cases whose name contains this text")
    args = ap.parse_args()
    cases = [c for c in CASES + (BIG if args.mi300 else []) if args.only is None or args.only in c[0]]
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({time.strftime('%H:%M:%S', time.gmtime())} UTC)\n")
    old_cols = "before: wall s (CPU s) | before: ranking s / CPU s | " if args.before else ""
    print(f"| case | {old_cols}wall s (CPU s) | ranking s / CPU s | {'CPU ratio | ' if args.before else ''}"
          f"files sha256 | lines sha256 |{' same as before |' if args.before else ''}")
    print("|---|" + ("---:|---:|" if args.before else "") + "---:|---:|" + ("---:|" if args.before else "")
          + "---|---|" + ("---|" if args.before else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, argv) in enumerate(cases):
            cells = [name]
            old = None
            if args.before:
                old = timed(args.before, argv, Path(tmp) / f"before{i}", args.nice)
                cells += [f"{old[0]:.1f} ({old[1]:.1f})", old[2]]
            new = timed(args.after, argv, Path(tmp) / f"after{i}", args.nice)
            cells += [f"{new[0]:.1f} ({new[1]:.1f})", new[2]]
            if old is not None:
                cells.append(f"{old[1] / new[1]:.2f}")
            cells += [new[3], new[4]]
            if old is not None:
                cells.append("yes" if old[3:] == new[3:] else "NO")
            print("| " + " | ".join(cells) + " |", flush=True)
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
          f"({time.strftime('%H:%M:%S', time.gmtime())} UTC)")


if __name__ == "__main__":
    main()
