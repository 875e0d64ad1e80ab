"""MSCCL++ execution plans: model, parser and writer (:mod:`.plan`), the executor's semantics (:mod:`.semantics`),
static checks (:mod:`.lint`), a faithful interpreter with race detection (:mod:`.interpreter` over :mod:`.machine`,
:mod:`.sync`, :mod:`.dataops`, :mod:`.state`; verdicts in :mod:`.run_result`) and the exporter from tree schedules
(:mod:`.export` over :mod:`.lower`, :mod:`.emit`, :mod:`.export_ll`).  docs/mscclpp.md describes the format and
semantics."""

from forestcoll.mscclpp.export import ExportError, ExportOptions, ExportResult, export_mscclpp, self_check
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.mscclpp.lint import Finding, LintReport, lint_plan
from forestcoll.mscclpp.lower import box_numbers, port_edges
from forestcoll.mscclpp.plan import Plan, PlanError, parse_plan, plan_from_json, plan_stats, read_plan, write_plan
from forestcoll.mscclpp.run_result import RunResult, Stuck

__all__ = ["ExportError", "ExportOptions", "ExportResult", "Finding", "LintReport", "Plan", "PlanError", "RunResult",
           "Stuck", "box_numbers", "export_mscclpp", "lint_plan", "parse_plan", "plan_from_json", "plan_stats",
           "port_edges", "read_plan", "run_plan", "self_check", "write_plan"]
