"""MSCCL++ execution plans: model, parser and writer (:mod:`.plan`), the executor's semantics (:mod:`.semantics`),
static checks (:mod:`.lint`), a faithful interpreter with race detection (:mod:`.interpreter` over :mod:`.machine`,
:mod:`.sync`, :mod:`.dataops`, :mod:`.state`; verdicts in :mod:`.run_result`) and the exporter from tree schedules
(:mod:`.export` over :mod:`.lower`, :mod:`.emit`, :mod:`.export_ll`).  docs/mscclpp.md describes the format and
semantics."""

from forestcoll.lazy import lazy_exports

# each name imports its module on first use (see forestcoll.lazy): the CLI loads only what a command runs
lazy_exports(
    __name__,
    {
        "ExportError": "forestcoll.mscclpp.export",
        "ExportOptions": "forestcoll.mscclpp.export",
        "ExportResult": "forestcoll.mscclpp.export",
        "export_mscclpp": "forestcoll.mscclpp.export",
        "self_check": "forestcoll.mscclpp.export",
        "run_plan": "forestcoll.mscclpp.interpreter",
        "Finding": "forestcoll.mscclpp.lint",
        "LintReport": "forestcoll.mscclpp.lint",
        "lint_plan": "forestcoll.mscclpp.lint",
        "box_numbers": "forestcoll.mscclpp.lower",
        "port_edges": "forestcoll.mscclpp.lower",
        "Plan": "forestcoll.mscclpp.plan",
        "PlanError": "forestcoll.mscclpp.plan",
        "parse_plan": "forestcoll.mscclpp.plan",
        "plan_from_json": "forestcoll.mscclpp.plan",
        "plan_stats": "forestcoll.mscclpp.plan",
        "read_plan": "forestcoll.mscclpp.plan",
        "write_plan": "forestcoll.mscclpp.plan",
        "RunResult": "forestcoll.mscclpp.run_result",
        "Stuck": "forestcoll.mscclpp.run_result",
    },
)

__all__ = ["ExportError", "ExportOptions", "ExportResult", "Finding", "LintReport", "Plan", "PlanError", "RunResult",
           "Stuck", "box_numbers", "export_mscclpp", "lint_plan", "parse_plan", "plan_from_json", "plan_stats",
           "port_edges", "read_plan", "run_plan", "self_check", "write_plan"]
