"""The variant of the chosen file generate --format msccl writes (plain, split, even pieces per tree) and the even
pieces the per-size selection offers; the per-size column of benchmarks/delivered.py is what generate --sizes writes.

hypercube:dim=3 at k=16 (128 chunks per loop, 8 MiB per MSCCL chunk at 1 GiB: a tree carrying one chunk crosses a
stage in 8 units, under the 16 that make the exporter cut even pieces): the allreduce's even-pieces file (k16_s16,
2048 chunks per loop, its heavy blocks spread: k16_s8 before) is faster at 1 GiB and at 16 MiB than the plain and split files, the allgather's is slower
at 16 MiB (326.9 GB/s against the plain file's 327.8) and is not written."""

from __future__ import annotations

import pytest
from conftest import benchmark, cli

from forestcoll.generate import generate
from forestcoll.msccl.export import ExportOptions, export_msccl
from forestcoll.msccl.generated import MID_SIZE, even_files, written_variant
from forestcoll.simulate.msccl import file_rate
from forestcoll.topology import load_topology

GIB = 1 << 30
TOPO = "hypercube:dim=3"


@pytest.fixture(scope="module")
def cube():
    return load_topology(TOPO)


def asked_rates(topo):
    real = file_rate(topo)
    asked = []

    def rate(algo, size):
        asked.append((algo.name, size))
        return real(algo, size)
    return rate, asked


def test_even_pieces_are_written_where_they_win(cube):
    sched = generate(cube, "allreduce", k=16)
    plain = export_msccl(sched)
    [(s, even)] = even_files(sched, None, plain)
    assert (s, plain.algo.nchunksperloop, even.algo.nchunksperloop) == (16, 128, 2048)
    assert even.algo.name == "forestcoll_allreduce_k16_s16_even" and even.steps_per_tb <= 64
    rate, asked = asked_rates(cube)
    written, note = written_variant(sched, plain, ExportOptions(), rate, GIB)
    assert written.algo == even.algo
    assert note.startswith("variant written: even pieces per tree, every chunk cut into 16 MSCCL chunks")
    assert "GB/s at 1GiB / 16MiB: plain 166.6 / 150.2, split x2 166.6 / 161.7, even pieces x16 168.4 / 166.0" in note
    assert len(asked) == len(set(asked)) == 6  # each file once per size
    real = file_rate(cube)
    for size in (1 << 20, MID_SIZE, GIB):  # not slower than the plain file at any of the three sizes
        assert real(even.algo, size) >= real(plain.algo, size)


def test_even_pieces_are_not_written_where_they_lose(cube):
    sched = generate(cube, "allgather", k=16)
    plain = export_msccl(sched)
    assert even_files(sched, None, plain)  # there is an even-pieces file ...
    rate, asked = asked_rates(cube)
    written, note = written_variant(sched, plain, ExportOptions(), rate, GIB)
    assert written is plain  # ... slower at 16 MiB: not written, and nothing simulated at 1 GiB
    assert note == ("variant written: plain (as exported); GB/s at 1GiB / 16MiB: plain - / 327.8, split x2 - / 326.0, "
                    "even pieces x16 - / 326.9 (each replaces the one before it when faster at one size and slower at "
                    "neither)")
    assert all(size == MID_SIZE for _name, size in asked)


