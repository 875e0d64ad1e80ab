"""generate --format msccl --buffsize: the runtime buffer's flags, the choice ranked at the buffer's slice, the
per-slice cost in the MSCCL simulation (default unchanged)."""

from __future__ import annotations

import pytest
from conftest import cli

from forestcoll.errors import UsageError
from forestcoll.msccl.buffer import AUTO_BUFFSIZES, REPORT_SIZES, buffer_slice, buffered_msccl, parse_buffsize, parse_slice_cost


def test_parse_buffsize():
    assert parse_buffsize("512KiB") == (512 << 10,)
    assert parse_buffsize("4MiB") == (4 << 20,)
    assert parse_buffsize("AUTO") == AUTO_BUFFSIZES
    assert buffer_slice(4 << 20) == 1 << 20 and buffer_slice(512 << 10) == 128 << 10  # the simulator's --slice
    for bad in ("3MiB", "32KiB", "128MiB", "0", "lots", "1.5KiB"):
        with pytest.raises(UsageError, match="--buffsize"):
            parse_buffsize(bad)


def test_parse_slice_cost():
    assert parse_slice_cost(None) == pytest.approx(1e-6)
    assert parse_slice_cost("2") == pytest.approx(2e-6)
    assert parse_slice_cost("500ns") == pytest.approx(0.5e-6)
    assert parse_slice_cost("0") == 0.0
    for bad in ("-1", "abc", "2ms"):
        with pytest.raises(UsageError, match="slice-cost"):
            parse_slice_cost(bad)


@pytest.mark.parametrize("args, message", [
    (("--format", "msccl", "--buffsize", "3MiB"), "NCCL_BUFFSIZE must be a power of two from 64KiB to 64MiB"),
    (("--format", "msccl", "--buffsize", "big"), "--buffsize: bad size 'big'"),
    (("--format", "msccl", "--slice-cost", "2"), "--slice-cost is the per-slice cost --buffsize ranks files with"),
    (("--format", "msccl", "--buffsize", "1MiB", "--slice-cost", "-1"), "--slice-cost: must be >= 0"),
    (("--format", "msccl", "--buffsize", "1MiB", "--k", "2"), "drop --k"),
    (("--format", "msccl", "--buffsize", "1MiB", "--max-height", "3"), "drop --max-height"),
    (("--buffsize", "1MiB",), "it takes --format msccl"),
    (("--format", "mscclpp", "--buffsize", "1MiB"), "it takes --format msccl"),
    (("--format", "msccl", "--buffsize", "1MiB", "-c", "alltoall"), "alltoall has one lowering"),
])
def test_bad_flags(tmp_path, args, message):
    out = tmp_path / ("a.json" if "mscclpp" in args or "--format" not in args else "a.xml")
    code, _out, err = cli("generate", "ring:n=4", "-c", "allgather", "-o", str(out), *args)
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not out.exists()


def test_default_buffer_writes_the_default_file(tmp_path):
    """--buffsize 4MiB with no per-slice cost is the default model: the file is byte for byte the one written
    without the flag, and the note says so (its rates equal the default file's)."""
    plain, buffered = tmp_path / "a.xml", tmp_path / "b.xml"
    code, out, err = cli("generate", "ring:n=4", "-c", "allgather", "--format", "msccl", "-o", str(plain), "--no-check")
    assert code == 0 and "runtime buffer" not in out, err
    code, out, err = cli("generate", "ring:n=4", "-c", "allgather", "--format", "msccl", "-o", str(buffered),
                         "--no-check", "--buffsize", "4MiB", "--slice-cost", "0")
    assert code == 0, err
    assert plain.read_bytes() == buffered.read_bytes()
    assert "run this file with NCCL_BUFFSIZE=4194304 (4MiB; the runtime's slice 1MiB)" in out
    line = next(x for x in out.splitlines() if "GB/s at 1MiB / 16MiB / 1GiB" in x)
    mine, default = line.split("this file ")[1].split(" at 4MiB")[0], line.split("--buffsize, ")[1].split(", ", 1)[1]
    assert default.startswith(mine), line


