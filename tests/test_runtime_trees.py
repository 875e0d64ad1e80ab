"""Trees on the routes an MSCCL++ plan's transfers take (``executor_rate``, simulate/runtime_trees.py) spread between
boxes over the pair's equal-cost routes, as the plan's port channels do (:func:`forestcoll.simulate.plan_reader.port_spread`).

Before, each tree edge between boxes took one route (one spine), so on a two-spine fabric every candidate the
fallback ranked simulated at about half its rate (sweep seed 9 allgather at 16 MiB: 36.7 GB/s, its plan 39.0, its
trees 79.9).  Fabrics with one route per pair build the very same program.
"""

from __future__ import annotations

import pytest
from conftest import program_link_bytes
from test_two_spines import FABRIC

from forestcoll.generate import generate
from forestcoll.simulate import simulate
from forestcoll.simulate.core import DEFAULT_SLICE
from forestcoll.simulate.engine import DELIVERED, SENT, ProgramBuilder
from forestcoll.simulate.mscclpp import executor_rate
from forestcoll.simulate.network import build_network, channel_routes
from forestcoll.simulate.runtime_trees import on_runtime_routes, runtime_trees, spread_between_boxes
from forestcoll.simulate.trees import tree_program
from forestcoll.topology import load_topology


@pytest.fixture(scope="module")
def spines(tmp_path_factory):
    """The two-spine fabric of tests/test_two_spines.py and the same with one spine of the same uplink."""
    folder = tmp_path_factory.mktemp("runtime")
    out = []
    for n in (2, 1):
        path = folder / f"spines-{n}.yaml"
        path.write_text(FABRIC.replace("SPINES", str(n)))
        out.append(load_topology(str(path)))
    return out


@pytest.mark.parametrize("collective", ["allgather", "allreduce"])
def test_executor_rate_on_two_spines_is_the_rate_on_one(spines, collective):
    two, one = spines
    size = 256 << 20
    sched = generate(two, collective, k=1)
    rate = executor_rate(two)(sched, size)
    assert rate >= 0.9 * float(sched.bound_algbw)  # 0.5 before: one spine of two
    assert rate == pytest.approx(executor_rate(one)(generate(one, collective, k=1), size), rel=0.02)


def test_both_spines_carry_the_bytes_between_boxes(spines):
    two, _ = spines
    net = build_network(two)
    sched = on_runtime_routes(generate(two, "allgather", k=1), net)
    prog = tree_program(sched, net, float(64 << 20), float(DEFAULT_SLICE), None)
    spread = spread_between_boxes(prog, net)
    assert spread is not prog
    before, after = program_link_bytes(prog, len(net.capacity)), program_link_bytes(spread, len(net.capacity))
    into = {}
    for i, (_u, v) in enumerate(net.ends):
        if net.names[v].startswith("spine"):
            into.setdefault(net.names[v], 0.0)
            into[net.names[v]] += after[i]
    assert len(into) == 2 and min(into.values()) > 0
    assert into["spine0"] == pytest.approx(into["spine1"], rel=1e-9)
    assert sum(before) == pytest.approx(sum(after), rel=1e-12)  # as many bytes, over more links of equal hops


def test_a_split_transfer_is_waited_for_whole(spines):
    """What waited for a transfer's delivery waits for all its parts'; what waited for its sending, all parts
    sent."""
    two, _ = spines
    net = build_network(two)
    a, b, c = (net.ranks.index(r) for r in ("n0.g0", "n1.g0", "n1.g1"))
    routes = channel_routes(net, net.port_groups, a, b, 0)
    assert len(routes) == 2 and routes[0] == net.route(a, b)
    prog = ProgramBuilder()
    links, lat = net.route(a, b)
    first = prog.add(links, 8.0, lat, [], "edge")
    inbox, lat2 = net.route(b, c)
    prog.add(inbox, 8.0, lat2, [first << 1 | DELIVERED], None)
    prog.add(links, 8.0, lat, [first << 1 | SENT], "edge")
    out = spread_between_boxes(prog, net)
    rows = list(out.rows())
    assert [r[1] for r in rows] == [4.0, 4.0, 0.0, 0.0, 8.0, 4.0, 4.0, 0.0, 0.0]
    assert [r[0] for r in rows[:2]] == [routes[0][0], routes[1][0]]
    assert rows[2][3] == [0 << 1 | SENT, 1 << 1 | SENT] and rows[3][3] == [0 << 1 | DELIVERED, 1 << 1 | DELIVERED]
    assert rows[4][3] == [3 << 1 | DELIVERED]  # the in-box transfer: after both parts landed
    assert rows[5][3] == rows[6][3] == [2 << 1 | SENT]  # the edge's next slice: after both parts left
    assert [r[4] for r in rows] == [("edge", 0), ("edge", 1), None, None, None, ("edge", 0), ("edge", 1), None, None]


@pytest.mark.parametrize("spec", ["dgx-a100:nodes=2", "mi250:nodes=2"])
def test_one_route_fabrics_build_the_same_program(spec):
    topo = load_topology(spec)
    net = build_network(topo)
    for collective in ("allgather", "allreduce"):
        sched = generate(topo, collective, k=1)  # the optimum's program is the same too (tidy21's note), but slower
        prog = tree_program(on_runtime_routes(sched, net), net, float(16 << 20), float(DEFAULT_SLICE), None)
        assert spread_between_boxes(prog, net) is prog
        assert runtime_trees(net, sched, 16 << 20).algbw_gbps == \
            simulate(net, on_runtime_routes(sched, net), size=16 << 20).algbw_gbps
