"""The progress contract and display: library calls report increasing counts; the CLI shows a bar only on a
terminal, only after the delay, never with --quiet."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from conftest import cli

from forestcoll import generate, load_topology, verify
from forestcoll.bound.report import bound_report
from forestcoll.cli.progress import ProgressDisplay, progress_display


class Recorder:
    """A progress callback that keeps every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int | None]] = []

    def __call__(self, stage: str, done: int, total: int | None = None) -> None:
        self.calls.append((stage, done, total))

    def check_increasing(self) -> None:
        """Within each run of one stage the count never goes down and stays within the total."""
        assert self.calls
        last: dict[str, int] = defaultdict(lambda: -1)
        previous = None
        for stage, done, total in self.calls:
            if stage != previous:
                last[stage] = -1
            assert done >= last[stage], (stage, done, last[stage])
            assert done >= 0 and (total is None or done <= total), (stage, done, total)
            last[stage], previous = done, stage


def test_generate_reports_each_phase_step_in_order():
    rec = Recorder()
    topo = load_topology("dgx-a100:nodes=2")
    sched = generate(topo, "allreduce", progress=rec)
    rec.check_increasing()
    stages = [s for s, _, _ in rec.calls]
    assert stages[0] == "allgather: bound" and "allgather: packing trees" in stages
    assert rec.calls[-1][1] == rec.calls[-1][2]  # ends complete
    assert generate(topo, "allreduce").trees == sched.trees  # the callback changes nothing


def test_verify_counts_the_trees_it_checks():
    rec = Recorder()
    topo = load_topology("dgx-a100:nodes=2")
    sched = generate(topo, "allreduce")
    assert verify(sched, topo, progress=rec).ok
    rec.check_increasing()
    per_phase = {s: t for s, _, t in rec.calls}
    assert per_phase == {"checking reduce_scatter trees": 32, "checking allgather trees": 32}
    assert len(rec.calls) == len(sched.trees)


def test_bound_report_counts_its_bounds():
    rec = Recorder()
    bound_report(load_topology("dgx-a100:nodes=1"), "allgather", k=1, progress=rec)
    rec.check_increasing()
    assert [d for _, d, _ in rec.calls] == list(range(len(rec.calls)))
    assert rec.calls[-1][0] == "bound: k=1"


def test_simulation_reports_transfers_delivered():
    from forestcoll.simulate import simulate_spec

    rec = Recorder()
    simulate_spec("ring", "dgx-a100:nodes=1", size=1 << 20, progress=rec)
    rec.check_increasing()
    assert rec.calls[0] == ("simulating transfers", 0, rec.calls[0][2])


def test_mscclpp_self_check_reports_thread_blocks():
    from forestcoll.mscclpp.export import export_mscclpp

    rec = Recorder()
    topo = load_topology("dgx-a100:nodes=1")
    export_mscclpp(generate(topo, "allgather"), topo, progress=rec)
    rec.check_increasing()
    assert rec.calls[-1][0].startswith("self-check") and rec.calls[-1][1] == rec.calls[-1][2]


def test_compare_counts_runs():
    from forestcoll.simulate.compare import compare_topology

    rec = Recorder()
    compare_topology("dgx-a100:nodes=1", "allgather", [1 << 20], algorithms=["ring", "forestcoll"], progress=rec)
    rec.check_increasing()
    assert rec.calls[-1][1:] == (2, 2)  # every run counted, whatever the last stage is called


def test_display_is_none_when_quiet_or_not_a_terminal():
    with progress_display(quiet=False, stream=io.StringIO()) as progress:
        assert progress is None
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        with progress_display(quiet=True, stream=tty) as progress:
            assert progress is None
        with progress_display(quiet=False, stream=tty) as progress:
            assert isinstance(progress, ProgressDisplay)
    os.close(master)


def _read_all(fd: int) -> bytes:
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def test_a_slow_operation_shows_a_bar_on_a_terminal_and_a_fast_one_nothing():
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        with progress_display(stream=tty, delay=0.1) as progress:
            for i in range(6):
                progress("fake stage", i, 5)
                time.sleep(0.1)
        slow = _read_all(master)
        with progress_display(stream=tty, delay=1.0) as progress:
            progress("quick stage", 1, 2)
        fast = _read_all(master)
    os.close(master)
    assert b"fake stage" in slow and b"/5" in slow
    assert fast == b""


def test_quiet_is_accepted_before_and_after_the_command(tmp_path):
    for args in (["-q", "bound", "dgx-a100:nodes=1"], ["bound", "dgx-a100:nodes=1", "--quiet"],
                 ["generate", "dgx-a100:nodes=1", "-q", "-o", tmp_path / "s.json"]):
        code, out, err = cli(*args)
        assert code == 0 and err == "", (args, err)


@pytest.mark.slow
def test_a_non_terminal_stderr_stays_silent(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "forestcoll", "generate", "dgx-a100:nodes=2", "-o",
                           str(tmp_path / "s.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""


def test_msccl_export_self_check_counts_interpreter_steps(tmp_path):
    from forestcoll.msccl.export import write_msccl

    rec = Recorder()
    sched = generate(load_topology("dgx-a100:nodes=2"), "allreduce")
    result = write_msccl(sched, str(tmp_path / "a.xml"), progress=rec)
    assert result.checked
    rec.check_increasing()
    assert {stage for stage, _, _ in rec.calls} <= {"running in-place in the interpreter",
                                                     "running out-of-place in the interpreter"}
    assert all(total and total > 0 for _, _, total in rec.calls)
