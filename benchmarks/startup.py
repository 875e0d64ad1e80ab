"""Benchmark: whole-process start-up of short commands, against a baseline revision run in the same process.

Users time whole processes, and the short commands (``--help``, ``bound`` of a built-in cluster, ``topo list``) are
mostly start-up.  Each command runs ``--repeat`` times as ``python -m forestcoll ...`` from this checkout's ``src``
and, with ``--base REV``, as often from ``git archive REV src`` (both byte-compiled first, as ``make`` does), the
two alternating run by run so that the machine's load drifts hit both alike; ``python -c "import numpy"`` is the
yardstick README's "Speed" table uses.  The table shows the median wall and CPU seconds (user + system of the
child) of each, and the ratio now / base.  CPU seconds are the steadier figure on a loaded machine.

    python benchmarks/startup.py --base 0a8e942            # 20 runs each (about a minute on 2 cores)
    python benchmarks/startup.py --repeat 5 --command "bound dgx-a100:nodes=2"
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from processes import run_timed

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("--help", "bound dgx-a100:nodes=2", "topo list")
YARDSTICK = 'python -c "import numpy"'


def run_once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one whole process; a failure stops the benchmark with its stderr."""
    proc, wall, cpu = run_timed(cmd, env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"failed: {shlex.join(cmd)}: {proc.stderr.decode(errors='replace').strip()[-300:]}")
    return wall, cpu


def base_tree(rev: str, into: str) -> str:
    """``src`` of revision ``rev`` extracted under ``into`` and byte-compiled: the path to put on PYTHONPATH."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=False)
    if archive.returncode != 0:
        sys.exit(f"git archive {rev}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    return compiled(os.path.join(into, "src"))


def compiled(src: str) -> str:
    """``src`` byte-compiled (``make``'s ``.venv/.pyc`` step; PYTHONDONTWRITEBYTECODE would leave it to each run)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", src], stdout=subprocess.DEVNULL, check=True)
    return src


def load() -> str:
    """The 1-minute load average and the UTC time."""
    return f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()[0]:.1f}"


def measure(commands: list[str], trees: dict[str, str], repeat: int) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """``repeat`` (wall, CPU) pairs per (command, tree), the trees alternating (in turn first) within each round."""
    runs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    names = list(trees)
    for r in range(repeat):
        order = names if r % 2 == 0 else names[::-1]
        runs.setdefault((YARDSTICK, ""), []).append(run_once([sys.executable, "-c", "import numpy"], dict(os.environ)))
        for command in commands:
            for name in order:
                env = {**os.environ, "PYTHONPATH": trees[name]}
                runs.setdefault((command, name), []).append(
                    run_once([sys.executable, "-m", "forestcoll", *shlex.split(command)], env))
    return runs


def table(runs: dict[tuple[str, str], list[tuple[float, float]]], commands: list[str], names: list[str]) -> list[str]:
    """The markdown table of the medians (and ratios now / base, and now / the yardstick)."""
    def med(key: tuple[str, str]) -> tuple[float, float]:
        pairs = runs[key]
        return statistics.median(w for w, _ in pairs), statistics.median(c for _, c in pairs)

    yard_wall, yard_cpu = med((YARDSTICK, ""))
    head = "| command | " + " | ".join(f"{n} wall s | {n} CPU s" for n in names)
    head += " | now / base wall | now / base CPU |" if len(names) == 2 else " |"
    head += " now vs `import numpy` (wall) |"
    rows = [head, "|---|" + "---:|" * (2 * len(names) + (2 if len(names) == 2 else 0) + 1)]
    rows.append(f"| `{YARDSTICK}` | " + " | ".join(f"{yard_wall:.3f} | {yard_cpu:.3f}" for _ in names)
                + (" | - | - |" if len(names) == 2 else " |") + " 1.00x |")
    for command in commands:
        cells = [med((command, n)) for n in names]
        row = f"| `forestcoll {command}` | " + " | ".join(f"{w:.3f} | {c:.3f}" for w, c in cells)
        if len(names) == 2:
            (bw, bc), (nw, nc) = cells
            row += f" | {nw / bw:.2f} | {nc / bc:.2f} |"
        else:
            row += " |"
        rows.append(row + f" {cells[-1][0] / yard_wall:.2f}x |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", metavar="REV", help="a git revision to run beside this checkout (e.g. 0a8e942)")
    ap.add_argument("--repeat", type=int, default=20, help="runs of each command per tree; the median counts (default 20)")
    ap.add_argument("--command", action="append", metavar="ARGS",
                    help=f"forestcoll's arguments, one command (repeatable; default: {', '.join(COMMANDS)})")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    commands = args.command or list(COMMANDS)
    with tempfile.TemporaryDirectory(prefix="forestcoll-startup-") as tmp:
        trees = {"base": base_tree(args.base, tmp)} if args.base else {}
        trees["now"] = compiled(str(ROOT / "src"))
        start = load()
        runs = measure(commands, trees, args.repeat)
    print(f"start-up, median of {args.repeat} whole processes each ({start} -> {load()}; "
          f"base = {args.base or '-'}, now = {ROOT})")
    print("\n".join(table(runs, commands, list(trees))))


if __name__ == "__main__":
    main()
