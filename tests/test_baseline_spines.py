"""bas21: the baselines (ring, double binary tree, hierarchical, direct) spread between boxes over equal-cost routes.

spine20 made the MSCCL++ model spread a port channel's bytes over the pair's equal-cost routes (two spines), the rule
the MSCCL model already had (:func:`forestcoll.simulate.network.channel_routes`); the baselines still sent every
transfer on :meth:`Network.route` (one spine), so on two spines they ran at about half of what the same uplink on one
spine gives them, and "beats the best baseline at 16 MiB" was flattered there.  They now take the same function
(:func:`forestcoll.simulate.baselines.pair_routes`: port group 0, the GPU's own NIC port); fabrics with one route per
pair build the very same program.
"""

from __future__ import annotations

import pytest
from conftest import shared_file
from test_two_spines import FABRIC

import forestcoll.simulate.baselines as baselines
import forestcoll.simulate.engine as engine
from forestcoll.simulate.core import simulate
from forestcoll.simulate.network import build_network, channel_routes
from forestcoll.topology import load_topology

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce")


def _load(tmp_path_factory, spines: int):
    path = tmp_path_factory.mktemp("spines") / f"spines-{spines}.yaml"
    path.write_text(FABRIC.replace("SPINES", str(spines)))
    return load_topology(str(path))


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return build_network(_load(tmp_path_factory, 2))


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    return build_network(_load(tmp_path_factory, 1))


def _spines(net, links) -> set[str]:
    return {net.names[net.ends[i][1]] for i in links if net.names[net.ends[i][1]].startswith("spine")}


def test_a_pair_between_boxes_spreads_over_both_spines_from_its_own_nic(two):
    net = two
    a, b = net.ranks.index("n0.g1"), net.ranks.index("n1.g2")
    routes = baselines.pair_routes(net, a, b)
    assert routes == channel_routes(net, {}, a, b, 0)  # the one rule of the MSCCL / MSCCL++ models, group 0
    assert routes[0] == net.route(a, b) and len(routes) == 2
    assert [_spines(net, links) for links, _ in routes] == [{"spine0"}, {"spine1"}]
    box = net.box
    ports = {tuple(i for i in links if box[net.ends[i][0]] != box[net.ends[i][1]]) for links, _ in routes}
    assert len(ports) == 1  # one NIC port each way (the one Network.route leaves by): only the spine differs
    inside = net.ranks.index("n0.g3")
    assert baselines.pair_routes(net, a, inside) == [net.route(a, inside)]  # inside a box: one route


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_baselines_on_two_spines_run_as_on_one_spine_of_the_same_uplink(two, one, collective):
    """16 MiB: every baseline on two spines at the rate it has on one spine of the same total uplink (before: the
    ring allgather 52.8 GB/s against 98.2, the double binary tree 45.1 against 71.9)."""
    size = 16 << 20
    ran = 0
    for name in baselines.BASELINES:
        if not baselines.applicable(name, two, collective):
            continue
        ran += 1
        spread = simulate(two, name, collective, size).algbw_gbps
        single = simulate(one, name, collective, size).algbw_gbps
        assert spread == pytest.approx(single, rel=1e-6), (name, collective)
    assert ran >= 2


def test_baselines_cross_both_spines_evenly(two):
    """Each leaf's two uplinks carry the same bytes in every baseline's program (before: all on spine0)."""
    net = two
    up = [i for i, (u, v) in enumerate(net.ends) if net.names[u].startswith("leaf") and net.names[v].startswith("spine")]
    for name, collective in (("ring", "allgather"), ("double-binary-tree", "allreduce"),
                             ("hierarchical", "allreduce"), ("direct", "allgather"), ("ring", "broadcast")):
        prog = baselines.BASELINES[name](net, collective, float(16 << 20), (float(1 << 20), None))
        moved = [0.0] * len(net.capacity)
        for links, nbytes in zip(prog._links, prog._bytes):
            for i in links:
                moved[i] += nbytes
        by_leaf: dict[str, list[float]] = {}
        for i in up:
            by_leaf.setdefault(net.names[net.ends[i][0]], []).append(moved[i])
        assert len(by_leaf) == 2, name
        for loads in by_leaf.values():
            assert loads[0] > 0 and loads[0] == pytest.approx(loads[1], rel=1e-12), (name, loads)


def test_baselines_count_exactly_on_two_spines(two, monkeypatch):
    """The guard's exact count (io19) includes the spread: a transfer per route and the marker joining them."""
    seen: list[int] = []

    def record(count: int) -> None:
        seen.append(count)
        engine.refuse_transfers(count)

    monkeypatch.setattr(baselines, "refuse_transfers", record)
    for collective in COLLECTIVES:
        for size, slicing in ((1000.0, (float(1 << 16), None)), (float(3 << 20), (float(1 << 20), 3)),
                              (float(1 << 24), (float(1 << 20), None))):
            for name, build in baselines.BASELINES.items():
                if baselines.applicable(name, two, collective):
                    prog = build(two, collective, size, slicing)
                    assert seen[-1] == len(prog), (collective, name, size)


def _rail(name: str, nodes: str = "4"):
    return load_topology(str(shared_file("data", "nccl-topo", name)), {"nodes": nodes, "fabric": "rail"})


ONE_ROUTE = {
    "dgx-a100:nodes=2": lambda: load_topology("dgx-a100:nodes=2"),
    "mi250:nodes=2": lambda: load_topology("mi250:nodes=2"),
    "H100 x4 rail": lambda: _rail("H100-topology.xml"),
    "MI300 x4 rail": lambda: _rail("topo_8p_940.xml"),
}


@pytest.mark.parametrize("spec", list(ONE_ROUTE))
def test_one_route_fabrics_build_the_same_programs(spec, monkeypatch):
    """Where every pair between boxes has one route through its NIC port, every baseline's program is the one built
    on :meth:`Network.route` alone, transfer for transfer (the rates are therefore those of before, to the bit)."""
    net = build_network(ONE_ROUTE[spec]())
    n = len(net.ranks)
    assert all(baselines.pair_routes(net, a, b) == [net.route(a, b)] for a in range(n) for b in range(n) if a != b)

    def shape(prog):
        return prog._links, prog._bytes, prog._lat, prog._deps, prog._stream

    cases = [(name, coll) for coll in ("allreduce", "allgather", "broadcast") for name in baselines.BASELINES
             if name != "direct" and baselines.applicable(name, net, coll)]
    built = {c: shape(baselines.BASELINES[c[0]](net, c[1], float(4 << 20), (float(1 << 20), None))) for c in cases}
    monkeypatch.setattr(baselines, "pair_routes", lambda net, a, b: [net.route(a, b)])
    for c in cases:
        assert built[c] == shape(baselines.BASELINES[c[0]](net, c[1], float(4 << 20), (float(1 << 20), None))), c
