"""What an interpreted run of an MSCCL++ plan found: :class:`RunResult` (the verdict) and :class:`Stuck` (a thread
block that cannot move at the end of a deadlocked run)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunResult", "Stuck"]



@dataclass(frozen=True)
class Stuck:
    """A thread block that cannot move at the end of a deadlocked run."""

    gpu: int
    tb: int
    path: str
    op: str
    launch: int
    iteration: int | None
    reason: str

    def format(self) -> str:
        it = f" iteration {self.iteration}" if self.iteration is not None else ""
        call = f" (call {self.launch})" if self.launch > 1 else ""
        return f"gpu {self.gpu} tb {self.tb} {self.path} ({self.op}{it}){call}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "tb": self.tb, "path": self.path, "op": self.op, "launch": self.launch,
                "iteration": self.iteration, "reason": self.reason}


@dataclass
class RunResult:
    """What one interpreted run did and whether the collective came out right (``ok``: right and race-free)."""

    source: str
    collective: str
    mode: str
    size: int
    input_size: int
    output_size: int
    dtype: str
    launches: int
    ngpus: int
    threadblocks: int = 0
    ops_executed: int = 0
    bytes_moved: int = 0
    seconds: float = 0.0
    checked: bool = False
    race_checked: bool = False
    root: int | None = None
    errors: list[str] = field(default_factory=list)
    races: list[str] = field(default_factory=list)
    relaxed: list[str] = field(default_factory=list)  # accesses ordered only through relaxed signals (warnings)
    stuck: list[Stuck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.races and not self.stuck

    @property
    def deadlocked(self) -> bool:
        return bool(self.stuck)

    @property
    def message(self) -> str:
        if self.stuck:
            return f"DEADLOCK: {len(self.stuck)} thread block(s) stuck; first: {self.stuck[0].format()}"
        if self.errors:
            return f"WRONG: {self.errors[0]}"
        if self.races:
            return f"RACE: {self.races[0]}"
        calls = f" in {self.launches} back-to-back calls" if self.launches > 1 else ""
        races = ", no data race" if self.race_checked else ""
        if not self.checked:
            return f"ran to completion{calls}{races} (no postcondition for {self.collective!r})"
        root = f" from root {self.root}" if self.root is not None else ""
        weak = f" ({len(self.relaxed)} access(es) ordered only by relaxed signals)" if self.relaxed else ""
        return (f"OK: {self.mode} {self.collective}{root} of {self.size} bytes right on {self.ngpus} GPUs{calls}{races}"
                + (", inputs untouched" if self.mode == "out-of-place" else "") + weak)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "message": self.message, "source": self.source, "collective": self.collective,
            "mode": self.mode, "size": self.size, "input_size": self.input_size, "output_size": self.output_size,
            "dtype": self.dtype, "launches": self.launches, "ngpus": self.ngpus, "threadblocks": self.threadblocks,
            "ops_executed": self.ops_executed, "bytes_moved": self.bytes_moved, "seconds": round(self.seconds, 4),
            "checked": self.checked, "race_checked": self.race_checked, "root": self.root, "errors": self.errors,
            "races": self.races, "relaxed_only": self.relaxed, "deadlock": [s.to_dict() for s in self.stuck], "notes": self.notes,
        }
