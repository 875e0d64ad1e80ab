"""The one shape of every result forestcoll returns.

As :class:`scipy.optimize.OptimizeResult` is one shape for every solver, every
object a forestcoll computation hands back (:class:`~forestcoll.bound.Bound`,
:class:`~forestcoll.bound.report.BoundReport`,
:class:`~forestcoll.schedule.Schedule`, :class:`~forestcoll.verify.VerifyReport`,
:class:`~forestcoll.msccl.export.ExportResult`,
:class:`~forestcoll.msccl.lint.LintReport`,
:class:`~forestcoll.msccl.run_result.RunResult` and ``RunReport``,
:class:`~forestcoll.simulate.core.SimResult`,
:class:`~forestcoll.simulate.sweep.Comparison`,
:class:`~forestcoll.simulate.select.Selection` and ``SizeExport``,
:class:`~forestcoll.topology.show.Summary`) has

* ``ok`` (bool): whether what was asked for holds: the file is valid, the run
  gave the right result, the schedule fits the runtime.  Results of
  computations that either succeed or raise (a bound, a schedule, a simulated
  call) are always ok;
* ``message`` (str): one line for people saying what happened (the first
  problem when not ok);
* ``to_dict()``: the JSON-ready form (exact values as ``"p/q"`` strings), the
  one ``--json`` prints.

Failures of the request itself (bad input, impossible parameters) are not
results: they raise :class:`~forestcoll.errors.ForestCollError` subclasses.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Result"]


@runtime_checkable
class Result(Protocol):
    """What every forestcoll result provides (see the module docstring)."""

    @property
    def ok(self) -> bool: ...

    @property
    def message(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...
