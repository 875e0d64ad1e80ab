"""Floors on a plan's thread blocks per GPU, from the schedule's actions alone (no emission): a layout whose floor
exceeds ``max_threadblocks`` cannot fit, so the exporter need not emit it, and the MSCCL++ fallback need not export
a k that no layout fits.

Why they hold.  :func:`forestcoll.mscclpp.emit.group` gives every GPU at least one block per (key, piece size) of its
actions (a ``copy`` group: one per key, every size in it), then only splits blocks; every layout's key is the
action's (phase, level, role, peer) or a refinement of it (:func:`forestcoll.mscclpp.export._grain_key`), so counting
classes by that prefix is a floor for the coarse layouts (``level``, ``mixed``), and counting them by the layout's own
grain (``edge``, ``source``) a floor for those.  The ``shared`` layout then merges blocks
(:func:`forestcoll.mscclpp.share.group_blocks`), but a shared block holds at most one in-tree part that waits for
something and at most one forwarding out-tree part: at least as many blocks as the larger of those two counts.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from forestcoll.schedule import Schedule
from forestcoll.topology import Topology

if TYPE_CHECKING:
    from forestcoll.mscclpp.export import ExportOptions
    from forestcoll.mscclpp.lower import Act, Lowering

__all__ = ["fits_nowhere", "floors", "lanes_of", "lowering_for"]

_GRAIN = {"edge": 0, "source": 1}  # the layouts keyed finer than (phase, level, role, peer): their grain


def floors(acts: list[Act], layouts: tuple[str, ...]) -> dict[str, int]:
    """For each of ``layouts`` (Simple-protocol layouts of :data:`forestcoll.mscclpp.export.LAYOUTS` but ``auto``),
    a number of thread blocks that the busiest GPU of any plan of ``acts`` (a fresh :meth:`Lowering.build`) in that
    layout has at least."""
    from forestcoll.mscclpp.export import _grain_key

    out: dict[str, int] = {}
    for layout in layouts:
        classes: dict[int, set] = defaultdict(set)  # per GPU: (key, piece size) classes, each a block at least
        waiting: dict[int, set] = defaultdict(set)  # shared: in-tree classes with a part that waits
        forwarding: dict[int, set] = defaultdict(set)  # shared: out-tree classes that are not sinks
        for a in acts:
            role = a.key[2]
            key = _grain_key(a, _GRAIN[layout]) if layout in _GRAIN else a.key[:4]
            cls = (key, None if role == "copy" else a.cnt)
            classes[a.gpu].add(cls)
            if role == "up":
                if a.producers:
                    waiting[a.gpu].add(cls)
            elif role != "sink":
                forwarding[a.gpu].add(cls)
        if layout == "shared":
            out[layout] = max((max(len(waiting[g]), len(forwarding[g]), 1) for g in classes), default=0)
        else:
            out[layout] = max((len(c) for c in classes.values()), default=0)
    return out


def lowering_for(sched: Schedule, topology: Topology, opts: ExportOptions) -> Lowering:
    """A fresh :class:`~forestcoll.mscclpp.lower.Lowering` of ``sched`` on ``topology`` as
    :func:`forestcoll.mscclpp.export.export_mscclpp` with ``opts`` makes it (in-place or not, lanes): one that
    :func:`fits_nowhere` floors and the export then takes over (``lowering=``), so the actions are built once."""
    from forestcoll.mscclpp.lower import Lowering

    return Lowering(sched, topology, outofplace=not opts.inplace, lanes=lanes_of(opts))


def lanes_of(opts: ExportOptions) -> int:
    """The lanes an export with ``opts`` cuts every piece in: ``opts.lanes``, else 4 for LL (which pipelines), 1."""
    return opts.lanes or (4 if opts.protocol == "LL" else 1)


def fits_nowhere(sched: Schedule, topology: Topology, opts: ExportOptions, low: Lowering | None = None) -> bool:
    """Whether :func:`forestcoll.mscclpp.export.export_mscclpp` of ``sched`` with ``opts`` must fail for thread blocks:
    every layout it would try has a floor (:func:`floors`) above ``opts.max_threadblocks``.  False for LL plans.
    ``low``: the :func:`lowering_for` of the same arguments, whose actions are then built here (else a new one)."""
    from forestcoll import collectives
    from forestcoll.mscclpp.export import layouts_tried

    if opts.protocol == "LL":
        return False
    tried = layouts_tried(collectives.get(sched.collective).name, opts.layout)
    low = low if low is not None else lowering_for(sched, topology, opts)
    return min(floors(low.build(), tried).values()) > opts.max_threadblocks
