"""The one MSCCL file generate --format msccl writes: the fastest file that fits, split where that is faster at one of
1 GiB / 16 MiB and slower at neither (even pieces per tree: tests/test_msccl_variants.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import cli

from forestcoll.generate import generate
from forestcoll.msccl.export import ExportOptions, export_msccl
from forestcoll.msccl.generated import MID_SIZE, generated_msccl, latency_files, split_files
from forestcoll.topology import load_topology

GIB = 1 << 30


@pytest.fixture(scope="module")
def cube():
    """hypercube:dim=3 allreduce: the optimal k=3 (24 chunks per loop) fits; k=2 and k=1 below it; its split file
    cuts every chunk into 4 (96 chunks per loop, 16 steps per thread block)."""
    topo = load_topology("hypercube:dim=3")
    return topo, generate(topo, "allreduce")


def rates(table):
    """A file_rate from {(nchunksperloop, size): GB/s}; files not in it rate by their chunks per loop (so the
    optimal k=3's file is the fastest of the powers of two below it), except the split and even-pieces files of
    the other k, which lose (0.1: the tests of every k's variants set their own)."""
    def rate(algo, size):
        other = not algo.name.startswith("forestcoll_allreduce_k3") and "_s" in algo.name
        return table.get((algo.nchunksperloop, size), 0.1 if other else algo.nchunksperloop / 10)
    return rate


def test_split_files_of_the_optimal_file(cube):
    _topo, sched = cube
    first = export_msccl(sched)
    [(s, finer)] = split_files(sched, None, first)
    assert (s, first.algo.nchunksperloop, finer.algo.nchunksperloop) == (4, 24, 96)
    assert finer.algo.name == "forestcoll_allreduce_k3_s4" and finer.steps_per_tb <= 64
    assert split_files(sched, None, finer) == []  # one chunk per step already: nothing finer


@pytest.mark.parametrize("table, written, said", [
    ({}, 96, "variant written: split, every chunk cut into 4 MSCCL chunks, one per step (nchunksperloop 96); GB/s at "
             "1GiB / 16MiB: plain 2.4 / 2.4, split x4 9.6 / 9.6 (each replaces the one before it when faster at one "
             "size and slower at neither)"),
    # equal at 1 GiB and faster at 16 MiB: split (not slower where k was chosen, faster where the runtime gives a
    # chunk one loop iteration)
    ({(24, GIB): 170.7, (96, GIB): 170.7, (24, MID_SIZE): 150.8, (96, MID_SIZE): 165.1}, 96,
     "variant written: split, every chunk"),
    # slower at 1 GiB, however much faster at 16 MiB: not split
    ({(24, GIB): 170.7, (96, GIB): 170.6, (24, MID_SIZE): 150.8, (96, MID_SIZE): 165.1}, 24,
     "variant written: plain (as exported); GB/s at 1GiB / 16MiB: plain 170.7 / 150.8, split x4 170.6 / 165.1"),
    # equal at both sizes: the finer file gains nothing, not split
    ({(24, GIB): 170.7, (96, GIB): 170.7, (24, MID_SIZE): 150.8, (96, MID_SIZE): 150.8}, 24,
     "variant written: plain (as exported); GB/s at 1GiB / 16MiB: plain 170.7 / 150.8, split x4 170.7 / 150.8"),
    # slower at 16 MiB: not split, and not simulated at 1 GiB
    ({(24, GIB): 170.7, (96, GIB): 171.7, (24, MID_SIZE): 150.8, (96, MID_SIZE): 150.7}, 24,
     "variant written: plain (as exported); GB/s at 1GiB / 16MiB: plain - / 150.8, split x4 - / 150.7"),
])
def test_the_written_file_is_split_where_that_is_faster_and_not_slower(cube, table, written, said):
    topo, sched = cube
    asked = []

    def file_rate(algo, size):
        asked.append((algo.nchunksperloop, size))
        return rates(table)(algo, size)
    chosen, result = generated_msccl(topo, sched, file_rate=file_rate)
    assert chosen is sched and result.algo.nchunksperloop == written
    assert result.notes[0].startswith("the optimal k=3's file is the fastest of the files that fit")
    assert result.notes[1].startswith(said)
    assert len(asked) == len(set(asked))  # each file simulated once per size (the unsplit 1 GiB rate is reused)
    assert ((96, GIB) in asked) == (table.get((96, MID_SIZE), 9.6) >= table.get((24, MID_SIZE), 2.4))


def test_no_split_when_asked_or_when_the_options_split(cube):
    topo, sched = cube
    _s, result = generated_msccl(topo, sched, file_rate=rates({}), split=False)
    assert result.algo.nchunksperloop == 24 and not any("split" in n for n in result.notes)
    _s, result = generated_msccl(topo, sched, ExportOptions(split=2), file_rate=rates({}))
    assert result.algo.name == "forestcoll_allreduce_k3_s2" and not any("split" in n for n in result.notes)
    _s, result = generated_msccl(topo, sched)  # no rates: the optimal k's file as it is
    assert result.algo.nchunksperloop == 24 and result.notes == export_msccl(sched).notes


def test_generate_writes_the_split_file_and_it_keeps_its_trees_rate(tmp_path):
    """The real rates: hypercube:dim=3 allreduce's file at 16 MiB is 146.4 GB/s unsplit (0.89 of its trees'
    163.9), 165.1 split; 170.8 / 170.9 at 1 GiB."""
    from forestcoll.msccl.ir import read_algo
    from forestcoll.simulate.core import simulate
    from forestcoll.simulate.msccl import simulate_msccl
    from forestcoll.simulate.network import build_network

    xml = tmp_path / "a.xml"
    code, out, err = cli("generate", "hypercube:dim=3", "-c", "allreduce", "--format", "msccl", "-o", str(xml))
    assert code == 0, err
    assert "algorithm  forestcoll_allreduce_k3_s4: allreduce, 8 gpus, 96 chunks per loop" in out
    assert "note       variant written: split, every chunk cut into 4 MSCCL chunks, one per step (nchunksperloop 96); " \
           "GB/s at 1GiB / 16MiB: plain 170.8 / 146.4, split x4 170.9 / 165.1 (each replaces" in out
    assert out.count("a multiple of nchunksperloop") == 1  # the written file's own note only
    assert "checked    in-place: OK" in out and "checked    out-of-place: OK" in out
    topo = load_topology("hypercube:dim=3")
    net = build_network(topo)
    algo, _text = read_algo(str(xml))
    trees = simulate(net, generate(topo, "allreduce"), size=MID_SIZE).algbw_gbps
    assert simulate_msccl(algo, net, MID_SIZE).algbw_gbps >= 0.99 * trees
    assert cli("msccl", "run", str(xml))[0] == 0


def test_split_flag(tmp_path):
    xml = tmp_path / "a.xml"
    code, out, err = cli("generate", "hypercube:dim=3", "-c", "allreduce", "--k", "3", "--format", "msccl", "-o", str(xml),
                         "--split", "2", "--no-check")
    assert code == 0, err
    assert "forestcoll_allreduce_k3_s2: allreduce, 8 gpus, 48 chunks per loop" in out
    sched = tmp_path / "s.json"
    assert cli("generate", "ring:n=4", "-c", "allgather", "-o", str(sched))[0] == 0
    code, out, err = cli("export", str(sched), "--format", "msccl", "-o", str(xml), "--split", "8")
    assert code == 0 and "_s8: allgather, 4 gpus" in out, err
    for args, message in [
        (("export", str(sched), "--format", "msccl", "-o", str(tmp_path / "b.xml"), "--split", "0"),
         "split must be within 1..64, got 0"),
        (("export", str(sched), "--format", "mscclpp", "-o", str(tmp_path / "b.json"), "--split", "2"),
         "--split applies to --format msccl only"),
        (("generate", "ring:n=4", "-c", "alltoall", "--format", "msccl", "-o", str(tmp_path / "b.xml"), "--split", "2"),
         "--split does not apply to alltoall"),
    ]:
        code, out, err = cli(*args)
        assert code == 2 and message in err and err.count("\n") == 1, (args, err)
        assert not (tmp_path / "b.xml").exists() and not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("split_gib, split_mid, written", [
    (210.0, 9.6, 96), (200.0, 9.6, 96),  # faster at both; tied at 1 GiB and faster at 16 MiB
    (190.0, 9.6, 16),  # slower at 1 GiB than k=2's file
    (210.0, 1.0, 16),  # slower at 16 MiB than k=2's file
])
def test_the_optimal_files_variant_competes_when_its_plain_file_lost_the_race(cube, split_gib, split_mid, written):
    """k=2's plain file wins the race at 1 GiB (200 against the optimal k=3's 170); the optimal's split file (96 chunks)
    then replaces k=2's file only when faster at one of 1 GiB / 16 MiB and slower at neither."""
    topo, sched = cube
    table = {(16, GIB): 200.0, (24, GIB): 170.0, (96, GIB): split_gib, (96, MID_SIZE): split_mid}
    chosen, result = generated_msccl(topo, sched, file_rate=rates(table))
    assert result.algo.nchunksperloop == written
    assert (chosen is sched) == (written == 96) and chosen.k == (3 if written == 96 else 2)
    if written == 96:
        faster = "16MiB (9.6 against 1.6 GB/s)" + (" and 1GiB (210.0 against 200.0 GB/s)" if split_gib > 200 else "")
        assert result.notes[0].startswith(f"the optimal k=3's split file (x4, nchunksperloop 96) replaces k=2's written "
                                          f"file (faster at {faster}, slower at neither); k=2's: the optimal k=3 fits, "
                                          "but its file is slower")
    else:
        assert result.notes[0].startswith("the optimal k=3 fits, but its file is slower; exported k=2")


def test_every_fitting_ks_variants_compete(cube):
    """The optimal k=3's file wins the race (9.6 and 2.4 GB/s at 1 GiB and 16 MiB in ``rates``); k=1's even
    files do not exist here, and k=2's split file (x8, 128 chunks per loop) replaces it when faster at one size
    and slower at neither; a file whose bound is below the written file's rate at 1 GiB is not simulated."""
    topo, sched = cube
    table = {(24, GIB): 9.6, (24, MID_SIZE): 9.6, (96, GIB): 9.6, (96, MID_SIZE): 9.6, (128, GIB): 9.7,
             (128, MID_SIZE): 9.6}
    chosen, result = generated_msccl(topo, sched, file_rate=rates(table))
    assert (chosen.k, result.algo.name) == (2, "forestcoll_allreduce_k2_s8")
    assert result.notes[0].startswith("k=2's split file (x8, nchunksperloop 128) replaces k=3's written file (faster at "
                                      "1GiB (9.7 against 9.6 GB/s), slower at neither); k=3's: the optimal k=3's file")
    [other] = [n for n in result.notes if n.startswith("the other files that fit")]
    assert other.startswith("the other files that fit (k=2, 1: plain, split, even pieces) competed by the same rule: "
                            "2 simulated, 2 not")
    asked = []

    def rate(algo, size):
        asked.append((algo.name, size))
        return rates(table)(algo, size)
    rate.bound = lambda algo, size: 9.5 if algo.nchunksperloop == 128 else 1e9  # k=2's split file cannot win
    chosen, result = generated_msccl(topo, sched, file_rate=rate)
    assert (chosen.k, result.algo.name) == (3, "forestcoll_allreduce_k3")  # ties at both sizes: the fewer steps
    assert not any(name.startswith("forestcoll_allreduce_k2_s") for name, _size in asked)
    [other] = [n for n in result.notes if n.startswith("the other files that fit")]
    assert other.endswith("1 simulated, 3 not (their busiest link, or their rate in the race, is below the "
                                     "file's chosen so far at 1GiB)")


def _dgx1_allgather(path) -> str:
    code, out, err = cli("generate", "dgx-1", "-c", "allgather", "--format", "msccl", "--no-check", "-o", str(path))
    assert code == 0, err
    return out


def test_a_smaller_ks_even_file_is_written_on_dgx1_allgather(tmp_path):
    """dgx-1 allgather (optimal k=162): k=32's plain file wins the race of k (147.7 GB/s at 1 GiB) and stays plain
    (its even file loses at 16 MiB, 137.8 against 144.9), which main at 3be3787 wrote; k=64's even file (148.3 /
    145.4 GB/s at 1 GiB / 16 MiB) now replaces it; then the packings as the runtime routes the fabric compete by the
    same rule (sock21 raced them at 1 GiB only and took k=8's plain file, 165.7 GB/s there but 140.5 at 16 MiB):
    k=256's even file, 162.9 / 151.6 GB/s, faster at both sizes than k=64's."""
    out = _dgx1_allgather(tmp_path / "a.xml")
    assert ("k=64's even pieces file (x8, nchunksperloop 4096) replaces k=32's written file (faster at 16MiB "
            "(145.4 against 144.9 GB/s) and 1GiB (148.3 against 147.7 GB/s), slower at neither)") in out
    # then, below 0.95 of the bound, the fabric packed as the runtime routes it competes (msccl/routed.py)
    assert "algorithm  forestcoll_allgather_k256_s8_even: allgather, 8 gpus, 16384 chunks per loop" in out
    assert ("k=256's trees packed as the runtime routes the fabric: their even pieces file (x8, nchunksperloop "
            "16384) replaces k=303's written file (faster at 16MiB (151.6 against 151.2 GB/s) and 1GiB (162.9 "
            "against 162.3 GB/s), slower at neither)") in out
    assert "k=256's, 93.3% of the bound, is taken" in out


@pytest.mark.slow
def test_the_file_written_after_every_ks_variants_competed_is_deterministic(tmp_path):
    """Two runs of dgx-1 allgather (the race of every k's variants) write the same bytes."""
    paths = [tmp_path / "a.xml", tmp_path / "b.xml"]
    outs = [_dgx1_allgather(path) for path in paths]
    assert paths[0].read_bytes() == paths[1].read_bytes() and outs[1].replace("b.xml", "a.xml") == outs[0]


@pytest.mark.parametrize("spec, collective, k", [("hypercube:dim=3", "allreduce", 3), ("dgx-1", "allgather", 64),
                                                  ("ring:n=6", "reduce_scatter", 2), ("torus:dims=3x3", "allreduce", 1)])
def test_the_bound_is_never_below_the_simulated_rate(spec, collective, k):
    """FileRate.bound (the busiest link's bytes) is an upper bound on the simulated rate at every size, so the race
    may skip a file whose bound is below the rate to beat; and it is reached where the links limit (1 GiB)."""
    from forestcoll.simulate.msccl import file_rate

    topo = load_topology(spec)
    plain = export_msccl(generate(topo, collective, k=k))
    rate = file_rate(topo)
    for size in (1 << 20, MID_SIZE, GIB):
        assert rate(plain.algo, size) <= rate.bound(plain.algo, size) * (1 + 1e-9)
    assert rate(plain.algo, GIB) >= 0.9 * rate.bound(plain.algo, GIB)


def test_rccl_files_race_their_latency_order_too(cube):
    topo, sched = cube
    rccl = ExportOptions(runtime="rccl")
    first = export_msccl(sched, rccl)
    [(kind, s, late)] = latency_files(sched, rccl, [("plain", 1, first)])
    assert (kind, s, late.algo.name) == ("plain latency", 1, "forestcoll_allreduce_k3_latency")
    assert late.algo.nchunksperloop == first.algo.nchunksperloop and late.tbs_per_gpu == first.tbs_per_gpu
    assert latency_files(sched, None, [("plain", 1, export_msccl(sched))]) == []  # msccl-executor-nccl: as before
    assert latency_files(sched, replace(rccl, order="tree"), [("plain", 1, first)]) == []  # the user's order stays

    def file_rate(algo, size):  # the latency files are faster at 16 MiB, equal at 1 GiB
        return 10.0 + (size == MID_SIZE and algo.name.endswith("_latency")) + algo.nchunksperloop / 1000
    _chosen, result = generated_msccl(topo, sched, rccl, file_rate=file_rate)
    assert result.algo.name == "forestcoll_allreduce_k3_s4_latency"
    assert any(n.startswith("variant written: split, every chunk cut into 4 MSCCL chunks, one per step, steps in the "
                            "latency order") for n in result.notes)
    _chosen, result = generated_msccl(topo, sched, file_rate=file_rate)
    assert not result.algo.name.endswith("_latency")