def test_choice_ranks_at_the_buffer(tmp_path):
    """The files are ranked by the rate at the buffer's slice with the per-slice cost; the default buffer's file by
    the default model; auto keeps the buffer whose file is fastest at the design size."""
    from forestcoll.generate import generate
    from forestcoll.simulate.msccl import file_rate
    from forestcoll.topology import load_topology

    topo = load_topology("ring:n=4")
    sched = generate(topo, "allgather")
    asked = []

    def rate_at(slice_bytes, cost):
        asked.append((slice_bytes, cost))
        inner = file_rate(topo, slice_bytes, cost)
        # a made-up preference for the 1 MiB buffer, so auto must keep it
        return lambda algo, size: inner(algo, size) * (2 if slice_bytes == 256 << 10 and size == 1 << 30 else 1)

    stages = []
    chosen, result = buffered_msccl(topo, sched, None, (4 << 20, 1 << 20), 3e-6, rate_at,
                                    progress=lambda stage, done, total: stages.append((done, total)))
    assert stages == [(0, 3), (1, 3), (2, 3)]  # the default file, then each buffer, largest first
    assert asked[0] == (None, 0.0)  # the file written without --buffsize: the default model
    assert {(1 << 20, 3e-6), (256 << 10, 3e-6)} == set(asked[1:])
    notes = "\n".join(result.notes)
    assert "NCCL_BUFFSIZE=1048576 (1MiB; the runtime's slice 256KiB)" in notes and "3 us per slice" in notes
    assert "runtime buffer (auto): 4MiB: " in notes and "kept: the fastest at 1GiB" in notes
    assert "this file is slower than the file written without --buffsize at 16MiB (" in notes  # 4x the slices at 3 us
    assert len(REPORT_SIZES) == 3


def test_slice_cost_in_the_simulation():
    """slice_cost_s=0 is the default model bit for bit; a cost slows a file, more with a smaller slice (more slices)."""
    from forestcoll.generate import generate
    from forestcoll.msccl.export import export_msccl
    from forestcoll.simulate.msccl import simulate_msccl
    from forestcoll.simulate.network import build_network
    from forestcoll.topology import load_topology

    topo = load_topology("ring:n=4")
    net = build_network(topo)
    algo = export_msccl(generate(topo, "allgather")).algo
    size = 16 << 20
    plain = simulate_msccl(algo, net, size)
    assert simulate_msccl(algo, net, size, slice_cost_s=0.0).time_s == plain.time_s
    cost = 2e-6
    big = simulate_msccl(algo, net, size, slice_cost_s=cost)
    small = simulate_msccl(algo, net, size, slice_bytes=128 << 10, slice_cost_s=cost)
    fine = simulate_msccl(algo, net, size, slice_bytes=128 << 10)
    assert plain.time_s + cost <= big.time_s
    assert big.time_s - plain.time_s < small.time_s - fine.time_s  # 8x the slices pay 8x the cost


