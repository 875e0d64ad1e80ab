"""``-o -``: a command's one output file written to stdout, its report (what it prints otherwise) to stderr.

As most tools read ``-o -`` (curl, sort, gcc): the file's bytes are all that stdout carries, so
``forestcoll generate ring:n=4 -o - | jq .k`` works.  Outputs that are not one text file are refused
in one line before any work: ``generate --sizes`` (a directory of files), ``compare -o`` and ``topo draw``
(pictures, whose format comes from the name's extension), and ``--json`` (the report would share stdout).
A file named ``-`` is still written as ``-o ./-``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from forestcoll.errors import UsageError

__all__ = ["STDOUT", "run_to_stdout"]

STDOUT = "-"


def _refuse(args: argparse.Namespace) -> None:
    """One UsageError for an output that ``-o -`` cannot be (see the module docstring)."""
    name = getattr(args.func, "__name__", "")
    if name == "cmd_topo_draw" or name == "cmd_compare":
        what = "topo draw" if name == "cmd_topo_draw" else "compare"
        raise UsageError(f"{what} -o takes a picture file (.png, .svg or .pdf: its extension sets the format), not -")
    if getattr(args, "sizes", None) is not None:
        raise UsageError("--sizes writes one file per size range into the directory -o names; -o - (stdout) holds one "
                         "file: give a directory")
    if getattr(args, "json", False):
        raise UsageError("--json prints the report on stdout, where -o - writes the file; leave out one of them")


def run_to_stdout(args: argparse.Namespace) -> int:
    """Run the command of ``args`` (whose ``output`` is ``-``): the file it writes goes to stdout (``args.output``
    becomes a :class:`~forestcoll.fileio.Stream` of the real stdout, which the writers are given as their path), what
    it prints to stderr."""
    from forestcoll.fileio import Stream

    _refuse(args)
    args.output = Stream(sys.stdout)
    with contextlib.redirect_stdout(sys.stderr):
        return int(args.func(args) or 0)
