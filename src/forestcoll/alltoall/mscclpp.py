"""An all-to-all schedule as an MSCCL++ execution plan (``collective: "alltoall"``), within the executor's limits.

Buffers (the executor's and the interpreter's alltoall convention): with k
chunks per pair, every GPU has ``N * k`` input and ``N * k`` output chunks;
rank s's input chunks ``t*k .. t*k+k-1`` end in rank t's output chunks
``s*k .. s*k+k-1``.  Each pair's flows take consecutive ranges (a flow of
fraction p/k takes p chunks), as in the MSCCL lowering (:mod:`.msccl`).
Out of place only (in place, a rank would overwrite input it has not sent).

Actions (:class:`forestcoll.mscclpp.lower.Act`, then the tree export's thread
blocks, channels and operations, :mod:`forestcoll.mscclpp.emit`): a flow's path
is cut at the ranks it relays through into hops; hop h from GPU a to GPU b is a
*put* by a at level h (from a's input on the first hop, from a's scratch after
that) into b's scratch, or into b's output on the last hop; b's next hop waits
for it; the destination only waits (a sink).  Every GPU copies its own block.
A hop whose physical nodes all lie in the sender's box takes a memory channel,
any other a port channel (the rule the tree export applies to tree edges).
Blocks work at one hop level each and wait only for blocks of a lower level,
so the plan cannot deadlock; lint and the interpreter check each plan.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from forestcoll import collectives
from forestcoll.alltoall.schedule import AlltoallSchedule
from forestcoll.errors import ScheduleError, UsageError
from forestcoll.mscclpp.export import (
    ExportError,
    ExportOptions,
    ExportResult,
    _layout_and_emit,
    _units,
    self_check,
)
from forestcoll.mscclpp.lower import SINK_LEVEL, Act, Ref
from forestcoll.mscclpp.plan import plan_stats
from forestcoll.topology import Topology

if TYPE_CHECKING:
    from forestcoll.fileio import Output

__all__ = ["alltoall_actions", "export_alltoall_mscclpp", "port_notes", "write_alltoall_mscclpp"]


def _hops(path: tuple[str, ...], rank_of: dict[str, int]) -> list[tuple[int, int, tuple[str, ...]]]:
    at = [i for i, x in enumerate(path) if x in rank_of]
    return [(rank_of[path[i]], rank_of[path[j]], tuple(path[i:j + 1])) for i, j in zip(at, at[1:])]


def alltoall_actions(sched: AlltoallSchedule, topology: Topology) -> tuple[list[Act], list[int], int]:
    """(actions, scratch chunks per GPU, port hops inside a box) of ``sched`` on ``topology``: see the module
    docstring.  :class:`ScheduleError` when the flows do not cover every pair exactly once."""
    nodes = {x.name: x for x in topology.nodes}
    ranks = list(sched.ranks)
    for r in ranks:
        if r not in nodes or nodes[r].kind != "compute":
            raise UsageError(f"rank {r!r} of the schedule is not a GPU of {topology.name or 'the topology'}: "
                             "pass the topology it was generated for")
    rank_of = {r: i for i, r in enumerate(ranks)}
    n, k = len(ranks), sched.k
    boxes = [nodes[r].box for r in ranks]
    offset: dict[tuple[int, int], int] = defaultdict(int)
    scratch = [0] * n
    acts: list[Act] = []
    inbox_port = 0
    for g in range(n):
        acts.append(Act(g, (0, 0, "copy", -1), (-1, g), k, copy=(Ref("i", g * k, k), Ref("o", g * k, k))))
    for fid, f in enumerate(sched.flows):
        if f.src not in rank_of or f.dst not in rank_of:
            raise ScheduleError(f"flow {fid}: {f.src} -> {f.dst} names a node that is not a rank")
        s, t = rank_of[f.src], rank_of[f.dst]
        count = f.fraction * k
        if count.denominator != 1 or count <= 0:
            raise ScheduleError(f"flow {fid}: fraction {f.fraction} is not a whole number of 1/{k} chunks")
        cnt = int(count)
        start = offset[(s, t)]
        offset[(s, t)] += cnt
        if offset[(s, t)] > k:
            raise ScheduleError(f"pair {f.src} -> {f.dst}: fractions add up to more than 1")
        src = Ref("i", t * k + start, cnt)
        prev: Act | None = None
        hops = _hops(f.path, rank_of)
        for h, (a, b, route) in enumerate(hops):
            for name in route:
                if name not in nodes:
                    raise UsageError(f"node {name!r} on the path of flow {fid} is not in "
                                     f"{topology.name or 'the topology'}")
            via = "memory" if all(nodes[x].box == boxes[a] for x in route) else "port"
            inbox_port += via == "port" and boxes[a] == boxes[b]
            if h == len(hops) - 1:
                dst = Ref("o", s * k + start, cnt, gpu=b)
            else:
                dst = Ref("s", scratch[b], cnt, gpu=b)
                scratch[b] += cnt
            act = Act(a, (0, h, "down", b), (fid, start), cnt, push=(src, dst, via))
            if prev is not None:
                act.producers.append((prev, "push"))
            acts.append(act)
            prev = act
            src = Ref(dst.type, dst.index, cnt)
        if prev is None:
            raise ScheduleError(f"flow {fid}: its path {f.path[0]} ... {f.path[-1]} passes no other rank")
        acts.append(Act(t, (0, SINK_LEVEL, "sink", -1), (fid, start), cnt, producers=[(prev, "push")]))
    for s in range(n):
        for t in range(n):
            if s != t and offset.get((s, t), 0) != k:
                raise ScheduleError(f"pair {ranks[s]} -> {ranks[t]}: fractions add up to {offset.get((s, t), 0)}/{k}, "
                                    "not 1")
    return acts, scratch, inbox_port


def export_alltoall_mscclpp(sched: AlltoallSchedule, topology: Topology | str | None = None,
                            options: ExportOptions | None = None, **kwargs: Any) -> ExportResult:
    """The MSCCL++ plan of all-to-all ``sched`` on ``topology`` (default: the one it names), self-checked (lint +
    interpreter, out of place) unless ``check=False``; :class:`ExportError` (one line naming the limit and the way
    out) when it cannot fit the executor."""
    from forestcoll.schedule import schedule_topology

    t0 = time.perf_counter()
    opts = options or ExportOptions(**kwargs)
    opts.validate()
    if opts.inplace:
        raise ExportError("an all-to-all runs out of place only (in place, a rank would overwrite input it has not "
                          "sent yet): use --mode out-of-place")
    if opts.protocol != "Simple":
        raise ExportError("all-to-all plans are Simple protocol only (LL plans are made for allgather, "
                          "reducescatter and allreduce): drop --proto LL")
    n = len(sched.ranks)
    if n < 2:
        raise ExportError("a plan needs at least 2 ranks")
    topo = topology if isinstance(topology, Topology) else schedule_topology(sched, topology)
    try:
        acts, scratch, inbox_port = alltoall_actions(sched, topo)
    except ScheduleError as exc:
        raise ExportError(str(exc)) from None
    k = sched.k
    coll = collectives.get("alltoall")
    hi = opts.resolved_max()
    design = opts.design_size or min(hi, 1 << 30)
    units = _units("alltoall", n, k, sorted({a.cnt for a in acts}), design, hi, opts)
    name = re.sub(r"[^A-Za-z0-9_.:-]", "_", opts.name or f"forestcoll_alltoall_n{n}_k{k}")[:200]
    low = SimpleNamespace(n=n, entry=coll, k=k, scratch=scratch, shares=n)  # shares: as Lowering.shares
    plan = _layout_and_emit(low, acts, units, name, opts, hi)  # type: ignore[arg-type]
    stats = plan_stats(plan)
    if stats.threadblocks_per_gpu > opts.max_threadblocks:
        raise ExportError(
            f"alltoall k={k} needs {stats.threadblocks_per_gpu} thread blocks per GPU (a block per hop level, peer and "
            f"chunk count), more than the {opts.max_threadblocks} a GPU runs at once (--max-threadblocks: every block "
            "of the executor's kernel must be resident): "
            + ("generate the schedule with fewer chunks per pair (--k 1) or " if k > 1 else "")
            + "export it as MSCCL XML (--format msccl), whose blocks serve a peer each")
    result = ExportResult(plan, stats, k, units, 0.0, layout="hop", inbox_port_edges=inbox_port)
    if inbox_port:
        result.notes.append(f"{inbox_port} hop(s) join two GPUs of one box through the network: they take port "
                            "channels, which the executor (1f5f065) carries over CUDA IPC inside a host, not the NIC "
                            "(docs/mscclpp.md)")
    if (n * k) & (n * k - 1):
        result.notes.append(f"the executor takes calls whose size is a multiple of {n * k * 16} bytes ({n * k} chunks "
                            "of whole 16-byte units); power-of-two sizes are not")
    if all(topo_node.box is None for topo_node in topo.nodes if topo_node.name in set(sched.ranks)):
        result.notes.append("the topology records no boxes: every GPU is taken to share one host (memory channels "
                            "only); give its nodes a box if it spans hosts")
    if opts.check:
        result.checks = self_check(plan, launches=opts.check_launches)
    result.seconds = time.perf_counter() - t0
    return result


def write_alltoall_mscclpp(sched: AlltoallSchedule, path: Output, topology: Topology | str | None = None,
                           options: ExportOptions | None = None, **kwargs: Any) -> ExportResult:
    """:func:`export_alltoall_mscclpp` and write the plan to ``path`` whole (temporary file, then rename), with
    :func:`port_notes` when ``topology`` is given."""
    from forestcoll.fileio import atomic_write_text
    from forestcoll.mscclpp.plan import write_plan

    result = export_alltoall_mscclpp(sched, topology, options, **kwargs)
    if isinstance(topology, Topology):
        result.notes.extend(port_notes(sched, topology))
    atomic_write_text(path, write_plan(result.plan))
    result.output = str(path)
    return result


def port_notes(sched: AlltoallSchedule, topology: Topology) -> list[str]:
    """Where ``topology`` has network ports the executor leaves idle (:mod:`forestcoll.mscclpp.ports`): a note that
    flows of ``sched`` cross on them, or, when none does, one giving the all-to-all bound on the driven ports and the
    fabric's; no note on a fabric whose every port is driven."""
    from forestcoll.alltoall.bound import alltoall_bound
    from forestcoll.mscclpp.ports import executor_ports, idle_path_note

    ports = executor_ports(topology)
    if not ports.dropped:
        return []
    idle = idle_path_note([f.path for f in sched.flows], topology)
    if idle is not None:
        return [idle]
    full, driven = alltoall_bound(topology).algbw, alltoall_bound(ports.topology).algbw
    if full is None or driven is None:  # not certified exactly: no bounds to quote
        return []
    return [ports.note("alltoall", full, driven).replace("the trees are packed", "the flows are routed")]
