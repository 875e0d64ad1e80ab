"""Timing whole processes for the benchmarks here (shared by generate_time.py, sizes_time.py and startup.py)."""

from __future__ import annotations

import resource
import subprocess
import time


def children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def run_timed(cmd: list[str], env: dict[str, str], **run) -> tuple[subprocess.CompletedProcess, float, float]:
    """(the finished process, wall s, CPU s) of ``cmd`` run to its end; ``run``: more ``subprocess.run`` arguments
    (output capture, timeout).  The exit status is the caller's to judge."""
    c0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, check=False, **run)
    return proc, time.perf_counter() - t0, children_cpu() - c0
