"""The optimum kept on one socket (msccl/detours.py optimum_on on without_cpu_links) and RCCL's further files for the packings
without the CPUs (msccl/generated.py rccl_files, finest_files): the MI300 dump's single RCCL file reaches 0.95 of
the bound at 1 GiB without losing 16 MiB (docs/msccl.md, "Trees kept on one socket")."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import cli, shared_file

from forestcoll.generate import generate
from forestcoll.msccl.detours import _cpus, cpu_detours, optimum_on, without_cpu_links, without_cpus
from forestcoll.msccl.export import ExportOptions, export_msccl
from forestcoll.msccl.fabric import for_gpu
from forestcoll.msccl.generated import _variants, finest_files, rccl_files
from forestcoll.topology import load_topology


def _mi300(nodes: int):
    path = shared_file("data", "nccl-topo", "topo_8p_940.xml")
    return load_topology(str(path), {"nodes": str(nodes), "fabric": "rail"})


def test_without_cpu_links_drops_only_the_links_between_cpus():
    topo = _mi300(4)
    cpus = _cpus(topo)
    bare = without_cpu_links(topo)
    assert bare is not None and {n.name for n in bare.nodes} == {n.name for n in topo.nodes}
    gone = [lk for lk in topo.links if lk not in bare.links]
    assert len(gone) == 8 and all(lk.src in cpus and lk.dst in cpus for lk in gone)
    assert without_cpu_links(load_topology("hypercube:dim=3")) is None  # no CPUs


def test_the_optimum_kept_on_one_socket_on_four_mi300_boxes():
    """Same exact rate; no edge crosses from one CPU to the other, so 192 detours become 64; edges still reach other
    GPUs' NICs through their CPU (the network peers the packing without the CPUs loses)."""
    topo = _mi300(4)
    sched = generate(topo, "allreduce")
    kept = optimum_on(topo, sched, without_cpu_links)
    assert kept is not None and kept.algbw == sched.algbw == sched.bound_algbw
    assert cpu_detours(topo, sched) == 192 and cpu_detours(topo, kept) == 64
    cpus = _cpus(topo)
    hops = [(a, b) for tree in kept.trees for e in tree.edges for a, b in zip(e.path, e.path[1:])]
    assert not any(a in cpus and b in cpus for a, b in hops)
    assert any(a in cpus for a, _b in hops)
    cube = load_topology("hypercube:dim=3")
    assert optimum_on(cube, generate(cube, "allgather"), without_cpu_links) is None


def test_finest_files_fill_a_blocks_steps():
    """finest_files: from an even file of 8 pieces per tree (x16), the most pieces per tree that fit (15: 60 steps
    per block), p / 2 times the steps of two pieces; nothing when the even file already has s pieces."""
    topo = _mi300(2)
    bare = optimum_on(topo, generate(topo, "allgather"), without_cpus)
    opts = for_gpu(None, topo.gpu)
    eight = export_msccl(bare, replace(opts, split=16, per_tree=8))
    two = export_msccl(bare, replace(opts, split=16, per_tree=2)).total_steps
    assert eight.total_steps == 4 * two
    (s, finer), = finest_files(bare, opts, [(16, eight)])
    assert s == 16 and finer.ok and finer.steps_per_tb == 60 and 2 * finer.total_steps == 15 * two
    assert finer.algo.name.endswith("_even15")
    full = export_msccl(bare, replace(opts, split=16, per_tree=16))
    assert 2 * full.total_steps == 16 * two and finest_files(bare, opts, [(16, full)]) == []
    assert finest_files(bare, opts, []) == []


def test_rccl_files_only_for_rccl():
    topo = _mi300(2)
    bare = optimum_on(topo, generate(topo, "allreduce"), without_cpus)
    nccl = ExportOptions()
    assert rccl_files(bare, nccl, _variants(bare, nccl, export_msccl(bare, nccl))) == []
    opts = for_gpu(None, topo.gpu)
    kinds = [k for k, _s, _r in rccl_files(bare, opts, _variants(bare, opts, export_msccl(bare, opts)))]
    assert "plain latency" in kinds and "2-channel" in kinds and "2-channel latency" in kinds
    assert rccl_files(bare, replace(opts, split=2), []) == []


@pytest.mark.slow
def test_generate_writes_the_one_socket_file_on_the_mi300_dump(tmp_path):
    """The whole command on four MI300 boxes, RCCL (allreduce, bound 198.2 GB/s): 104.4 / 183.5 -> 105.2 / 191.9 GB/s
    at 16 MiB / 1 GiB, the optimum kept on one socket on 2 channels in the latency order; no --sizes note."""
    out_path = tmp_path / "a.xml"
    dump = shared_file("data", "nccl-topo", "topo_8p_940.xml")
    code, out, err = cli("generate", str(dump), "--nodes", "4", "--fabric", "rail", "-c", "allreduce", "--format",
                         "msccl", "--no-check", "-o", str(out_path))
    assert code == 0, err
    assert ("note       the optimal k=8's trees packed without the links between the CPUs: their 2-channel latency "
            "file replaces k=8's written file (faster at 16MiB (105.2 against 104.4 GB/s) and 1GiB (191.9 against "
            "183.5 GB/s), slower at neither)") in out
    assert "forestcoll_allreduce_k8_c2_latency" in out and "--sizes" not in out
