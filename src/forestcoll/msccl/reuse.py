"""Work one ``generate --format msccl`` run shares between its choices: each schedule generated and each file
exported once, however many times the choice of k and variant is made.

Why: ``generate --format msccl --buffsize auto`` (:mod:`forestcoll.msccl.buffer`) makes
:func:`forestcoll.msccl.generated.generated_msccl`'s choice once per buffer, and only the rates differ between
buffers: the candidate schedules (the powers of two k below the optimal one) and their files (plain, split, even
pieces) are the same.  Inside :func:`reusing`, :func:`once` keeps what it makes (or the error it raised) under its
key; outside, it makes it every time, as before.  :func:`exported` hands every caller its own
:class:`~forestcoll.msccl.export.ExportResult` around the *same* :class:`~forestcoll.msccl.ir.Algo` (the caller's
notes are its own; a rate remembered by the file's identity serves every choice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from forestcoll.errors import ForestCollError

if TYPE_CHECKING:
    from forestcoll.msccl.export import ExportOptions, ExportResult
    from forestcoll.schedule import Schedule

__all__ = ["exported", "generated", "once", "reusing"]

T = TypeVar("T")
_ACTIVE: ContextVar[dict | None] = ContextVar("forestcoll_msccl_reuse", default=None)


@contextmanager
def reusing() -> Iterator[dict]:
    """Inside the block :func:`once` keeps what it makes (nested blocks share the outer one's); yields the store."""
    store = _ACTIVE.get()
    if store is not None:
        yield store
        return
    store = {}
    token = _ACTIVE.set(store)
    try:
        yield store
    finally:
        _ACTIVE.reset(token)


def once(key: tuple, make: Callable[[], T], *keep: Any) -> T:
    """``make()``; inside :func:`reusing`, the value (or :class:`ForestCollError`) made the first time for ``key``.
    ``keep``: the objects whose ``id`` is in ``key``, kept alive with the value so no id is reused."""
    store = _ACTIVE.get()
    if store is None:
        return make()
    if key not in store:
        try:
            store[key] = (True, make(), keep)
        except ForestCollError as exc:
            store[key] = (False, exc, keep)
    ok, value, _keep = store[key]
    if not ok:
        raise value
    return value


def exported(sched: Schedule, options: ExportOptions | None) -> ExportResult:
    """``export_msccl(sched, options)``, exported once per (schedule, options) inside :func:`reusing`: a result of
    the caller's own (notes, checks) around the one file."""
    from forestcoll.msccl.export import export_msccl

    result = once(("export", id(sched), options), lambda: export_msccl(sched, options), sched)
    return replace(result, notes=list(result.notes), checks=list(result.checks))


def generated(topology, collective: str, k: int, **generate_kwargs: Any) -> Schedule:
    """``generate(topology, collective, k=k, **generate_kwargs)``, generated once per k inside :func:`reusing`."""
    from forestcoll.generate import generate

    key = ("generate", id(topology), collective, k, tuple(sorted(generate_kwargs.items())))
    return once(key, lambda: generate(topology, collective, k=k, **generate_kwargs), topology)
