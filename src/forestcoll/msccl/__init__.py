"""MSCCL algorithm files: model and parser (:mod:`.ir`), the runtime's semantics (:mod:`.semantics`), static
checks (:mod:`.lint`), a faithful interpreter (:mod:`.interpreter`, results in :mod:`.run_result`) and the
exporter from schedules (:mod:`.export`)."""

from forestcoll.lazy import lazy_exports

# each name imports its module on first use (see forestcoll.lazy): the CLI loads only what a command runs
lazy_exports(
    __name__,
    {
        "ExportError": "forestcoll.msccl.export",
        "ExportOptions": "forestcoll.msccl.export",
        "ExportResult": "forestcoll.msccl.export",
        "export_msccl": "forestcoll.msccl.export",
        "self_check": "forestcoll.msccl.export",
        "write_msccl": "forestcoll.msccl.export",
        "run_algo": "forestcoll.msccl.interpreter",
        "run_file": "forestcoll.msccl.interpreter",
        "run_modes": "forestcoll.msccl.interpreter",
        "Algo": "forestcoll.msccl.ir",
        "MscclError": "forestcoll.msccl.ir",
        "parse_algo": "forestcoll.msccl.ir",
        "read_algo": "forestcoll.msccl.ir",
        "write_algo": "forestcoll.msccl.ir",
        "RUNTIMES": "forestcoll.msccl.lint",
        "Finding": "forestcoll.msccl.lint",
        "LintReport": "forestcoll.msccl.lint",
        "lint": "forestcoll.msccl.lint",
        "lint_file": "forestcoll.msccl.lint",
        "RunReport": "forestcoll.msccl.run_result",
        "RunResult": "forestcoll.msccl.run_result",
    },
)

__all__ = ["RUNTIMES", "Algo", "ExportError", "ExportOptions", "ExportResult", "Finding", "LintReport", "MscclError",
           "RunReport", "RunResult", "export_msccl", "lint", "lint_file", "parse_algo", "read_algo", "run_algo",
           "run_file", "run_modes", "self_check", "write_algo", "write_msccl"]
