"""Benchmark: whole-process time of the slow ``generate --format msccl`` runs, here and in another checkout.

    python benchmarks/generate_time.py --quick                          # the small cases (about a minute)
    python benchmarks/generate_time.py                                  # + dgx-a100:nodes=16 and mi250:nodes=2 auto
    python benchmarks/generate_time.py --before /tmp/main/src           # each case with that src too, same run
    python benchmarks/generate_time.py --only nodes=16 --nice           # one case (its name contains the text)

Each case runs ``python -m forestcoll generate ... -o FILE`` in a fresh process (``nice -n 10`` when ``--nice``),
and the table gives its wall and CPU seconds (user + system, from the child's resource usage), the sha256 of the
file written and of the printed lines other than the self-check's (they hold its own timing) and the file's path.
With ``--before DIR`` (a checkout's ``src``, put first on ``PYTHONPATH``) each case runs there first, then here,
and the last column says whether both wrote the same file and notes.  The load average is printed at the start
and the end: on a shared machine CPU seconds are the figure to compare.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path

from processes import run_timed

ROOT = Path(__file__).resolve().parents[1]
QUICK = [
    ("dgx-a100:nodes=2 allreduce", ["dgx-a100:nodes=2", "-c", "allreduce", "--format", "msccl"]),
    ("mi250 allgather --buffsize auto", ["mi250", "-c", "allgather", "--format", "msccl", "--buffsize", "auto"]),
]
SLOW = [
    ("dgx-a100:nodes=16 allreduce", ["dgx-a100:nodes=16", "--format", "msccl"]),
    ("mi250:nodes=2 allgather --buffsize auto", ["mi250:nodes=2", "-c", "allgather", "--format", "msccl",
                                                 "--buffsize", "auto"]),
]


def timed(src: Path, args: list[str], out: Path, nice: bool) -> tuple[float, float, str, str]:
    """(wall s, CPU s, sha256 of the file, sha256 of the printed lines but the self-check's) of one process."""
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = ([*(["nice", "-n", "10"] if nice else [])] + [sys.executable, "-m", "forestcoll", "generate", *args,
                                                         "-o", str(out)])
    proc, wall, cpu = run_timed(cmd, env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    lines = [x for x in proc.stdout.splitlines() if not x.startswith(("checked", "wrote"))]
    return (wall, cpu, hashlib.sha256(out.read_bytes()).hexdigest()[:12],
            hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only the small cases")
    ap.add_argument("--before", type=Path, help="another checkout's src directory, timed first in each case")
    ap.add_argument("--nice", action="store_true", help="run each process under nice -n 10")
    ap.add_argument("--only", help="only the cases whose name contains this text")
    args = ap.parse_args()
    cases = [c for c in QUICK + ([] if args.quick else SLOW) if args.only is None or args.only in c[0]]
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    head = "| case | " + ("before: wall s (CPU s) | " if args.before else "") + "wall s (CPU s) | file sha256 | notes sha256 |"
    print(head + (" same as before |" if args.before else ""))
    print("|---|" + ("---:|" if args.before else "") + "---:|---|---|" + ("---|" if args.before else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in cases:
            cells = [name]
            old = None
            if args.before:
                old = timed(args.before, argv, Path(tmp) / "before.xml", args.nice)
                cells.append(f"{old[0]:.1f} ({old[1]:.1f})")
            new = timed(ROOT / "src", argv, Path(tmp) / "after.xml", args.nice)
            cells += [f"{new[0]:.1f} ({new[1]:.1f})", new[2], new[3]]
            if old is not None:
                cells.append("yes" if old[2:] == new[2:] else "NO")
            print("| " + " | ".join(cells) + " |", flush=True)
    print(f"\nload average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
