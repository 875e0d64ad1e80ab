"""io19: every file reader is capped (fileio.max_file_bytes): huge, endless or odd inputs are one line, exit 2, at
once, without reading gigabytes (docs/limits.md); polish20: a FIFO is read as `cat` reads it (waiting for a writer)."""

from __future__ import annotations

import os
import re
import threading
import time

import pytest
from conftest import cli

from forestcoll import limits
from forestcoll.errors import ForestCollError
from forestcoll.fileio import max_file_bytes, read_bytes, read_text

RING = os.path.join(os.path.dirname(__file__), "..", "docs", "examples", "ring-of-four.json")


def _one_line_refusal(code: int, err: str) -> None:
    assert code == 2 and err.count("\n") == 1 and err.startswith("forestcoll: error: "), (code, err)
    assert "Traceback" not in err


@pytest.mark.parametrize("command", [["mscclpp", "run"], ["msccl", "run"], ["mscclpp", "lint"], ["msccl", "lint"],
                                     ["verify"], ["simulate"], ["export", "-o", "x.json"]])
def test_dev_zero_is_refused_at_once(command, tmp_path, monkeypatch):
    """Before io19 each of these read /dev/zero until the memory ran out."""
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    code, out, err = cli(*command, "/dev/zero")
    _one_line_refusal(code, err)
    assert "NUL byte" in err and time.monotonic() - start < 5 and os.listdir(tmp_path) == []


def test_a_huge_sparse_file_is_refused_by_its_size(tmp_path):
    """A 3 GB file (sparse: no disk used) is refused from its size, before a byte is read."""
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(3 * 10**9)
    for command in (["bound"], ["generate"], ["verify"], ["mscclpp", "lint"], ["msccl", "lint"], ["simulate"]):
        start = time.monotonic()
        code, _, err = cli(*command, big)
        _one_line_refusal(code, err)
        assert "3,000,000,000 bytes, above forestcoll's limit of 1,073,741,824 bytes" in err, err
        assert "FORESTCOLL_MAX_FILE_BYTES" in err and time.monotonic() - start < 5


def _fifo_run(fifo, argv: list, data: bytes | None, delay: float = 0.3) -> tuple[int, str, str]:
    """``cli(*argv)`` while a thread opens ``fifo`` for writing after ``delay`` s and writes ``data`` once (None: opens
    and closes it empty), as `mkfifo f; forestcoll ... f & cat x > f` does.  A command that opened the FIFO a second
    time would wait for another writer forever: after 60 s the test gives it an empty one and fails."""
    result: list = []

    def feed() -> None:
        time.sleep(delay)
        with open(fifo, "wb") as fh:  # blocks until the command opens it
            if data:
                fh.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    runner = threading.Thread(target=lambda: result.append(cli(*argv)), daemon=True)
    writer.start()
    runner.start()
    runner.join(60)
    if runner.is_alive():  # waiting in a second open: release it
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        runner.join(10)
        raise AssertionError(f"forestcoll {argv} opened the FIFO twice (waited for a second writer)")
    writer.join(10)
    return result[0]


MSCCL = ["generate", "ring:n=4", "-c", "allgather", "--format", "msccl"]


@pytest.mark.parametrize("argv,make", [
    (["bound", "{}"], None),
    (["simulate", "{}", "-t", "ring:n=4", "--size", "1MiB"], MSCCL),
    (["msccl", "run", "{}", "--bytes", "1048576"], MSCCL),
    (["verify", "{}"], ["generate", "ring:n=4"]),
])
def test_a_fifo_is_read_as_cat_reads_it(argv, make, tmp_path, monkeypatch):
    """polish20: the open waits for the writer (before: it opened without waiting, so a writer that came second lost
    the race: "nothing written to it"), and the FIFO is read once (simulate of an MSCCL file and msccl run --bytes
    read it twice): the same output as from the regular file."""
    import shutil

    monkeypatch.chdir(tmp_path)
    ext = ".xml" if make is MSCCL else ".json"
    regular, fifo = f"file{ext}", f"fifo{ext}"
    if make is None:
        shutil.copy(RING, regular)
    else:
        assert cli(*make, "-o", regular)[0] == 0
    want = cli(*[a.replace("{}", regular) for a in argv])
    assert want[0] == 0, want
    os.mkfifo(fifo)
    got = _fifo_run(fifo, [a.replace("{}", fifo) for a in argv], (tmp_path / regular).read_bytes())
    def same(text: str) -> str:  # the file's name, and wall-clock seconds ("0.01 s"), aside
        return re.sub(r"\d+\.\d+ s\b", "<s>", text.replace(regular, fifo))

    assert (got[0], same(got[1]), got[2]) == (0, same(want[1]), same(want[2]))


def test_a_fifo_closed_empty_or_binary_or_too_big_is_refused(tmp_path, monkeypatch):
    """The refusals stay: nothing written, a NUL byte, more than the cap."""
    fifo = tmp_path / "topo.json"
    os.mkfifo(fifo)
    code, _, err = _fifo_run(fifo, ["bound", fifo], None)
    _one_line_refusal(code, err)
    assert "a FIFO or pipe with nothing written to it, expected a topology file" in err
    code, _, err = _fifo_run(fifo, ["bound", fifo], b'{"nodes": \0}')
    _one_line_refusal(code, err)
    assert "a FIFO or pipe of binary data (a NUL byte at byte 10)" in err
    monkeypatch.setenv(limits.FILE_BYTES_ENV, "100")
    code, _, err = _fifo_run(fifo, ["bound", fifo], b" " * 1000)
    _one_line_refusal(code, err)
    assert "gives more than forestcoll's limit of 100 bytes" in err


