"""Run a function on N gloo ranks in fresh processes (spawn) and collect what each returns.

Shared by the tests of :mod:`forestcoll.torch`; not a test module itself.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import queue
import tempfile
import traceback
from collections.abc import Callable


def _child(fn: Callable, rank: int, world: int, store: str, args: tuple, out: mp.Queue, pg_timeout: float) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=pg_timeout))
        result = fn(rank, world, *args)
        out.put((rank, "ok", result))
    except BaseException as exc:  # reported to the parent, which fails the test
        out.put((rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass


def run_ranks(world: int, fn: Callable, *args: object, timeout: float = 120, pg_timeout: float = 60,
              expect_exit: set[int] | None = None) -> dict[int, tuple[str, object]]:
    """``fn(rank, world, *args)`` on ``world`` gloo ranks; {rank: ("ok", result) | ("error", text)}.
    Ranks in ``expect_exit`` may die without reporting."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_child, args=(fn, r, world, store, args, out, pg_timeout), daemon=True)
                 for r in range(world)]
        for p in procs:
            p.start()
        results: dict[int, tuple[str, object]] = {}
        wanted = world - len(expect_exit or ())
        try:
            while len([r for r in results if r not in (expect_exit or ())]) < wanted:
                rank, status, value = out.get(timeout=timeout)
                results[rank] = (status, value)
        except queue.Empty:
            raise AssertionError(f"ranks {sorted(set(range(world)) - set(results))} did not finish in {timeout} s "
                                 f"(got {results})") from None
        finally:
            for r, p in enumerate(procs):
                p.join(timeout=1 if r in (expect_exit or ()) else 10)
                if p.is_alive():
                    p.kill()
    return results


def _worker(rank: int, world: int, store: str, inbox: mp.Queue, out: mp.Queue, pg_timeout: float) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=pg_timeout))
    except BaseException as exc:
        out.put((None, rank, "error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        job = inbox.get()
        if job is None:
            break
        job_id, fn, args = job
        try:
            out.put((job_id, rank, "ok", fn(rank, world, *args)))
        except BaseException as exc:  # reported to the parent, which fails the test
            out.put((job_id, rank, "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    try:
        dist.destroy_process_group()
    except Exception:
        pass


class RankPool:
    """``world`` gloo ranks started once (spawn) that run one function after another: the start-up (a
    fresh interpreter importing torch per rank) is paid once for many tests.  Functions must leave the
    group usable (tests of dying or stalling ranks use :func:`run_ranks`)."""

    def __init__(self, world: int, pg_timeout: float = 60) -> None:
        ctx = mp.get_context("spawn")
        self.world = world
        self._tmp = tempfile.TemporaryDirectory()
        store = os.path.join(self._tmp.name, "store")
        self._out = ctx.Queue()
        self._inboxes = [ctx.Queue() for _ in range(world)]
        self._procs = [ctx.Process(target=_worker, args=(r, world, store, self._inboxes[r], self._out, pg_timeout),
                                   daemon=True) for r in range(world)]
        for p in self._procs:
            p.start()
        self._jobs = 0

    def run(self, fn: Callable, *args: object, timeout: float = 120) -> dict[int, tuple[str, object]]:
        """``fn(rank, world, *args)`` on every rank; {rank: ("ok", result) | ("error", text)}."""
        self._jobs += 1
        job = self._jobs
        for inbox in self._inboxes:
            inbox.put((job, fn, args))
        results: dict[int, tuple[str, object]] = {}
        try:
            while len(results) < self.world:
                job_id, rank, status, value = self._out.get(timeout=timeout)
                if job_id in (job, None):
                    results[rank] = (status, value)
        except queue.Empty:
            raise AssertionError(f"ranks {sorted(set(range(self.world)) - set(results))} did not finish in {timeout} s "
                                 f"(got {results})") from None
        return results

    def close(self) -> None:
        for inbox in self._inboxes:
            inbox.put(None)
        for p in self._procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        self._tmp.cleanup()
