"""The simulator against closed forms, monotonicity, baselines on toy fabrics, MSCCL files and the bound."""

from __future__ import annotations

import pytest

from forestcoll.generate import generate
from forestcoll.msccl.export import export_msccl
from forestcoll.simulate import simulate
from forestcoll.simulate.baselines import applicable, ring_orders, ring_schedule
from forestcoll.simulate.core import simulate_program
from forestcoll.simulate.msccl import msccl_program
from forestcoll.simulate.network import build_network
from forestcoll.topology import TopologyBuilder, load_topology
from forestcoll.verify import verify

MiB = 1 << 20
NO_LATENCY = {c: 0.0 for c in ("link", "nvlink", "net", "pcie", "xgmi", "sys", "c2c", "")}


def chain(n: int, bw: int = 10):
    b = TopologyBuilder(f"chain{n}")
    for i in range(n):
        b.compute(f"c{i}")
    for i in range(n - 1):
        b.duplex(f"c{i}", f"c{i + 1}", bw, "link")
    return b.build()


def test_single_tree_pipeline_closed_form():
    """A broadcast down a chain of depth d in s slices takes (s + d - 1) slice times, plus d latencies.  A chain
    is cut as NCCL cuts its broadcast chains: 512 KiB steps (BROADCAST_CHUNKSTEPS = 1), 16 of them for 8 MiB."""
    d, bw = 5, 10e9
    topo = chain(d + 1)
    sched = generate(topo, "broadcast", k=1, root="c0")
    size = 8 * MiB
    piece = MiB // 2
    s = size // piece
    res = simulate(build_network(topo, NO_LATENCY), sched, size=size)
    assert res.time_s == pytest.approx((s + d - 1) * piece / bw, rel=1e-9)
    lat = simulate(build_network(topo, {"link": 2.0}), sched, size=size)
    assert lat.time_s == pytest.approx((s + d - 1) * piece / bw + d * 2e-6, rel=1e-9)
    # a cap keeps fewer, larger slices
    capped = simulate(build_network(topo, NO_LATENCY), sched, size=size, max_slices=8)
    assert capped.time_s == pytest.approx((8 + d - 1) * MiB / bw, rel=1e-9)


@pytest.mark.parametrize(("size", "slices"), [(8 * MiB, 16), (MiB, 8), (128 << 10, 2)])
def test_a_tree_is_cut_by_nccls_tree_rule(size, slices):
    """A star (depth 1, three children: not a chain): 512 KiB chunks while there are 8 x depth of them, else
    halved down to 128 KiB (1 MiB: 8 chunks), then 64 KiB while fewer than 4 (128 KiB: 2 chunks)."""
    from forestcoll.simulate.trees import tree_program

    b = TopologyBuilder("star")
    for i in range(4):
        b.compute(f"c{i}")
    for i in range(1, 4):
        b.duplex("c0", f"c{i}", 10, "link")
    topo = b.build()
    sched = generate(topo, "broadcast", k=1, root="c0")
    prog = tree_program(sched, build_network(topo), float(size), float(MiB), None).build()
    assert prog.size == 3 * slices


@pytest.mark.parametrize("n", [4, 6, 8])
def test_ring_allreduce_closed_form(n):
    """Ring allreduce on a uniform ring: 2(N-1)/N x M/B over each direction's half of the data (both
    directions of every link are used), plus latency terms: within 1 % at 1 GiB."""
    topo = load_topology(f"ring:n={n},bw=50")
    size = 1 << 30
    expect = 2 * (n - 1) / n * (size / 2) / 50e9
    res = simulate(build_network(topo, NO_LATENCY), "ring", "allreduce", size)
    assert res.time_s == pytest.approx(expect, rel=1e-6)
    res = simulate(build_network(topo), "ring", "allreduce", size)
    assert res.time_s == pytest.approx(expect, rel=0.01)
    assert res.algbw_gbps == pytest.approx(size / expect / 1e9, rel=0.01)
    assert res.busbw_gbps == pytest.approx(res.algbw_gbps * 2 * (n - 1) / n)


