"""io19: every file reader is capped (fileio.max_file_bytes): huge, endless, blocking or odd inputs are one line,
exit 2, at once, without reading gigabytes (docs/limits.md)."""

from __future__ import annotations

import os
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


def test_a_fifo_no_one_writes_to_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "topo.json"
    os.mkfifo(fifo)
    for command in (["bound"], ["mscclpp", "run"], ["verify"]):
        start = time.monotonic()
        code, _, err = cli(*command, fifo)
        _one_line_refusal(code, err)
        assert "nothing written to it" in err and time.monotonic() - start < 5


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
