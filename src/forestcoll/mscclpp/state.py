"""The interpreter's state: device allocations with their race shadows, compiled instructions, thread blocks."""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from forestcoll.mscclpp.plan import Op

READERS = 4  # readers remembered per cell by the race shadow


class Fault(Exception):
    """An access outside its buffer: the run stops (the executor would corrupt memory)."""


# ----- memory ------------------------------------------------------------------------------------------


class Alloc:
    """One device allocation (bytes), grown lazily up to ``size``, with its race shadow."""

    def __init__(self, name: str, size: int, cell: int, race: bool) -> None:
        self.name, self.size, self.cell, self.race = name, size, cell, race
        self.data = np.full(0, 0xFF, dtype=np.uint8)
        self.ncells = 0
        if race:
            self.w_agent = np.full(0, -1, np.int32)
            self.w_clk = np.zeros(0, np.int32)
            self.w_instr = np.zeros(0, np.int32)
            self.w_tag = np.zeros(0, np.int32)
            self.r_agent = np.full((0, READERS), -1, np.int32)
            self.r_clk = np.zeros((0, READERS), np.int32)
            self.r_instr = np.zeros((0, READERS), np.int32)
            self.r_tag = np.zeros((0, READERS), np.int32)
            self.r_next = np.zeros(0, np.int8)

    def ensure(self, end: int) -> None:
        if end <= len(self.data):
            return
        new = min(self.size, max(end, 2 * len(self.data), 4096))
        grown = np.full(new, 0xFF, dtype=np.uint8)
        grown[:len(self.data)] = self.data
        self.data = grown
        if self.race:
            cells = -(-new // self.cell)
            extra = cells - self.ncells

            def pad(a: np.ndarray, fill: int) -> np.ndarray:
                shape = (extra,) + a.shape[1:]
                return np.concatenate([a, np.full(shape, fill, dtype=a.dtype)])

            self.w_agent = pad(self.w_agent, -1)
            self.w_clk = pad(self.w_clk, 0)
            self.w_instr = pad(self.w_instr, 0)
            self.w_tag = pad(self.w_tag, 0)
            self.r_agent = pad(self.r_agent, -1)
            self.r_clk = pad(self.r_clk, 0)
            self.r_instr = pad(self.r_instr, 0)
            self.r_tag = pad(self.r_tag, 0)
            self.r_next = pad(self.r_next, 0)
            self.ncells = cells


@dataclass
class Buffers:
    """A GPU's logical buffers: type -> (allocation, byte offset in it, size)."""

    table: dict[str, tuple[Alloc, int, int]]
    const: dict[str, int]  # offset of the buffer in its allocation (added to remote offsets by the accessor)


# ----- knowledge -----------------------------------------------------------------------------------------


class Interner:
    """Frozen knowledge vectors (what a signal, semaphore release or barrier generation carries): each held once
    per content, read-only, in the narrowest unsigned type that holds its values (the values, not the type, are
    what every reader uses: ``np.maximum`` into a thread block's own int32 vector, comparisons).  The race detector
    keeps one per channel end and per release, each as long as the agents; shared and narrowed they take a
    fraction of the memory (128 GPUs: gigabytes)."""

    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary[tuple[str, bytes], np.ndarray] = weakref.WeakValueDictionary()

    def freeze(self, x: np.ndarray | None) -> np.ndarray | None:
        """``x``'s values as a shared read-only vector (``x`` itself is left as it was); None stays None."""
        if x is None or (not x.flags.writeable and x.dtype != np.int32):
            return x  # None, or already frozen
        if x.size and (int(x.min()) < 0 or int(x.max()) > 0xFFFF):
            y = x
        else:
            y = x.astype(np.uint8 if not x.size or int(x.max()) <= 0xFF else np.uint16)
        key = (y.dtype.str, hashlib.blake2b(y.data, digest_size=16).digest())
        held = self._held.get(key)
        if held is not None and np.array_equal(held, y):
            return held
        if y is x:
            y = x.copy()
        y.flags.writeable = False
        self._held[key] = y
        return y

    def freeze_all(self, xs: tuple) -> tuple:
        """:meth:`freeze` of each vector of ``xs`` (a token or a release), one object for equal contents."""
        return tuple(self.freeze(x) for x in xs)


# ----- program -----------------------------------------------------------------------------------------


@dataclass
class Instr:
    gid: int  # global index (names the operation in race reports)
    gpu: int
    tb: int
    path: str
    op: Op
    kind: str  # op name, or "pipe" / "endpipe"
    iters: int = 0  # pipeline: iterations at this size
    unit: int = 0
    body: int = 0  # pipeline: number of inner instructions
    inner: bool = False


class TbState:
    __slots__ = ("gpu", "pos", "agent", "prog", "pc", "frames", "seg", "full", "ctrl", "lanes", "done", "launch",
                 "waiting", "ticket", "gen", "blocked_on")

    def __init__(self, gpu: int, pos: int, agent: int, prog: list[Instr]) -> None:
        self.gpu, self.pos, self.agent, self.prog = gpu, pos, agent, prog
        self.pc = 0
        self.frames: list[list[int]] = []  # [start pc, end pc, iteration, iterations, unit]
        self.seg = 1
        self.full: np.ndarray | None = None
        self.ctrl: np.ndarray | None = None
        self.lanes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.done = False
        self.launch = 1
        self.waiting: str = ""
        self.ticket: dict[int, int] = {}  # semaphore -> ticket while blocked in sem_acquire
        self.gen: int | None = None  # barrier generation while blocked
        self.blocked_on: Any = None
