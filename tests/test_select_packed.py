"""The per-size choice (simulate/select.py) offers the single RCCL file's candidates on the MI300 dump: the optimum
kept on one socket ("-socket"), and for the packings its files on fewer channels in the latency order and its even
pieces as fine as fit ("-finest"), which compete where the single file's do (docs/msccl.md, "Trees kept on one
socket")."""

from __future__ import annotations

import pytest
from conftest import shared_file

from forestcoll.generate import generate
from forestcoll.msccl.detours import cpu_detours, optimum_on, without_cpu_links, without_cpus
from forestcoll.msccl.fabric import for_gpu
from forestcoll.msccl.ordering import AUTO_MIN_BYTES
from forestcoll.simulate import select
from forestcoll.simulate.select import EVEN, FINEST, LATENCY, NARROW, OFF_CPUS, SOCKET, candidate_files
from forestcoll.topology import load_topology


def _mi300(nodes: int):
    path = shared_file("data", "nccl-topo", "topo_8p_940.xml")
    return load_topology(str(path), {"nodes": str(nodes), "fabric": "rail"})


def test_the_per_size_candidates_include_the_optimum_kept_on_one_socket():
    """Four MI300 boxes: beside "-offcpu", the optimum kept on one socket (the same exact rate, 192 -> 64 detours);
    a fabric without CPUs gets neither."""
    topo = _mi300(4)
    sched = generate(topo, "allreduce")
    cands = select.off_cpu_candidates(topo, {"forestcoll": sched})
    assert list(cands) == ["forestcoll" + OFF_CPUS, "forestcoll" + SOCKET]
    kept = cands["forestcoll" + SOCKET]
    assert kept.algbw == sched.algbw and kept.k == sched.k and cpu_detours(topo, kept) == 64
    cube = load_topology("hypercube:dim=3")
    assert select.off_cpu_candidates(cube, {"forestcoll": generate(cube, "allreduce")}) == {}


def test_the_packings_get_the_plain_file_on_fewer_channels_in_the_latency_order():
    """For a packing's name (and only for one), RCCL's candidate files add the plain file on fewer channels in the
    latency order (two MI300 boxes, allgather off the CPUs); the same schedule under another name, or for
    msccl-executor-nccl, gets none."""
    topo = _mi300(2)
    bare = optimum_on(topo, generate(topo, "allgather"), without_cpus)
    rccl = for_gpu(None, topo.gpu)
    name = "forestcoll" + OFF_CPUS
    files, named, _notes = candidate_files({name: bare}, rccl)
    assert f"{name}{NARROW}2{LATENCY}" in files and named[f"{name}{NARROW}2{LATENCY}"] is bare
    assert files[f"{name}{NARROW}2{LATENCY}"].channels == files[f"{name}{NARROW}2"].channels == 2
    other, _named, _notes = candidate_files({"forestcoll-k8": bare}, rccl)
    assert "forestcoll-k8-c2" in other and "forestcoll-k8-c2-latency" not in other
    nccl, _named, _notes = candidate_files({name: bare})
    assert not any(NARROW in n for n in nccl)


@pytest.mark.slow
def test_the_packings_get_the_finest_even_pieces():
    """Four MI300 boxes, allgather off the CPUs: the even file is x8 in 4 pieces per tree (40 steps); the finest that
    fits, 6 pieces (60 steps, the single file's), is offered as "-even8-finest", for a packing's name only."""
    topo = _mi300(4)
    bare = optimum_on(topo, generate(topo, "allgather"), without_cpus)
    rccl = for_gpu(None, topo.gpu)
    name = "forestcoll" + OFF_CPUS
    files, named, _notes = candidate_files({name: bare}, rccl)
    finest = [n for n in files if n.endswith(FINEST)]
    assert finest == [f"{name}{EVEN}8{FINEST}"] and named[finest[0]] is bare
    assert files[finest[0]].algo.name.endswith("_even6") and files[finest[0]].steps_per_tb == 60
    assert files[f"{name}{EVEN}8"].steps_per_tb == 40
    other, _named, _notes = candidate_files({"forestcoll-k8": bare}, rccl)
    assert not any(n.endswith(FINEST) for n in other)


def test_the_packings_narrow_files_compete_at_every_size():
    """Even pieces and other files on fewer channels compete from AUTO_MIN_BYTES up; a packing's files on fewer
    channels at every size (the single file takes one at 16 MiB)."""
    names = ["forestcoll", "forestcoll-c2", "forestcoll-even8", "forestcoll-offcpu-c2", "forestcoll-socket-c2-latency",
             "forestcoll-offcpu-even8-finest", "forestcoll-offcpu-even8-c2"]
    assert select.smallest_sizes(names) == {"forestcoll-c2": AUTO_MIN_BYTES, "forestcoll-even8": AUTO_MIN_BYTES,
                                     "forestcoll-offcpu-even8-finest": AUTO_MIN_BYTES,
                                     "forestcoll-offcpu-even8-c2": AUTO_MIN_BYTES}
    assert select.packed("forestcoll-socket") and select.packed("forestcoll-h3-offcpu") and not select.packed("forestcoll-k8")
    cube = load_topology("hypercube:dim=3")
    assert optimum_on(cube, generate(cube, "allgather"), without_cpu_links) is None


def test_the_per_size_packings_get_the_single_files_rccl_layouts():
    """Every file the single RCCL file races for a packing (msccl/generated.py rccl_files, from rccl_layouts) is
    offered by the per-size choice under its name (two MI300 boxes, allgather off the CPUs), the same file apart from
    its algo name: the two lists come from one function."""
    from dataclasses import replace

    from forestcoll.msccl.export import export_msccl
    from forestcoll.msccl.generated import RCCL_LAYOUTS, _variants, rccl_files, rccl_layouts

    topo = _mi300(2)
    bare = optimum_on(topo, generate(topo, "allgather"), without_cpus)
    rccl = for_gpu(None, topo.gpu)
    name = "forestcoll" + OFF_CPUS
    files, _named, _notes = candidate_files({name: bare}, rccl)
    mine = _variants(bare, rccl, export_msccl(bare, rccl))
    got = rccl_layouts(bare, rccl, mine)
    assert list(got) == list(RCCL_LAYOUTS) and got["latency"] and got["narrow"] and got["narrow latency"]
    suffix = {"finest": lambda n: f"{EVEN}{n}{FINEST}", "narrow": lambda n: f"{NARROW}{n}",
              "narrow latency": lambda n: f"{NARROW}{n}{LATENCY}",
              "latency": lambda n: f"{select.SPLIT}{n}{LATENCY}" if n > 1 else LATENCY}
    for layout, entries in got.items():
        for _kind, n, result in entries:
            per_size = files[name + suffix[layout](n)]
            assert replace(per_size.algo, name="") == replace(result.algo, name="")
    single = rccl_files(bare, rccl, mine)
    assert [r.algo for _k, _s, r in single] == [r.algo for layout in RCCL_LAYOUTS for _k, _n, r in got[layout]]