def test_waiting_for_a_writer_stops_at_ctrl_c(tmp_path):
    """A FIFO no one writes to waits, as `cat` does; Ctrl-C ends the wait with forestcoll's one line and 130."""
    import signal
    import subprocess
    import sys

    fifo = tmp_path / "topo.json"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "forestcoll", "bound", str(fifo)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,  # SIGINT as a shell leaves it (xdist's workers ignore
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # it, and children inherit)
    try:
        wchan = f"/proc/{proc.pid}/wchan"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with open(wchan, encoding="ascii") as fh:
                    where = fh.read()
            except OSError:
                pytest.skip("no /proc/PID/wchan to see the process wait")
            if "partner" in where or "fifo" in where:  # Linux: wait_for_partner, in the FIFO's open
                break
            time.sleep(0.05)
        else:
            pytest.skip(f"the process never showed its wait in {wchan} (rc {proc.poll()})")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130 and err == "forestcoll: interrupted\n" and out == "", (proc.returncode, err)


def test_a_fifo_with_a_writer_is_read(tmp_path):
    """A pipe that has a writer (a shell's process substitution, `mkfifo` with a writer running) is read whole."""
    fifo = tmp_path / "topo.json"
    os.mkfifo(fifo)
    text = open(RING, encoding="utf-8").read()
    opened = threading.Event()

    def write() -> None:
        with open(fifo, "w", encoding="utf-8") as fh:  # blocks until the reader opens it
            opened.set()
            time.sleep(0.2)  # the reader waits for the data
            fh.write(text)

    writer = threading.Thread(target=write)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # let the writer's open go through, as a shell's pipe is open
    writer.start()
    opened.wait(5)
    try:
        assert read_text(fifo, "topology file") == text
    finally:
        os.close(fd)
        writer.join(5)


def test_a_sparse_or_binary_file_under_the_limit_stops_at_its_first_nul(tmp_path, monkeypatch):
    monkeypatch.setenv(limits.FILE_BYTES_ENV, "8GiB")
    big = tmp_path / "plan.json"
    with open(big, "wb") as fh:
        fh.truncate(3 * 10**9)
    start = time.monotonic()
    code, _, err = cli("mscclpp", "lint", big)
    _one_line_refusal(code, err)
    assert "a file of binary data (a NUL byte at byte 0)" in err and time.monotonic() - start < 5


def test_directories_and_unreadable_files(tmp_path, monkeypatch):
    (tmp_path / "d.json").mkdir()
    code, _, err = cli("bound", tmp_path / "d.json")
    _one_line_refusal(code, err)
    assert "is a directory" in err
    locked = tmp_path / "locked.json"
    locked.write_text("{}")

    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "open", refuse)  # as root, chmod 000 does not stop a read
    with pytest.raises(ForestCollError, match="cannot read \\(Permission denied\\)"):
        read_text(locked, "topology file")


def test_the_limit_is_raised_or_lowered_by_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "ring.json"
    path.write_text(open(RING, encoding="utf-8").read())
    size = path.stat().st_size
    monkeypatch.setenv(limits.FILE_BYTES_ENV, str(size - 1))
    code, _, err = cli("bound", path)
    _one_line_refusal(code, err)
    assert f"{size:,} bytes, above forestcoll's limit of {size - 1:,} bytes for a topology file" in err
    monkeypatch.setenv(limits.FILE_BYTES_ENV, str(size))
    assert cli("bound", path)[0] == 0
    monkeypatch.setenv(limits.FILE_BYTES_ENV, "4GiB")
    assert max_file_bytes() == 4 << 30
    monkeypatch.setenv(limits.FILE_BYTES_ENV, "lots")
    code, _, err = cli("bound", path)
    _one_line_refusal(code, err)
    assert "FORESTCOLL_MAX_FILE_BYTES=lots: bad size" in err


def test_a_stream_past_the_limit_stops_there(monkeypatch):
    """/dev/urandom may hold no NUL for a while: the read stops at the limit, not at the end of the stream."""
    monkeypatch.setenv(limits.FILE_BYTES_ENV, "1000")
    with pytest.raises(ForestCollError, match="NUL byte|gives more than forestcoll's limit of 1,000 bytes"):
        read_bytes("/dev/urandom", "plan file")


def test_text_reads_as_before():
    """Line ends are read as text mode reads them; the bytes of a file are the file's."""
    import tempfile

    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as fh:
        fh.write(b'{"a":\r\n 1,\r "b": "\xc3\xa9"}\n')
    try:
        assert read_text(fh.name) == '{"a":\n 1,\n "b": "\u00e9"}\n'
        assert read_bytes(fh.name) == b'{"a":\r\n 1,\r "b": "\xc3\xa9"}\n'
    finally:
        os.unlink(fh.name)
