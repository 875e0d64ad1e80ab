"""One size's :func:`~forestcoll.simulate.race.race` with its contenders simulated in worker processes, giving
exactly what the sequential race gives, whatever the number of workers.

The sequential race tries the contenders one after another (``first``, then by link bound) and simulates each
only until the best time found so far (its limit) has passed.  :class:`RacePool` runs the same race with the
simulations handed out to workers: the link bounds are computed by the workers while ``first`` is simulated; then
the others are handed out in the race's order, each with the best time known *when it is handed out* as its
limit.  That limit is never below the sequential one (fewer times are known, and a time the sequential race would
not have found is still above its limit), so a worker prunes or stops only what the sequential race prunes or
stops, and it may simulate more.  The results are then replayed in the race's order against the sequential
limits: a simulation's time does not depend on where it would have been stopped (``stop_at`` only ends the run,
once the next event lies after it; the events' times only grow and the last one is the call's end), so a finished
run is kept exactly when its time is within the sequential limit, and a run stopped at a limit at least the
sequential one is stopped there too.  The results, their order and the
pruned bounds are :func:`~forestcoll.simulate.race.race`'s; a contender the workers left without what the replay
needs (never, by the argument above) is simulated in this process.
"""

from __future__ import annotations

import math
import multiprocessing
import resource
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing.connection import wait as wait_any
from typing import Any

from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE
from forestcoll.simulate.network import Network
from forestcoll.simulate.race import RaceResult, attempt, link_per_byte, race, race_limit, race_loop, race_order, tree_lowering

__all__ = ["Forked", "Job", "RacePool", "children_cpu"]

_NET: Network | None = None
_CANDIDATES: Mapping[str, Any] = {}
# workers forked after the contenders exist inherit them and the network: nothing is pickled but the results (a
# dgx-a100:nodes=2 size's 8 plans pickle to 3.4 MB); where fork is missing they are pickled once per worker
_CONTEXT = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def _init(net: Network, candidates: Mapping[str, Any]) -> None:
    global _NET, _CANDIDATES
    _NET, _CANDIDATES = net, candidates


def _per_byte(job: tuple) -> float:
    name, lowering, slicing = job
    assert _NET is not None
    return link_per_byte(_CANDIDATES[name], _NET, lowering, slicing)


def _attempt(job: tuple) -> tuple[float, tuple | None]:
    """The link bound per byte (computed here when not given), then :func:`attempt` at ``limit`` when the link bound
    passes it: (per byte, None when not built, else (bound, limit, result, stopped)).  An error (a program that
    cannot run) is left to the replay, which meets it again only if the sequential race gets there."""
    name, size, per_byte, limit, lowering, slicing, fairness = job
    assert _NET is not None
    contender = _CANDIDATES[name]
    if per_byte is None:
        per_byte = link_per_byte(contender, _NET, lowering, slicing)
    if per_byte * size > limit:
        return per_byte, None
    try:
        bound, res, stopped = attempt(name, contender, _NET, size, per_byte * size, limit, lowering, slicing, fairness)
    except Exception:
        return per_byte, None
    return per_byte, (bound, limit, res, stopped)


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished and waited-for child processes."""
    got = resource.getrusage(resource.RUSAGE_CHILDREN)
    return got.ru_utime + got.ru_stime


class RacePool:
    """Races of contenders size by size (:meth:`race`), each in ``workers`` processes started for that race (forked
    once its contenders exist: they and the network are inherited, not shipped); one worker, or one contender,
    races in this process.  ``simulated`` counts the workers' simulations, ``tried_here`` the replay's own."""

    def __init__(self, net: Network, workers: int) -> None:
        self.net = net
        self.workers = max(1, int(workers))
        self.simulated = 0  # simulations run by the workers (kept or not): what the parallel race costs
        self.tried_here = 0  # contenders the replay had to try in this process (none, by the module's argument)

    def race(self, size: int, candidates: Mapping[str, Any], *, best_s: float = math.inf, slack: float = 0.0,
             fairness: str = "max-min", slice_bytes: int = DEFAULT_SLICE, max_slices: int | None = DEFAULT_MAX_SLICES,
             first: str | None = None, lowering=tree_lowering) -> RaceResult:
        """What :func:`~forestcoll.simulate.race.race` returns for these arguments (the same results in the same
        order, the same pruned bounds), its contenders simulated by the workers."""
        if self.workers <= 1 or len(candidates) <= 1:
            return race(self.net, size, candidates, best_s=best_s, slack=slack, fairness=fairness,
                        slice_bytes=slice_bytes, max_slices=max_slices, first=first, lowering=lowering)
        slicing = (float(slice_bytes), None if max_slices is None else int(max_slices))
        with ProcessPoolExecutor(max_workers=min(self.workers, len(candidates)), mp_context=_CONTEXT,
                                 initializer=_init, initargs=(self.net, dict(candidates))) as pool:
            bounds, got = self._run(pool, size, candidates, best_s, slack, fairness, slicing, first, lowering)
        return self._replay(size, candidates, bounds, got, best_s, slack, fairness, slicing, first, lowering)

    def _run(self, pool: ProcessPoolExecutor, size: int, candidates: Mapping[str, Any], best_s: float, slack: float,
             fairness: str, slicing: tuple[float, int | None], first: str | None,
             lowering) -> tuple[dict[str, float], dict[str, tuple]]:
        """The workers' part of :meth:`race`: (each contender's link bound, name -> (bound, limit, result,
        stopped) of those a worker built)."""
        per_byte: dict[str, float] = {}
        got: dict[str, tuple] = {}  # name -> (bound, limit, result, stopped) of what a worker built
        known = [best_s]  # the best time the workers have found (with best_s)

        def take(name: str, fut: Future) -> None:
            per_byte[name], tried = fut.result()
            if tried is not None:
                got[name] = tried
                bound, limit, res, stopped = tried
                self.simulated += res is not None or stopped
                if res is not None:
                    known[0] = min(known[0], res.time_s)

        def job(name: str, pb: float | None) -> tuple:
            return (name, size, pb, race_limit(known[0], slack), lowering, slicing, fairness)

        # first: simulated at once, its time the first limit; meanwhile the workers compute the others' link bounds
        lead = pool.submit(_attempt, job(first, None)) if first in candidates else None
        bounds_of = {n: pool.submit(_per_byte, (n, lowering, slicing)) for n in candidates if n != first}
        for n, fut in bounds_of.items():
            per_byte[n] = fut.result()
        if lead is not None:
            take(first, lead)
        bounds = {n: per_byte[n] * size for n in candidates}
        order = [n for n in race_order(candidates, bounds, first) if n != first]
        running: dict[Future, str] = {}
        while order or running:
            while order and len(running) < min(self.workers, len(candidates)):
                name = order.pop(0)
                if bounds[name] <= race_limit(known[0], slack):  # else the sequential race prunes it too
                    running[pool.submit(_attempt, job(name, per_byte[name]))] = name
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in done:
                take(running.pop(fut), fut)
        return bounds, got

    def _replay(self, size: int, candidates: Mapping[str, Any], bounds: dict[str, float], got: dict, best_s: float,
                slack: float, fairness: str, slicing: tuple[float, int | None], first: str | None,
                lowering) -> RaceResult:
        """The sequential race over what the workers found: each contender kept, pruned or stopped as
        :func:`~forestcoll.simulate.race.race` would at its limit there (the same loop: ``race_loop``)."""

        def tries(name: str, limit: float) -> tuple[float, Any, bool]:
            bound, ran_at, res, stopped = got.get(name, (math.inf, math.inf, None, False))
            if bound > limit and name in got:
                return bound, None, False  # its path bound prunes it here too
            if res is not None:  # a run's time does not depend on where it would have stopped
                return (bound, None, True) if res.time_s > limit else (bound, res, False)
            if stopped and ran_at >= limit:
                return bound, None, True
            # not built, pruned or stopped below this limit, or failed: never, by the module's argument
            self.tried_here += 1
            return attempt(name, candidates[name], self.net, size, bounds[name], limit, lowering, slicing, fairness)

        return race_loop(race_order(candidates, bounds, first), bounds, best_s, slack, tries)


_JOBS: dict[int, tuple[Callable[..., Any], tuple]] = {}  # the forked call's function and arguments, by job number


def _forked(conn: Any, number: int) -> None:
    """A forked :class:`Forked` job: its call's value, or the exception it raised, sent back through ``conn``."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (it ends its daemon children)
    fn, args = _JOBS[number]
    try:
        out = (True, fn(*args))
    except Exception as exc:  # raised again in the parent, by Job.result
        out = (False, exc)
    conn.send(out)
    conn.close()


