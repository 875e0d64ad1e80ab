"""User-facing errors.

Every error a user can cause (bad topology, bad flag, malformed file) is a
:class:`ForestCollError`; the CLI prints its message as one line on stderr and
exits with status 2.  Anything else escaping is a bug in forestcoll.
"""

from __future__ import annotations

__all__ = ["ForestCollError", "ScheduleError", "SimulationTooLarge", "TopologyError", "UsageError"]


class ForestCollError(Exception):
    """An error caused by the input, with a one-line message for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class TopologyError(ForestCollError):
    """The topology is malformed, invalid or cannot be built."""


class ScheduleError(ForestCollError):
    """A schedule file is malformed or does not fit its topology."""


class UsageError(ForestCollError):
    """A command-line argument or API parameter is invalid."""


class SimulationTooLarge(UsageError):
    """A simulation refused because it would build more transfers than :data:`forestcoll.limits.MAX_SIM_TRANSFERS`
    (a candidate whose simulation is refused loses its race; asked for directly, it is the user's error)."""
