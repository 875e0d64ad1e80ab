"""The ``forestcoll`` command line: a thin layer over the library.

:mod:`.parser` declares the commands and flags, :mod:`.commands` turns each
command into one library call, :mod:`.render` prints the result (or its
``to_dict()`` with ``--json``).  Every user error is printed as one line
``forestcoll: error: ...`` on stderr with exit status 2; files are written
whole (temporary file, then rename) or not at all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from forestcoll.errors import ForestCollError

EXIT_USAGE = 2

__all__ = ["EXIT_USAGE", "build_parser", "main"]


def build_parser():
    """The argument parser of every command (see :mod:`.parser`)."""
    from forestcoll.cli.parser import build_parser as build

    return build()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``forestcoll`` console script."""
    try:
        args = build_parser().parse_args(argv)
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
