"""One schedule's MSCCL++ plan for many sizes, exported once (what ``generate --sizes --format mscclpp`` needs).

Why a plan can be cut again without exporting it again.  :func:`forestcoll.mscclpp.export.export_mscclpp` reads the
design size and the size range (``design_size``, ``min_message_size``, ``max_message_size``) in two places only:
the pipeline unit of each piece size (``_tree_units``: the slices at the design size, at most 65,535 iterations at
the largest size), which the emitter writes as the ``unit_size`` of every ``pipeline`` operation moving pieces of
that size (``iter_context = (units[num_chunks], num_chunks)``), and the plan's ``min_message_size`` /
``max_message_size`` fields; the name comes from ``name``.  Everything else (the lowering, the layout tried and
kept, the blocks, their operations and channels, the notes, every refusal) depends on the schedule, the topology
and the other options alone: the layouts are chosen by counting blocks and checking operations and channels,
never units.  An LL plan has no units (its packets are not cut by size).  So the export of ``sched`` with
``opts`` is the export with any other size fields (:func:`recut`), its units recomputed and written in; the
equality is tested plan by plan (tests/test_mscclpp_recut.py) over collectives, layouts, lanes, protocols and
sizes.  :class:`Cuts` keeps one export per (schedule, options but the size fields) and recuts it.
"""

from __future__ import annotations

import time
from dataclasses import replace

from forestcoll.mscclpp.export import (
    ExportError,
    ExportOptions,
    ExportResult,
    _tree_units,
    _write_exported,
    export_mscclpp,
    plan_name,
)
from forestcoll.mscclpp.floor import lanes_of
from forestcoll.mscclpp.plan import Op, Plan
from forestcoll.schedule import Schedule
from forestcoll.topology import Topology

__all__ = ["Cuts", "recut", "restamp"]


def restamp(plan: Plan, units: dict[int, int]) -> Plan:
    """``plan`` with every ``pipeline`` operation's ``unit_size`` set to ``units[num_chunks]`` (the same objects
    where nothing changes)."""

    def ops(seq: tuple[Op, ...]) -> tuple[Op, ...]:
        out = []
        for op in seq:
            if op.name == "pipeline" and op.iter_context is not None:
                unit = units[op.iter_context[1]]
                if unit != op.iter_context[0] or op.ops:
                    op = replace(op, iter_context=(unit, op.iter_context[1]), ops=ops(op.ops) if op.ops else op.ops)
            out.append(op)
        return tuple(out)

    return replace(plan, gpus=tuple(replace(g, threadblocks=tuple(replace(tb, ops=ops(tb.ops)) for tb in g.threadblocks))
                                    for g in plan.gpus))


def recut(result: ExportResult, sched: Schedule, opts: ExportOptions) -> ExportResult:
    """The unchecked :func:`export_mscclpp` of ``sched`` with ``opts`` (``check`` is not run here), made from
    ``result``, the export of the same schedule and topology with options that differ from ``opts`` in
    ``design_size``, ``min_message_size``, ``max_message_size``, ``name`` or ``check`` only (module docstring)."""
    t0 = time.perf_counter()
    opts.validate()
    hi = opts.resolved_max()
    plan = result.plan
    if plan.protocol == "LL":
        units: dict[int, int] = {}
    else:
        units = _tree_units(sched.collective, sum(sched.weights), result.chunks_per_root, lanes_of(opts), result.pieces,
                            opts.design_size or min(hi, 1 << 30), hi, opts)
        if units != result.units:
            plan = restamp(plan, units)
    plan = replace(plan, name=plan_name(sched, opts), min_message_size=opts.min_message_size, max_message_size=hi)
    return ExportResult(plan, result.stats, result.chunks_per_root, units, time.perf_counter() - t0,
                        layout=result.layout, notes=list(result.notes), inbox_port_edges=result.inbox_port_edges,
                        pieces=result.pieces)


_SIZE_FIELDS = {"design_size": None, "min_message_size": 0, "max_message_size": None, "name": None, "check": False}


class Cuts:
    """Unchecked MSCCL++ exports of schedules on ``topology``, one per (schedule, options but the size fields), each
    recut (:func:`recut`) for the options asked: :meth:`export` is ``export_mscclpp(sched, topology, opts)``
    without its self-check, :meth:`write` is :func:`forestcoll.mscclpp.export.write_mscclpp`."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.done: dict[tuple[int, ExportOptions], tuple[Schedule, ExportResult | str]] = {}
        self.exports = 0  # export_mscclpp calls made (the rest were recut)

    def _template(self, sched: Schedule, opts: ExportOptions) -> ExportResult:
        key = (id(sched), replace(opts, **_SIZE_FIELDS))
        if key not in self.done:  # the schedule is kept with it: its id is not reused while this lives
            self.exports += 1
            try:
                self.done[key] = (sched, export_mscclpp(sched, self.topology, key[1]))
            except ExportError as exc:
                self.done[key] = (sched, str(exc))
        got = self.done[key][1]
        if isinstance(got, str):
            raise ExportError(got)
        return got

    def export(self, sched: Schedule, opts: ExportOptions) -> ExportResult:
        """``export_mscclpp(sched, self.topology, opts)`` with ``check`` False (the same plan, notes, or ExportError
        message)."""
        opts.validate()
        return recut(self._template(sched, opts), sched, opts)

    def write(self, sched: Schedule, path: str, opts: ExportOptions) -> ExportResult:
        """``write_mscclpp(sched, path, self.topology, opts)``: the export, self-checked unless ``opts.check`` is
        False, its idle-port note, the file written whole."""
        return _write_exported(self.prepare(sched, opts), path, opts, None)

    def prepare(self, sched: Schedule, opts: ExportOptions) -> ExportResult:
        """What :meth:`write` writes, before its self-check: the export with its idle-port note."""
        from forestcoll.mscclpp.ports import idle_port_note

        result = self.export(sched, opts)
        if note := idle_port_note(sched, self.topology):
            result.notes.append(note)
        return result

    @staticmethod
    def checked(result: ExportResult, opts: ExportOptions) -> tuple[list[str], str]:
        """The self-check :meth:`write` runs on ``result`` (:meth:`prepare`'s; none unless ``opts.check``): its lines
        (an :class:`ExportError` when it fails) and the plan's text (the file's bytes); a call that needs nothing but
        its arguments, so a worker process can run it."""
        from forestcoll.mscclpp.export import self_check
        from forestcoll.mscclpp.plan import write_plan

        text = write_plan(result.plan)
        if not opts.check:
            return [], text
        return self_check(result.plan, launches=max(opts.check_launches, 3 if result.plan.packet else 1),
                          text=text), text

    @staticmethod
    def put(result: ExportResult, path: str, checked: tuple[list[str], str], seconds: float = 0.0) -> ExportResult:
        """``result`` written to ``path`` whole with :meth:`checked`'s lines and text (``seconds``: the check's)."""
        from forestcoll.fileio import atomic_write_text

        result.checks, text = checked
        result.seconds += seconds
        atomic_write_text(path, text)
        result.output = str(path)
        return result
