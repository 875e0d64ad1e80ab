"""The critical path of a simulated call: the chain of transfers whose dependencies decided when it ended, and
what each link of the chain cost (bytes moving or a latency), summed by the kind of operation that issued it.

Walk back from the transfer delivered last: a transfer starts when the last of its dependencies happened (its
*binding* dependency; ties go to the first listed), so the call's time splits exactly into, per transfer on the
chain, the time from its start to its last byte leaving (``moving``: bandwidth time, shares included) and, where
the chain goes on from its delivery, the latency from sent to delivered.  For an MSCCL++ plan every transfer is
labelled with the operation that issued it (:func:`plan_critical_path`: ``put/memory``, ``signal/port``,
``rlxsignal/memory`` at the start handshake, ...); for a tree program every transfer is a tree edge's slice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from forestcoll.simulate.engine import DELIVERED, Program, ProgramBuilder, run
from forestcoll.simulate.network import Network

__all__ = ["CriticalPath", "Step", "baseline_critical_path", "critical_path", "plan_critical_path", "tree_critical_path"]


@dataclass(frozen=True)
class Step:
    """One transfer on the chain: when it started, moved its last byte and (if the chain waited for it) arrived."""

    tid: int
    kind: str
    start: float
    sent: float
    delivered: float | None  # None: the chain went on when it was sent (same-stream order), not when it arrived

    @property
    def moving(self) -> float:
        return self.sent - self.start

    @property
    def latency(self) -> float:
        return 0.0 if self.delivered is None else self.delivered - self.sent


@dataclass
class CriticalPath:
    """The chain (first transfer first), the call's time and, by kind, [transfers, moving s, latency s]."""

    steps: list[Step]
    time: float
    by_kind: dict[str, list] = field(default_factory=dict)

    @property
    def moving(self) -> float:
        return sum(s.moving for s in self.steps)

    @property
    def latency(self) -> float:
        return sum(s.latency for s in self.steps)

    def table(self, ideal: float | None = None) -> str:
        """The chain summed by kind, in microseconds; ``ideal`` (size / bound, s) adds the excess over it."""
        lines = [f"{'kind (latencies, us)':<22} {'on path':>7} {'with bytes':>18} {'zero-byte':>17} {'moving us':>10}"]
        for kind, (n, mov, lat_b, lat_0) in sorted(self.by_kind.items(), key=lambda kv: -(kv[1][2] + kv[1][3])):
            lines.append(f"{kind:<22} {n:>7} {lat_b * 1e6:>18.1f} {lat_0 * 1e6:>17.1f} {mov * 1e6:>10.1f}")
        rows = self.by_kind.values()
        lat_b, lat_0 = sum(r[2] for r in rows), sum(r[3] for r in rows)
        lines.append(f"{'total':<22} {len(self.steps):>7} {lat_b * 1e6:>18.1f} {lat_0 * 1e6:>17.1f} "
                     f"{self.moving * 1e6:>10.1f}   (= {self.time * 1e6:.1f} us)")
        if ideal is not None:
            lines.append(f"size / bound {ideal * 1e6:.1f} us; excess {(self.time - ideal) * 1e6:.1f} us")
        return "\n".join(lines)


def critical_path(program: Program, sent: np.ndarray, delivered: np.ndarray, kinds: list[str] | None = None,
                  nbytes: np.ndarray | None = None) -> CriticalPath:
    """The chain that decided the end of a run of ``program`` (the engine's ``sent`` / ``delivered`` times), each
    transfer labelled by ``kinds`` (default "transfer"); zero-time markers are left out of the steps."""
    n = program.size
    kinds = kinds or ["transfer"] * n
    nb = program.nbytes if nbytes is None else nbytes
    t = int(np.nanargmax(delivered))
    via_delivery = True
    raw: list[tuple[int, float, bool]] = []
    while True:
        deps = program.deps[t]
        start, bind = 0.0, None
        for ev in deps:
            d = ev >> 1
            at = delivered[d] if ev & 1 == DELIVERED else sent[d]
            if bind is None or at > start:
                start, bind = float(at), ev
        raw.append((t, start, via_delivery))
        if bind is None:
            break
        t, via_delivery = bind >> 1, bind & 1 == DELIVERED
    steps: list[Step] = []
    by_kind: dict[str, list] = {}
    for tid, start, via in reversed(raw):
        step = Step(tid, kinds[tid], start, float(sent[tid]), float(delivered[tid]) if via else None)
        if step.moving == 0 and step.latency == 0:
            continue
        steps.append(step)
        row = by_kind.setdefault(step.kind, [0, 0.0, 0.0, 0.0])
        row[0] += 1
        row[1] += step.moving
        row[2 if nb[tid] > 0 else 3] += step.latency
    return CriticalPath(steps, float(np.nanmax(delivered)), by_kind)


def _run(prog: ProgramBuilder, net: Network, sharing: str = "weighted") -> tuple[Program, Any]:
    program = prog.build(sharing)
    return program, run(program, net.capacity)


def plan_critical_path(net: Network, plan: Any, size: int) -> CriticalPath:
    """The critical path of one call of MSCCL++ ``plan`` of ``size`` bytes on ``net`` (the simulator's default
    model), each transfer labelled "op/channel type" by the operation that issued it."""
    from forestcoll.simulate.mscclpp import _Builder

    class Labelled(_Builder):
        def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.label = "start"
            self.kinds: list[str] = []  # the label of each transfer id
            super().__init__(*args, **kwargs)

        def _op(self, b, op, off, unit):  # type: ignore[no-untyped-def]
            piped = any(i[0] == "pipe" for i in b.prog[:b.pc])
            where = "" if b.frames else ("end " if piped else "start ")
            self.label = f"{where}{op.name}" + (f"/{op.channel_type}" if op.channel_type else "")
            return super()._op(b, op, off, unit)

        def send(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            tid = super().send(*args, **kwargs)
            self._mark(tid)
            return tid

        def marker(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            tid = super().marker(*args, **kwargs)
            self._mark(tid)
            return tid

        def _mark(self, tid: int) -> None:
            while len(self.kinds) <= tid:
                self.kinds.append(self.label)

    builder = Labelled(plan, net, float(size), "plan")
    program, res = _run(builder.build(), net)
    return critical_path(program, res.sent, res.delivered, builder.kinds)


def tree_critical_path(net: Network, sched: Any, size: int) -> CriticalPath:
    """The critical path of one call of ``sched``'s trees of ``size`` bytes on ``net`` (default model and slicing)."""
    from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE
    from forestcoll.simulate.trees import tree_program

    prog = tree_program(sched, net, float(size), float(DEFAULT_SLICE), DEFAULT_MAX_SLICES)
    program, res = _run(prog, net)
    return critical_path(program, res.sent, res.delivered, ["tree slice"] * program.size)


def baseline_critical_path(net: Network, name: str, collective: str, size: int) -> CriticalPath:
    """The critical path of one call of baseline ``name`` (ring, double-binary-tree, hierarchical, direct) of
    ``size`` bytes on ``net`` (default model and slicing); every transfer a "NAME slice"."""
    from forestcoll.simulate import baselines
    from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE

    prog = baselines.BASELINES[name](net, collective, float(size), (float(DEFAULT_SLICE), DEFAULT_MAX_SLICES))
    program, res = _run(prog, net)
    return critical_path(program, res.sent, res.delivered, [f"{name} slice"] * program.size)
