"""Progress reporting contract shared by library functions and the CLI.

A long-running library function takes an optional ``progress`` callback and calls
``progress(stage, done, total)`` as work advances: ``stage`` names the step in a few
words ("packing trees", "simulating candidates"), ``done`` counts finished units and
``total`` is the number of units (``None`` when unknown).  Library code never prints;
the CLI turns the calls into a display on a terminal (``forestcoll.cli.progress``) and
passes ``None`` for ``--quiet`` or a non-terminal stderr.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress", "report"]

Progress = Callable[[str, int, "int | None"], None]


def report(progress: Progress | None, stage: str, done: int, total: int | None = None) -> None:
    """Call ``progress(stage, done, total)`` when a callback was given; do nothing otherwise."""
    if progress is not None:
        progress(stage, done, total)
