"""Trees routed off the CPUs (msccl/detours.py): the MI300 dump's optimal trees join GPUs of one box through the
CPUs, which a runtime sends over the direct xGMI link; the same optimum packed without the CPUs competes for the file."""

from __future__ import annotations

import pytest
from conftest import cli, shared_file

from forestcoll.generate import generate
from forestcoll.msccl.detours import cpu_detours, optimum_on, without_cpus
from forestcoll.msccl.generated import generated_msccl
from forestcoll.topology import load_topology


def _mi300(nodes: int | None):
    path = shared_file("data", "nccl-topo", "topo_8p_940.xml")
    return load_topology(str(path), {"nodes": str(nodes), "fabric": "rail"} if nodes else {})


@pytest.mark.parametrize("collective, detours", [("allgather", 32), ("allreduce", 64)])
def test_the_optimum_packs_without_the_cpus_on_two_mi300_boxes(collective, detours):
    topo = _mi300(2)
    sched = generate(topo, collective)
    assert cpu_detours(topo, sched) == detours
    bare = optimum_on(topo, sched, without_cpus)
    assert bare is not None and bare.algbw == sched.algbw == sched.bound_algbw and cpu_detours(topo, bare) == 0
    assert not any(".cpu" in node for tree in bare.trees for e in tree.edges for node in e.path)


def test_nothing_without_detours_or_when_the_optimum_needs_the_cpus():
    one = _mi300(None)  # one box: the CPUs' PCIe links feed the GPUs, the optimum without them is lower
    sched = generate(one, "allgather")
    assert cpu_detours(one, sched) > 0 and without_cpus(one) is not None
    assert optimum_on(one, sched, without_cpus) is None
    cube = load_topology("hypercube:dim=3")  # no CPUs at all
    assert without_cpus(cube) is None and optimum_on(cube, generate(cube, "allgather"), without_cpus) is None


def test_the_off_cpu_file_is_written_where_it_is_faster():
    """Files rated by their busiest link (FileRate.bound, no simulation): the k=8 files of the trees through the CPUs
    are capped by their xGMI links, the off-CPU packing's are not, so its file replaces the file chosen by the race."""
    from forestcoll.simulate.msccl import file_rate

    topo = _mi300(2)
    sched = generate(topo, "allgather")
    links = file_rate(topo).bound
    chosen, result = generated_msccl(topo, sched, file_rate=links)
    assert chosen is not sched and chosen.algbw == sched.algbw and cpu_detours(topo, chosen) == 0
    assert result.notes[0].startswith("the optimal k=8's trees packed without the CPUs: their ")
    assert any(n.startswith("the optimal k=8's trees join GPUs of one box through a CPU (32 edges)") for n in result.notes)
    assert links(result.algo, 1 << 30) > 1.02 * links(generated_msccl(topo, sched, file_rate=links, split=False)[1].algo, 1 << 30)


@pytest.mark.slow
@pytest.mark.parametrize("runtime, kind, figures", [
    ("msccl-executor-nccl", "even pieces", "(faster at 16MiB (228.5 against 197.5 GB/s) and 1GiB (382.5 against 361.3 GB/s)"),
    (None, "finer even pieces", "(faster at 16MiB (232.1 against 229.4 GB/s) and 1GiB (383.6 against 364.1 GB/s)")])
def test_generate_writes_the_off_cpu_file_on_the_mi300_dump(tmp_path, runtime, kind, figures):
    """The whole command on four MI300 boxes (allgather, bound 396.4 GB/s): with msccl-executor-nccl's limits
    361.3 -> 382.5 GB/s at 1 GiB; with RCCL's 64 blocks, the fabric's default runtime, 361.3 -> 364.1 (even pieces
    x8, 4 per tree) -> 383.6 (6 pieces per tree, generated.finest_files)."""
    out_path = tmp_path / "a.xml"
    dump = shared_file("data", "nccl-topo", "topo_8p_940.xml")
    given = ["--runtime", runtime] if runtime else []
    code, out, err = cli("generate", str(dump), "--nodes", "4", "--fabric", "rail", "-c", "allgather", "--format", "msccl",
                         *given, "--no-check", "-o", str(out_path))
    assert code == 0, err
    assert (f"note       the optimal k=8's trees packed without the CPUs: their {kind} file (x8, nchunksperloop 2048) "
            "replaces k=8's written file " + figures) in out


def test_the_per_size_candidates_include_the_off_cpu_packing():
    """generate --sizes' candidates (simulate/select.py): on two MI300 boxes the optimal trees and the height-limited
    ones join GPUs of one box through the CPUs; each is offered again packed without them ("-offcpu", the same exact
    rate, no detour), after its own; the k-fixed ones without detours get none."""
    from forestcoll.simulate.network import build_network
    from forestcoll.simulate.select import OFF_CPUS, candidate_schedules

    topo = _mi300(2)
    net = build_network(topo)
    cands = candidate_schedules(topo, net, "allgather", sizes=[1 << 30], ring=False)
    bare = [name for name in cands if name.endswith(OFF_CPUS)]
    assert "forestcoll" + OFF_CPUS in bare
    for name in bare:
        own = cands[name.removesuffix(OFF_CPUS)]
        assert cpu_detours(topo, own) > 0 and cpu_detours(topo, cands[name]) == 0
        assert cands[name].algbw >= own.algbw and cands[name].k == own.k
        assert list(cands).index(name) > list(cands).index(name.removesuffix(OFF_CPUS))
    assert all(n + OFF_CPUS not in cands for n, s in cands.items() if not cpu_detours(topo, s))


def test_off_cpu_packing_keeps_the_k_and_needs_a_detour():
    """detours.off_cpu_packing: the optimal k=8 packed again at k=8 without the CPUs reaches the same exact rate; a
    schedule without detours (the hypercube's) gets nothing."""
    from forestcoll.msccl.detours import off_cpu_packing

    topo = _mi300(2)
    sched = generate(topo, "allgather")
    bare = off_cpu_packing(topo, sched, k=sched.k)
    assert bare is not None and bare.k == sched.k and bare.algbw == sched.algbw and cpu_detours(topo, bare) == 0
    cube = load_topology("hypercube:dim=3")
    assert off_cpu_packing(cube, generate(cube, "allgather", k=2), k=2) is None


@pytest.mark.slow
def test_the_per_size_choice_writes_the_off_cpu_file_on_two_mi300_boxes(tmp_path):
    """generate --sizes 16MiB --format msccl's choice on two MI300 boxes: the file written is an off-CPU packing's,
    faster than every file of the trees through the CPUs (main wrote one of those; here the race skips them all:
    their lower bounds on the time are above the off-CPU file's)."""
    from forestcoll.simulate.select import OFF_CPUS, export_by_size

    dump = shared_file("data", "nccl-topo", "topo_8p_940.xml")
    out = export_by_size(str(dump), "allgather", [16 << 20], str(tmp_path / "x"), extra={"nodes": "2", "fabric": "rail"},
                         check=False, workers=1)
    assert out.ok and len(out.ranges) == 1
    name = out.ranges[0].range.name
    assert OFF_CPUS in name, name
    rows = {r.algorithm: r.algbw_gbps for r in out.selection.table}  # the race leaves out the files it proves slower
    assert all(v < rows[name] for n, v in rows.items() if OFF_CPUS not in n)
