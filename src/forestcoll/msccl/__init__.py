"""MSCCL algorithm files: model and parser (:mod:`.ir`), the runtime's semantics (:mod:`.semantics`), static
checks (:mod:`.lint`), a faithful interpreter (:mod:`.interpreter`, results in :mod:`.run_result`) and the
exporter from schedules (:mod:`.export`)."""

from forestcoll.msccl.export import ExportError, ExportOptions, ExportResult, export_msccl, self_check, write_msccl
from forestcoll.msccl.interpreter import run_algo, run_file, run_modes
from forestcoll.msccl.ir import Algo, MscclError, parse_algo, read_algo, write_algo
from forestcoll.msccl.lint import RUNTIMES, Finding, LintReport, lint, lint_file
from forestcoll.msccl.run_result import RunReport, RunResult

__all__ = ["RUNTIMES", "Algo", "ExportError", "ExportOptions", "ExportResult", "Finding", "LintReport", "MscclError",
           "RunReport", "RunResult", "export_msccl", "lint", "lint_file", "parse_algo", "read_algo", "run_algo",
           "run_file", "run_modes", "self_check", "write_algo", "write_msccl"]
