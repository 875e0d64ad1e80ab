"""MSCCL algorithm files: model and parser (:mod:`.ir`), static checks (:mod:`.lint`),
a faithful interpreter (:mod:`.interpreter`) and the exporter from schedules (:mod:`.export`)."""

from forestcoll.msccl.export import ExportError, ExportOptions, ExportResult, export_msccl, self_check
from forestcoll.msccl.interpreter import RunResult, run_algo, run_modes
from forestcoll.msccl.ir import Algo, MscclError, parse_algo, read_algo, write_algo
from forestcoll.msccl.lint import RUNTIMES, Finding, lint

__all__ = ["RUNTIMES", "Algo", "ExportError", "ExportOptions", "ExportResult", "Finding", "MscclError", "RunResult",
           "export_msccl", "lint", "parse_algo", "read_algo", "run_algo", "run_modes", "self_check", "write_algo"]
