"""What running an MSCCL file in the interpreter gives: one :class:`RunResult` per buffer mode, a
:class:`RunReport` for a file (results, :mod:`forestcoll.results`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forestcoll.msccl.ir import Algo

__all__ = ["RunReport", "RunResult", "Stuck"]


@dataclass(frozen=True)
class Stuck:
    """A thread block that cannot move at the end of a deadlocked run."""

    gpu: int
    tb: int
    iteration: int
    s: int
    line: int
    type: str
    reason: str

    def format(self) -> str:
        return f"gpu {self.gpu} tb {self.tb} step {self.s} ({self.type}, line {self.line}, iteration {self.iteration}): {self.reason}"


@dataclass
class RunResult:
    """What one interpreted run did and whether the collective came out right."""

    source: str
    coll: str
    mode: str
    ngpus: int
    count: int
    chunk_elems: int
    dtype: str
    op: str
    iterations: int
    slots: int
    nbytes: int | None = None
    max_count: int = 1
    root: int | None = None
    transmissions: int = 0
    calls: int = 0
    elements_moved: int = 0
    seconds: float = 0.0
    checked: bool = False
    race_checked: bool = False
    errors: list[str] = field(default_factory=list)
    stuck: list[Stuck] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and not self.stuck

    @property
    def deadlocked(self) -> bool:
        return bool(self.stuck)

    @property
    def message(self) -> str:
        """One line: OK, WRONG (the first error) or DEADLOCK (same as :meth:`summary`)."""
        return self.summary()

    def summary(self) -> str:
        if self.stuck:
            return f"DEADLOCK: {len(self.stuck)} thread block(s) stuck"
        if self.errors:
            return f"WRONG: {self.errors[0]}"
        races = ", no data race" if self.race_checked else ""
        if not self.checked:
            return f"ran to completion{races} (no postcondition for {self.coll})"
        root = f" at root {self.root}" if self.root is not None and self.coll == "reduce" else ""
        return f"OK: outputs equal the reference {self.coll}{root}{races}" + (
            ", inputs untouched" if self.mode == "out-of-place" else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "source": self.source,
            "coll": self.coll,
            "mode": self.mode,
            "ngpus": self.ngpus,
            "count": self.count,
            "chunk_elems": self.chunk_elems,
            "dtype": self.dtype,
            "op": self.op,
            "iterations": self.iterations,
            "slots": self.slots,
            "regime_bytes": self.nbytes,
            "max_count": self.max_count,
            "root": self.root,
            "transmissions": self.transmissions,
            "calls": self.calls,
            "elements_moved": self.elements_moved,
            "seconds": round(self.seconds, 4),
            "checked": self.checked,
            "race_checked": self.race_checked,
            "errors": self.errors,
            "deadlock": [s.format() for s in self.stuck],
        }


@dataclass
class RunReport:
    """Every run of one file (one per buffer mode); ``ok`` when all came out right."""

    file: str
    algo: Algo
    runs: list[RunResult]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.runs)

    @property
    def failed(self) -> RunResult | None:
        """The first run that went wrong (None when all are ok)."""
        return next((r for r in self.runs if not r.ok), None)

    @property
    def message(self) -> str:
        bad = self.failed
        if bad is None:
            return f"{self.file}: " + "; ".join(f"{r.mode}: {r.summary()}" for r in self.runs)
        what = f"deadlock: {bad.stuck[0].format()}" if bad.stuck else bad.errors[0]
        return f"{self.file} ({bad.mode}): {what}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "ok": self.ok, "runs": [r.to_dict() for r in self.runs]}