@pytest.mark.parametrize("table, written", [
    # split ties at 1 GiB and wins at 16 MiB; even pieces tie at 1 GiB and lose to the split at 16 MiB: split
    ({"plain": (170.0, 150.0), "split": (170.0, 160.0), "even": (170.0, 159.0)}, "split"),
    # even pieces faster at 1 GiB, not slower than the split at 16 MiB: even
    ({"plain": (170.0, 150.0), "split": (170.0, 160.0), "even": (171.0, 160.0)}, "even"),
    # even pieces faster at 1 GiB but slower at 16 MiB than the split chosen before them: split
    ({"plain": (170.0, 150.0), "split": (170.0, 160.0), "even": (175.0, 159.9)}, "split"),
    # the split slower at 1 GiB; even pieces faster at 1 GiB and tied at 16 MiB with the plain file: even
    ({"plain": (170.0, 150.0), "split": (169.9, 160.0), "even": (171.0, 150.0)}, "even"),
    # a tie everywhere keeps the plain file (fewest steps)
    ({"plain": (170.0, 150.0), "split": (170.0, 150.0), "even": (170.0, 150.0)}, "plain"),
])
def test_the_rule_on_given_rates(cube, table, written):
    sched = generate(cube, "allreduce", k=16)
    plain = export_msccl(sched)

    def kind(algo):
        return "even" if algo.name.endswith("_even") else "split" if "_s" in algo.name else "plain"

    out, note = written_variant(sched, plain, ExportOptions(), lambda algo, size: table[kind(algo)][size == MID_SIZE],
                                GIB)
    assert kind(out.algo) == written, note


def test_generate_names_the_variant(tmp_path):
    """The CLI's note names the variant written and the rates compared (the optimal k=3's split file here)."""
    xml = tmp_path / "a.xml"
    code, out, err = cli("generate", TOPO, "-c", "allreduce", "--format", "msccl", "-o", str(xml), "--no-check")
    assert code == 0, err
    assert ("note       variant written: split, every chunk cut into 4 MSCCL chunks, one per step (nchunksperloop 96); "
            "GB/s at 1GiB / 16MiB: plain 170.8 / 146.4, split x4 170.9 / 165.1 (each replaces") in out


def test_candidate_files_offer_even_pieces_in_the_progress_order(cube):
    from forestcoll.simulate.network import build_network
    from forestcoll.simulate.select import EVEN, LATENCY, SPLIT, candidate_files, select_schedules

    cands = {"forestcoll-k16": generate(cube, "allreduce", k=16)}
    files, named, notes = candidate_files(cands)
    assert not notes
    assert sorted(files) == ["forestcoll-k16", f"forestcoll-k16{EVEN}16", "forestcoll-k16" + LATENCY,
                             f"forestcoll-k16{SPLIT}2", f"forestcoll-k16{SPLIT}2{LATENCY}"]
    net = build_network(cube)
    sel = select_schedules(cube, net, "allreduce", [GIB], named, margin=0.0, exhaustive=True,
                           files={n: r.algo for n, r in files.items()})
    assert sel.ranges[0].name == f"forestcoll-k16{EVEN}16"
    # generate --sizes lets even pieces (cut for 1 GiB) compete from 256 MiB up only: at 1 MiB the even file ties the
    # split one and would carry its range up through 16 MiB, where it is slower
    sel = select_schedules(cube, net, "allreduce", [1 << 20, GIB], named, exhaustive=True,
                           files={n: r.algo for n, r in files.items()}, smallest={f"forestcoll-k16{EVEN}16": 256 << 20})
    assert {r.algorithm for r in sel.table if r.size_bytes == 1 << 20} == set(files) - {f"forestcoll-k16{EVEN}16"}
    assert {r.algorithm for r in sel.table if r.size_bytes == GIB} == set(files)


def test_delivered_per_size_column_is_what_generate_sizes_writes(tmp_path):
    delivered = benchmark("delivered")
    from forestcoll.simulate.network import build_network

    topo = load_topology("ring:n=4")
    sizes = [s for s, _ in delivered.SIZES]
    cells = delivered.size_files(topo, build_network(topo), "allgather", sizes)
    code, out, err = cli("generate", "ring:n=4", "-c", "allgather", "--sizes", ",".join(n for _s, n in delivered.SIZES),
                         "--format", "msccl", "-o", str(tmp_path / "d"), "--no-check")
    assert code == 0, err
    written = {}
    for line in out.splitlines():  # range      0..1048575 bytes: forestcoll-... (k=1; GB/s at 1MiB 40.7, 16MiB 50.2)
        if line.startswith("range "):
            name = line.split(": ", 1)[1].split(" (")[0]
            for shown in line.split("GB/s at ", 1)[1].rstrip(")").split(", "):
                label, rate = shown.split(" ")
                written[label] = (name, rate)
    assert sorted(written) == sorted(n for _s, n in delivered.SIZES) and sorted(cells) == sizes
    for size, label in delivered.SIZES:
        name, rate = written[label]
        assert cells[size].startswith(f"{rate} (") and cells[size].endswith(f"; {name})"), (cells[size], name, rate)


