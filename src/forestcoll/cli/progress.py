"""The progress display of the command line: a bar on stderr for operations longer than ~2 s.

``with progress_display(quiet) as progress:`` yields a :data:`forestcoll.progress.Progress` callback to
hand to a long library call, or ``None`` (the library then reports nothing) when ``--quiet`` was given
or stderr is not a terminal.  The callback only records the latest ``(stage, done, total)``; a timer
shows the bar (stage, count/total, elapsed, ETA; rich, imported only then) once the operation has run
``delay`` seconds, so short commands never draw anything and never import rich.  The bar is transient:
it is erased when the operation ends, before the command prints its result.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from forestcoll.progress import Progress

if TYPE_CHECKING:
    from argparse import Namespace

__all__ = ["DELAY_S", "ProgressDisplay", "progress_display"]

DELAY_S = 2.0  # an operation shorter than this shows nothing


class ProgressDisplay:
    """Latest progress state, drawn as a rich bar from ``delay`` seconds after :meth:`start` until :meth:`stop`."""

    def __init__(self, stream: IO[str], delay: float = DELAY_S) -> None:
        self.stream = stream
        self.delay = delay
        self.state: tuple[str, int, int | None] | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._bar: Any = None  # rich.progress.Progress once shown
        self._task: Any = None
        self._stage: str | None = None
        self._stopped = False
        self._began = time.monotonic()

    def __call__(self, stage: str, done: int, total: int | None = None) -> None:
        """The :data:`~forestcoll.progress.Progress` callback: remember the state, update the bar when shown."""
        self.state = (stage, done, total)
        if self._bar is not None:
            with self._lock:
                self._draw()

    def start(self) -> None:
        self._began = time.monotonic()
        self._timer = threading.Timer(self.delay, self._show)
        self._timer.daemon = True
        self._timer.start()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._stopped = True
            if self._bar is not None:
                self._bar.stop()
                self._bar = None

    @property
    def shown(self) -> bool:
        """Whether the bar has been drawn (tests)."""
        return self._task is not None

    def _show(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
        from rich.text import Text

        began = self._began

        class Elapsed(ProgressColumn):
            """Time since the operation began (a stage's own clock restarts with the stage, for its ETA)."""

            def render(self, task) -> Text:
                seconds = int(time.monotonic() - began)
                return Text(f"{seconds // 60}:{seconds % 60:02d}", style="progress.elapsed")

        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            Elapsed(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=Console(file=self.stream),
            transient=True,
        )
        with self._lock:
            if self._stopped:
                return
            self._bar = bar
            self._task = bar.add_task("working", total=None)
            self._draw()
            bar.start()

    def _draw(self) -> None:
        """Put the latest state on the bar (caller holds the lock); a new stage restarts the count and the ETA."""
        if self.state is None or self._bar is None:
            return
        stage, done, total = self.state
        if stage != self._stage:
            self._stage = stage
            self._bar.reset(self._task, total=total, completed=done, description=stage)
        else:
            self._bar.update(self._task, total=total, completed=done)


@contextmanager
def progress_display(quiet: bool = False, stream: IO[str] | None = None, delay: float = DELAY_S) -> Iterator[Progress | None]:
    """A progress callback for one long operation, or None when ``quiet`` or ``stream`` (stderr) is not a terminal."""
    stream = sys.stderr if stream is None else stream
    if quiet or not _is_terminal(stream):
        yield None
        return
    display = ProgressDisplay(stream, delay)
    display.start()
    try:
        yield display
    finally:
        display.stop()


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or not a file
        return False


def progress_for(args: Namespace):
    """The progress display of one long library call: a bar on a terminal after ~2 s, nothing with --quiet
    (:func:`progress_display`); use as ``with progress_for(args) as progress:``."""
    return progress_display(getattr(args, "quiet", False))