def _made_up_rate(slice_bytes, cost):
    """A rate that simulates nothing: depends on the file, the size and the buffer, so each buffer picks its own."""
    sl = slice_bytes or (1 << 20)
    return lambda algo, size: float((algo.nchunksperloop * 7 + len(algo.name) + sl // 4096 + size // (1 << 20)) % 97)


def test_auto_generates_and_exports_each_candidate_once(monkeypatch):
    """--buffsize auto makes the choice once per buffer, but every candidate schedule (the powers of two k) is
    generated once and every file (schedule, options) exported once; the files are those each choice makes alone."""
    import importlib

    from forestcoll.generate import generate
    from forestcoll.msccl.export import export_msccl
    from forestcoll.msccl.generated import generated_msccl
    from forestcoll.msccl.ir import write_algo
    from forestcoll.topology import load_topology

    gen_mod, exp_mod = importlib.import_module("forestcoll.generate"), importlib.import_module("forestcoll.msccl.export")
    topo = load_topology("mi250")
    sched = generate(topo, "allgather")
    assert sched.k == 3  # the choice ranks k=3 (the optimal) against k=1 and k=2
    alone = {}
    for buffsize in AUTO_BUFFSIZES[1:]:  # each buffer's choice made alone, nothing reused
        rate = _made_up_rate(buffsize // 4, 1e-6)
        alone[buffsize] = write_algo(generated_msccl(topo, sched, None, None, rate, 1 << 30, True)[1].algo)
    generated, exported = [], []

    def gen_spy(topology, collective, **kwargs):
        generated.append(kwargs.get("k"))
        return generate(topology, collective, **kwargs)

    def export_spy(s, options=None, **kwargs):
        exported.append((s.k, options))
        return export_msccl(s, options, **kwargs)

    monkeypatch.setattr(gen_mod, "generate", gen_spy)
    monkeypatch.setattr(exp_mod, "export_msccl", export_spy)
    for buffsize in AUTO_BUFFSIZES[1:]:
        _s, result = buffered_msccl(topo, sched, None, (buffsize,), 1e-6, _made_up_rate)
        assert write_algo(result.algo) == alone[buffsize]
    generated.clear()
    exported.clear()
    buffered_msccl(topo, sched, None, AUTO_BUFFSIZES, 1e-6, _made_up_rate)
    assert sorted(generated) == [1, 2]  # once each, for three choices (the default buffer's and two more)
    assert len(exported) == len(set(exported)) and {k for k, _o in exported} == {1, 2, 3}, exported


def test_file_rate_shares_a_simulation_between_buffers(monkeypatch):
    """With a shared store, a file is simulated once per (size, loop iterations, cost): two buffers that cut its
    chunks alike share the simulation (the same rate), two that do not each simulate."""
    import importlib

    from forestcoll.generate import generate
    from forestcoll.msccl.export import export_msccl
    from forestcoll.simulate.msccl import file_rate
    from forestcoll.topology import load_topology

    sim = importlib.import_module("forestcoll.simulate.msccl")
    topo = load_topology("ring:n=4")
    algo = export_msccl(generate(topo, "allgather")).algo
    alone = {(sl, size): file_rate(topo, sl, 1e-6)(algo, size) for sl in (1 << 20, 128 << 10) for size in (1 << 20, 64 << 20)}
    calls = []
    real = sim.simulate_msccl
    monkeypatch.setattr(sim, "simulate_msccl", lambda *a, **kw: calls.append(a[2]) or real(*a, **kw))
    shared: dict = {}
    for sl in (1 << 20, 128 << 10):
        rate = file_rate(topo, sl, 1e-6, shared)
        for size in (1 << 20, 64 << 20):
            assert rate(algo, size) == alone[(sl, size)]
    assert sorted(calls) == [1 << 20, 64 << 20, 64 << 20]  # 1 MiB: one loop iteration per chunk with either slice
    file_rate(topo, 128 << 10, 0.0, shared)(algo, 1 << 20)
    assert len(calls) == 4  # another cost: another program


def test_race_cuts_losers_short_and_keeps_the_winner():
    """rate.race (a shared store): the exact rate when the file can reach ``best``, else a rate below ``best`` that
    the file does not reach; the choice of k with it is the same file, the losers' rates shown as "<r"."""
    from forestcoll.generate import generate
    from forestcoll.msccl.generated import Below, generated_msccl
    from forestcoll.msccl.ir import write_algo
    from forestcoll.simulate.msccl import file_rate
    from forestcoll.topology import load_topology

    topo = load_topology("mi250")
    sched = generate(topo, "allgather")
    slice_bytes, cost, size = 1 << 20, 1e-6, 256 << 20
    plain = file_rate(topo, slice_bytes, cost)
    assert plain.race is None  # without a store: the default choice, every file simulated
    _s, alone = generated_msccl(topo, sched, None, None, plain, size, False)
    raced = file_rate(topo, slice_bytes, cost, {})
    _s, result = generated_msccl(topo, sched, None, None, raced, size, False)
    assert write_algo(result.algo) == write_algo(alone.algo)
    ranked = next(n for n in result.notes if "files simulated at 256MiB" in n)
    assert "k=2 <" in ranked and "k=1 <" in ranked, ranked  # the optimal k=3 is rated first and wins
    assert ranked.split(" GB/s;")[0] == next(n for n in alone.notes if "files simulated" in n).split(" GB/s;")[0]
    k1 = generated_msccl(topo, generate(topo, "allgather", k=1), None)[1].algo
    real = plain(k1, size)
    assert raced.race(k1, size, real * 0.9) == (real, True)  # it can reach 0.9 x its rate: simulated, exact
    fresh = file_rate(topo, slice_bytes, cost, {})
    got, exact = fresh.race(k1, size, real * 1.0001)  # just above its rate: cut short, bound between
    assert not exact and real <= got < real * 1.0001
    assert isinstance(Below(got), float) and f"{Below(2.25):.1f}" == "<2.2"
