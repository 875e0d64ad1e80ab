"""All-to-all schedules for MSCCL++ plans on the ports the executor drives (``generate -c alltoall --format mscclpp``).

The flows are generated on :func:`forestcoll.mscclpp.ports.driven_ports`.  Where
ports are dropped, the whole fabric's flows are a second candidate: each hop
that crosses a dropped port takes the route the executor's port channel takes
(:meth:`Network.route` on the driven ports), and the result is kept only when
:func:`verify_alltoall` finds it at the driven ports' optimum.  Both are the same
rate on paper; as plans they differ below 1 GiB: one iteration per chunk makes
a relay forward a chunk only after its whole put has landed, so relays after
the network hop run after the network is done (on the OCI H100 dump x4 rail
the driven flows relay 528 of 992 pairs that way, the whole fabric's 192, with
384 relayed before the network hop).  The candidate whose plan simulates faster
at :data:`SMALL` and no slower at :data:`LARGE` is written (ties: the driven
flows).  A fabric whose every port is driven gets the driven flows unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from forestcoll.alltoall.generate import AlltoallGenerated, generate_alltoall
from forestcoll.alltoall.schedule import AlltoallSchedule
from forestcoll.alltoall.verify import verify_alltoall
from forestcoll.mscclpp.ports import driven_ports
from forestcoll.simulate.network import Network, build_network
from forestcoll.topology import Topology

if TYPE_CHECKING:
    from forestcoll.mscclpp.export import ExportOptions

__all__ = ["LARGE", "SMALL", "generate_for_executor", "rerouted"]

SMALL = 16 << 20  # the size the two candidates race at ...
LARGE = 1 << 30  # ... and the size the winner must not lose at


def rerouted(sched: AlltoallSchedule, driven: Topology, net: Network, like: AlltoallSchedule) -> AlltoallSchedule | None:
    """``sched`` with every hop that leaves ``driven`` (``net`` is its network) on the route between the hop's two
    ranks there, claiming ``like``'s rate and optimum (``like``: an optimal schedule on ``driven``); None unless
    ``verify_alltoall`` confirms that claim."""
    ranks = set(sched.ranks)
    flows = []
    for f in sched.flows:
        at = [i for i, x in enumerate(f.path) if x in ranks]
        path = [f.path[0]]
        for i, j in zip(at, at[1:]):
            hop = f.path[i:j + 1]
            if not all(x in net.index for x in hop) or any((net.index[u], net.index[v]) not in net.link_of
                                                           for u, v in zip(hop, hop[1:])):
                ids, _ = net.route(net.ranks.index(hop[0]), net.ranks.index(hop[-1]))
                hop = (hop[0], *(net.names[net.ends[e][1]] for e in ids))
            path += hop[1:]
        flows.append(replace(f, path=tuple(path)))
    out = replace(sched, topology=like.topology, flows=tuple(flows), algbw=like.algbw, bound_algbw=like.bound_algbw,
                  certified=like.certified)
    check = verify_alltoall(out, driven)
    return out if check.ok and check.optimal else None


def _rates(sched: AlltoallSchedule, topo: Topology, net: Network, options: ExportOptions) -> tuple[float, float]:
    """The plan of ``sched`` simulated at SMALL and LARGE (GB/s; a refused simulation: Unsimulated, it loses)."""
    from forestcoll.alltoall.mscclpp import export_alltoall_mscclpp
    from forestcoll.simulate.mscclpp import simulate_plan
    from forestcoll.simulate.race import losing

    plan = export_alltoall_mscclpp(sched, topo, replace(options, check=False)).plan
    rate = losing(lambda size: simulate_plan(net, plan, size).algbw_gbps)
    return rate(SMALL), rate(LARGE)


def generate_for_executor(topo: Topology, options: ExportOptions, *, chunks: int | str | None, symmetry: bool) -> AlltoallGenerated:
    """The all-to-all schedule an MSCCL++ plan of ``topo`` is written from (ExportOptions ``options``): see the
    module docstring."""
    from forestcoll.mscclpp.export import ExportError

    driven = driven_ports(topo)
    made = generate_alltoall(driven, chunks=chunks, symmetry=symmetry)
    if driven is topo or not made.ok or made.schedule is None or not made.schedule.optimal:
        return made
    whole = generate_alltoall(topo, chunks=chunks, symmetry=symmetry)
    other = rerouted(whole.schedule, driven, build_network(driven), made.schedule) if whole.schedule else None
    if other is None:
        return made
    net = build_network(topo)
    try:
        mine, theirs = _rates(made.schedule, topo, net, options), _rates(other, topo, net, options)
    except ExportError:
        return made
    if not (theirs[0] > mine[0] and theirs[1] >= mine[1]):
        return made
    why = (f"; the whole fabric's flows (k={other.k}) routed on the driven ports: their plan {theirs[0]:.1f} GB/s at "
           f"16 MiB (the driven flows' {mine[0]:.1f}), {theirs[1]:.1f} at 1 GiB ({mine[1]:.1f})")
    msg = made.message.replace(f"{len(made.schedule.flows)} flows, k={made.schedule.k}",
                               f"{len(other.flows)} flows, k={other.k}")
    return replace(made, message=msg + why, schedule=other)