@pytest.mark.parametrize(
    ("spec", "collective"),
    [pytest.param("dgx-a100:nodes=2", "allreduce", marks=pytest.mark.slow),
     pytest.param("dgx-a100:nodes=2", "allgather", marks=pytest.mark.slow), ("fully-connected:n=5", "allgather"),
     ("switch:n=6", "reduce_scatter"), ("hypercube:dim=3", "allreduce")],
)
def test_optimal_schedules_approach_the_bound(spec, collective):
    topo = load_topology(spec)
    sched = generate(topo, collective)
    res = simulate(build_network(topo), sched, size=1 << 30)
    assert res.algbw_gbps <= float(sched.bound_algbw) * (1 + 1e-9)
    assert res.algbw_gbps >= 0.97 * float(sched.bound_algbw)
    # with finer pipelining and no latency it gets closer still
    fine = simulate(build_network(topo, NO_LATENCY), sched, size=1 << 30, slice_bytes=MiB // 4, max_slices=256)
    assert fine.algbw_gbps >= 0.99 * float(sched.bound_algbw)


@pytest.mark.parametrize("algorithm", ["forestcoll", "ring", "double-binary-tree", "hierarchical", "direct"])
def test_time_grows_with_size(algorithm):
    topo = load_topology("dgx-a100:nodes=2")
    net = build_network(topo)
    what = generate(topo, "allreduce") if algorithm == "forestcoll" else algorithm
    times = [simulate(net, what, "allreduce", size, fairness="link").time_s for size in (MiB, 4 * MiB, 16 * MiB, 64 * MiB)]
    assert times == sorted(times) and len(set(times)) == len(times)


def test_ring_allgather_by_hand():
    """4 ranks on a bidirectional ring, both directions: each link direction carries (N-1) x M/(2N)."""
    net = build_network(load_topology("ring:n=4,bw=25"), NO_LATENCY)
    size = 256 * MiB
    res = simulate(net, "ring", "allgather", size)
    assert res.time_s == pytest.approx(3 * size / 8 / 25e9, rel=1e-6)


def test_direct_allgather_by_hand():
    """Fully connected: every rank sends its M/N shard to every other on its own link."""
    net = build_network(load_topology("fully-connected:n=4,bw=20"), NO_LATENCY)
    size = 256 * MiB
    assert simulate(net, "direct", "allgather", size).time_s == pytest.approx(size / 4 / 20e9, rel=1e-6)
    # broadcast from rank 0 straight to the three others, each on its own link
    assert simulate(net, "direct", "broadcast", size).time_s == pytest.approx(size / 20e9, rel=1e-6)


def test_double_binary_tree_by_hand():
    """Two ranks: each tree reduces its half up one direction and broadcasts it down the other; every
    link direction carries M in all, so T = M/B plus one slice of pipeline fill."""
    net = build_network(load_topology("fully-connected:n=2,bw=10"), NO_LATENCY)
    size = 256 * MiB
    res = simulate(net, "double-binary-tree", "allreduce", size, slice_bytes=MiB, max_slices=1024)
    assert res.time_s == pytest.approx(size / 10e9, rel=0.01)


def test_chain_broadcast_baseline_by_hand():
    """The ring's broadcast is a pipelined chain per channel: c channels run the same way round a
    4-ring, each with M/2c in s slices of one 512 KiB step (NCCL's BROADCAST_CHUNKSTEPS = 1) at B/c:
    (s + N - 2) slice times."""
    net = build_network(load_topology("ring:n=4,bw=10"), NO_LATENCY)
    rings = ring_orders(net)
    c = len(rings) // 2
    size = 64 * MiB
    step = MiB // 2
    res = simulate(net, "ring", "broadcast", size)
    s = size / len(rings) / step
    assert res.time_s == pytest.approx((s + 4 - 2) * step / (10e9 / c), rel=1e-6)


def test_baselines_apply_where_they_have_a_form():
    net1 = build_network(load_topology("ring:n=4"))
    net2 = build_network(load_topology("dgx-a100:nodes=2"))
    assert not applicable("double-binary-tree", net2, "allgather")
    assert not applicable("hierarchical", net1, "allreduce")
    assert applicable("hierarchical", net2, "allreduce")
    with pytest.raises(Exception, match="no allgather form"):
        simulate(net2, "double-binary-tree", "allgather", MiB)


def test_rings_are_rail_aligned_and_balanced():
    net = build_network(load_topology("dgx-a100:nodes=2"))
    rings = ring_orders(net)
    crossings = []
    for ring in rings:
        for a, b in zip(ring, ring[1:] + ring[:1]):
            na, nb = net.ranks[a], net.ranks[b]
            if na.split(".")[0] != nb.split(".")[0]:
                assert na.split(".")[1] == nb.split(".")[1]  # same GPU index: same NIC rail
                crossings.append(na)
    # every GPU sends across boxes equally often
    assert len(set(crossings.count(x) for x in set(crossings))) == 1 and len(set(crossings)) == 16


def test_ring_schedule_is_a_verified_schedule():
    topo = load_topology("dgx-a100:nodes=2")
    net = build_network(topo)
    for collective in ("allgather", "allreduce", "broadcast"):
        sched = ring_schedule(net, collective)
        assert verify(sched, topo).ok
    ag = ring_schedule(net, "allgather")
    assert float(ag.algbw) == pytest.approx(213.333, rel=1e-4)  # 8 NICs x 25 GB/s x 16/15


def test_msccl_file_simulates_like_its_schedule():
    topo = load_topology("ring:n=4")
    net = build_network(topo)
    sched = generate(topo, "allgather", k=1)
    algo = export_msccl(sched).algo
    size = 256 * MiB
    xml = simulate_program(msccl_program(algo, net, size, MiB, 16), net, "xml", "allgather", size)
    trees = simulate(net, sched, size=size)
    assert xml.algbw_gbps == pytest.approx(trees.algbw_gbps, rel=0.02)


def test_bad_arguments():
    net = build_network(load_topology("ring:n=4"))
    with pytest.raises(Exception, match="unknown algorithm"):
        simulate(net, "butterfly", "allreduce", MiB)
    with pytest.raises(Exception, match="size must be"):
        simulate(net, "ring", "allreduce", 0)
    with pytest.raises(Exception, match="latency of class"):
        build_network(load_topology("ring:n=4"), {"link": -1})