def test_delivered_single_file_is_what_generate_writes(tmp_path):
    delivered = benchmark("delivered")
    from forestcoll.msccl.ir import parse_algo

    xml = tmp_path / "a.xml"
    code, _out, err = cli("generate", TOPO, "-c", "allreduce", "--format", "msccl", "-o", str(xml), "--no-check")
    assert code == 0, err
    topo = load_topology(TOPO)
    sched, algo, why = delivered.written_by_generate(topo, generate(topo, "allreduce"))
    assert why == "" and algo.name == parse_algo(xml.read_text()).name == "forestcoll_allreduce_k3_s4"


def test_rccl_files_offer_narrower_channels_to_the_per_size_choice():
    """Under RCCL (an AMD fabric's runtime) a file on fewer channels than the widest that fits is a further variant of
    the per-size choice (``-c<c>``, half the channels here), within the limits and passing the self-check; under
    msccl-executor-nccl there is none, so those files and choices are unchanged."""
    from forestcoll.msccl.export import self_check
    from forestcoll.msccl.fabric import for_gpu
    from forestcoll.msccl.generated import narrow_files
    from forestcoll.simulate.select import NARROW, candidate_files, narrowed

    topo = load_topology("mi250:nodes=1")
    sched = generate(topo, "allgather", k=2)
    rccl = for_gpu(None, topo.gpu)
    assert rccl.runtime == "rccl"
    wide = export_msccl(sched, rccl)
    assert wide.channels == 14
    [(c, narrow)] = narrow_files(sched, rccl, wide)
    assert (c, narrow.channels, narrow.algo.name) == (7, 7, "forestcoll_allgather_k2_c7")
    assert narrow.tbs_per_gpu < wide.tbs_per_gpu and narrow.ok
    assert self_check(narrow, "rccl")  # raises on a lint error or a stuck run
    assert narrow_files(sched, None, export_msccl(sched)) == []
    files, _named, _notes = candidate_files({"forestcoll-k2": sched}, rccl)
    assert files[f"forestcoll-k2{NARROW}7"].algo == narrow.algo
    assert not any(narrowed(name) for name in candidate_files({"forestcoll-k2": sched}, rccl, narrow=False)[0])
    plain, _named, _notes = candidate_files({"forestcoll-k2": sched})
    assert not any(narrowed(name) for name in plain)


def test_rccl_even_pieces_files_get_narrower_files_too():
    """An even-pieces RCCL file gets its narrower files too (``-even<s>-c<c>``: even pieces on fewer channels, in both
    step orders: the latency order measured fastest at 1 GiB on the MI300 allgather); dgx-a100:nodes=2 k=8 under
    --runtime rccl: 4 channels, so 1, 2 and 3 as well."""
    from forestcoll.msccl.fabric import for_gpu
    from forestcoll.simulate.select import EVEN, LATENCY, candidate_files, narrowed

    topo = load_topology("dgx-a100:nodes=2")
    sched = generate(topo, "allreduce", k=8)
    files, _named, _notes = candidate_files({"forestcoll-k8": sched}, for_gpu(None, topo.gpu, "rccl"))
    evens = [name for name in files if EVEN in name]
    assert sorted(evens) == sorted(["forestcoll-k8-even16"] + [f"forestcoll-k8-even16-c{c}{order}" for c in (1, 2, 3)
                                                               for order in ("", LATENCY)])
    for name in evens:
        if narrowed(name):
            wide = files[name.removesuffix(LATENCY).rsplit("-c", 1)[0]]
            assert files[name].channels < wide.channels
            assert files[name].algo.nchunksperloop > files["forestcoll-k8"].algo.nchunksperloop  # pieces still even
            assert files[name].algo.name.endswith("_even" + name.split("-even16")[1].replace("-", "_"))
