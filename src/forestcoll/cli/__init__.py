"""The ``forestcoll`` command line: a thin layer over the library.

:mod:`.parser` declares the commands and flags, :mod:`.commands` turns each
command into one library call, :mod:`.render` prints the result (or its
``to_dict()`` with ``--json``).  Every user error is printed as one line
``forestcoll: error: ...`` on stderr with exit status 2; files are written
whole (temporary file, then rename) or not at all.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence

from forestcoll.errors import ForestCollError

EXIT_USAGE = 2
GC_YOUNG = 100_000  # allocations between two collections of the youngest generation while a command runs

__all__ = ["EXIT_USAGE", "build_parser", "main"]


COMMANDS = ("bound", "generate", "simulate", "compare", "export", "msccl", "mscclpp", "verify", "topo")


def build_parser(only: str | None = None):
    """The argument parser of every command, or of command ``only`` alone (see :mod:`.parser`)."""
    from forestcoll.cli.parser import build_parser as build

    return build(only)


def _command(argv: Sequence[str]) -> str | None:
    """The command a command line runs: its first word that is not an option (the top-level options take no
    values), when that is a command's name; else None (top-level help, a typo: the whole parser answers)."""
    for word in argv:
        if word in ("-h", "--help"):
            return None  # the top-level help lists every command
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``forestcoll`` console script."""
    # The command line does no linear algebra: one BLAS thread, so numpy's import does not start (and spin) a
    # thread per core — ~0.1 s CPU of every process on the 2-core machine.  A user's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # The cyclic garbage collector, at CPython's default (a young collection every 700 allocations, and the older
    # generations' walks over every live object that follow), took ~40 % of a program build and simulation: they
    # allocate millions of small lists that live until the stage ends.  Collected less often, the same cycles are
    # freed (generate dgx-a100:nodes=2 --format mscclpp: 12.5 -> 7.2 s CPU, the same memory); restored on return.
    was = gc.get_threshold()
    gc.set_threshold(max(was[0], GC_YOUNG), *was[1:])
    try:
        return _main(argv)
    finally:
        gc.set_threshold(*was)


def _main(argv: Sequence[str] | None) -> int:
    """:func:`main` under its collector setting."""
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(_command(words)).parse_args(words)
        if getattr(args, "output", None) == "-":  # the file to stdout, the report to stderr
            from forestcoll.cli.stdout import run_to_stdout

            return run_to_stdout(args)
        return int(args.func(args) or 0)
    except ForestCollError as exc:
        print(f"forestcoll: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("forestcoll: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: say so in one line unless asked for the traceback
        if os.environ.get("FORESTCOLL_DEBUG"):
            import traceback  # only here: ~8 ms of every start otherwise

            traceback.print_exc()
        print(f"forestcoll: internal error: {type(exc).__name__}: {exc} (set FORESTCOLL_DEBUG=1 for details)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
