"""MSCCL++ execution plans: model, parser and writer (:mod:`.plan`), the executor's semantics (:mod:`.semantics`),
static checks (:mod:`.lint`), a faithful interpreter with race detection (:mod:`.interpreter`) and the exporter
from tree schedules (:mod:`.export`, :mod:`.export_ll`).  docs/mscclpp.md describes the format and semantics."""

from forestcoll.mscclpp.export import ExportError, ExportOptions, ExportResult, export_mscclpp, rank_boxes, self_check
from forestcoll.mscclpp.interpreter import RunResult, Stuck, run_plan
from forestcoll.mscclpp.lint import Finding, LintReport, lint_plan
from forestcoll.mscclpp.plan import Plan, PlanError, parse_plan, plan_from_json, plan_stats, read_plan, write_plan

__all__ = ["ExportError", "ExportOptions", "ExportResult", "Finding", "LintReport", "Plan", "PlanError", "RunResult",
           "Stuck", "export_mscclpp", "lint_plan", "parse_plan", "plan_from_json", "plan_stats", "rank_boxes",
           "read_plan", "run_plan", "self_check", "write_plan"]
