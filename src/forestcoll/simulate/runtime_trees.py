"""A schedule's trees simulated on the routes its MSCCL++ plan's transfers would take, before any plan is exported.

``executor_rate`` (:mod:`forestcoll.simulate.mscclpp`) ranks candidate schedules so, and benchmarks/mscclpp.py shows
the rate beside the trees' own.  Each tree edge takes the model's route between its two GPUs
(:func:`on_runtime_routes`: CUDA IPC inside a box, the GPU's own NIC port between boxes), and a transfer between
boxes spreads its bytes evenly over the pair's equal-cost routes through those ports, as a port channel's puts do in
the plan's simulation (:func:`forestcoll.simulate.plan_reader.port_spread`, one rule for both;
:func:`forestcoll.simulate.network.channel_routes`): on a leaf-spine fabric with two spines, both spines.  Where
every pair has one route (every shipped fabric but the leaf-spine ones) the program is the trees' own on those routes,
transfer for transfer.
"""

from __future__ import annotations

from dataclasses import replace

from forestcoll.schedule import Schedule
from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE, SimResult, simulate_program
from forestcoll.simulate.engine import DELIVERED, ProgramBuilder
from forestcoll.simulate.network import Network, Route
from forestcoll.simulate.plan_reader import port_spread
from forestcoll.simulate.trees import tree_program

__all__ = ["on_runtime_routes", "runtime_trees", "spread_between_boxes"]


def on_runtime_routes(sched: Schedule, net: Network) -> Schedule:
    """``sched`` with every tree edge's path replaced by the model's route between its two GPUs: the route a
    GPU-to-GPU transfer of a plan takes (CUDA IPC inside a box), not the path the trees were packed on."""
    idx = {r: i for i, r in enumerate(net.ranks)}

    def path(e):
        links, _lat = net.route(idx[e.src], idx[e.dst])
        return (net.names[net.ends[links[0]][0]], *(net.names[net.ends[x][1]] for x in links))

    trees = tuple(replace(t, edges=tuple(replace(e, path=path(e)) for e in t.edges)) for t in sched.trees)
    return replace(sched, trees=trees)


def spread_between_boxes(prog: ProgramBuilder, net: Network) -> ProgramBuilder:
    """``prog`` with each transfer that runs between two GPUs of different boxes on :meth:`Network.route` spread
    over the pair's routes as a port channel's put is (:func:`~forestcoll.simulate.plan_reader.port_spread`): one
    transfer per route, each its share, and what waited for its sending or its delivery waits for all parts'.
    ``prog`` itself when no transfer has more than one route."""
    rank_of = {net.index[name]: i for i, name in enumerate(net.ranks)}
    routes: dict[tuple[int, ...], list[Route]] = {}
    for links, nbytes, lat, _deps, _stream in prog.rows():
        if links and nbytes > 0 and links not in routes:
            a, b = rank_of.get(net.ends[links[0]][0]), rank_of.get(net.ends[links[-1]][1])
            one = (links, lat)
            routes[links] = [one] if a is None or b is None or net.route(a, b)[0] != links else \
                port_spread(net, a, b, one)
    if all(len(r) == 1 for r in routes.values()):
        return prog
    out = ProgramBuilder()
    sent: list[int] = []  # each old transfer's new event ids: all parts sent, all parts delivered
    landed: list[int] = []
    for links, nbytes, lat, deps, stream in prog.rows():
        new = [(landed[e >> 1] << 1) | DELIVERED if e & 1 == DELIVERED else sent[e >> 1] << 1 for e in deps]
        s, d = out.spread(routes.get(links, [(links, lat)]) if nbytes > 0 else [(links, lat)], nbytes, new, stream)
        sent.append(s)
        landed.append(d)
    return out


def runtime_trees(net: Network, sched: Schedule, size: int, slice_bytes: int = DEFAULT_SLICE,
                  max_slices: int | None = DEFAULT_MAX_SLICES) -> SimResult:
    """One call of ``size`` bytes of ``sched``'s trees (as :func:`forestcoll.simulate.core.simulate` runs them) on
    the routes its MSCCL++ plan's transfers take (:func:`on_runtime_routes`), spread between boxes over the pair's
    equal-cost routes (:func:`spread_between_boxes`)."""
    prog = tree_program(on_runtime_routes(sched, net), net, float(size), float(slice_bytes),
                        None if max_slices is None else int(max_slices))
    label = "forestcoll" if sched.optimal else f"forestcoll-k{sched.k}"
    return simulate_program(spread_between_boxes(prog, net), net, label, sched.collective, size, {"k": sched.k})