class Job:
    """One call handed to :class:`Forked`: :meth:`result` waits for it and gives its value (or raises its error)."""

    def __init__(self, pool: Forked | None = None, conn: Any = None, proc: Any = None, done: tuple | None = None) -> None:
        self.pool, self.conn, self.proc, self.done = pool, conn, proc, done

    def collect(self) -> None:
        """Receive the value from the child process and wait for it to end (once)."""
        if self.done is None:
            self.done = self.conn.recv()
            self.conn.close()
            self.proc.join()
            if self.pool is not None:
                self.pool.running.remove(self)

    def result(self) -> Any:
        self.collect()
        assert self.done is not None
        ok, value = self.done
        if not ok:
            raise value
        return value


class Forked:
    """Calls run in forked child processes, at most ``workers`` at once, each child inheriting the call's arguments
    (nothing pickled but the value sent back; the values are those of the same call in this process); with one
    worker, or where fork is missing, each call runs here when submitted (its error raised by :meth:`Job.result`)."""

    def __init__(self, workers: int) -> None:
        self.workers = max(1, int(workers)) if _CONTEXT is not None else 1
        self.running: list[Job] = []
        self.count = 0

    def submit(self, fn: Callable[..., Any], *args: Any) -> Job:
        """``fn(*args)`` in a child process (here with one worker): its :class:`Job`."""
        if self.workers <= 1:
            try:
                return Job(done=(True, fn(*args)))
            except Exception as exc:
                return Job(done=(False, exc))
        while len(self.running) >= self.workers:  # wait for a child to end
            ready = wait_any([j.conn for j in self.running])
            for job in [j for j in self.running if j.conn in ready]:
                job.collect()
        self.count += 1
        _JOBS[self.count] = (fn, args)
        try:
            sys.stdout.flush()  # a child flushes its copy of the buffers when it ends
            sys.stderr.flush()
            assert _CONTEXT is not None
            here, there = _CONTEXT.Pipe(duplex=False)
            proc = _CONTEXT.Process(target=_forked, args=(there, self.count), daemon=True)
            proc.start()
            there.close()
        finally:
            del _JOBS[self.count]
        job = Job(self, here, proc)
        self.running.append(job)
        return job

    def close(self) -> None:
        """Wait for every child still running."""
        for job in list(self.running):
            job.collect()
