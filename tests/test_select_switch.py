"""The per-size choice's margin holds only where switching files costs the runtime something: a faster file whose
connections the chosen files make anyway, and that needs no more scratch, serves its size (msccl/loaded.py)."""

from forestcoll.msccl.ir import Algo, Gpu, ThreadBlock
from forestcoll.msccl.loaded import connections, free_switches, scratch_per_byte
from forestcoll.simulate.core import SimResult
from forestcoll.simulate.select import size_ranges

MIB = 1 << 20


def _row(name: str, size: int, algbw: float) -> SimResult:
    return SimResult(name, "allreduce", size, 4, size / algbw / 1e9, algbw, algbw, 0, 0, 0.0)


# MI300 x4 rail allreduce, RCCL, session 17: the 1 MiB winner stays at 16 MiB within 2 % of the single file's layout
TABLE = [_row("c2", MIB, 12.4), _row("c2-latency", MIB, 12.3), _row("even8", 1 << 30, 194.9),
         _row("c2", 16 * MIB, 104.0), _row("c2-latency", 16 * MIB, 105.2),
         _row("c2", 1 << 30, 189.3), _row("c2-latency", 1 << 30, 191.9)]
NAMES = {"c2": None, "c2-latency": None, "even8": None}
SIZES = [MIB, 16 * MIB, 1 << 30]


def test_the_margin_holds_where_the_faster_file_costs_more_than_its_record():
    chosen = [(r.name, sorted(r.measured)) for r in size_ranges(TABLE, SIZES, NAMES)]
    assert chosen == [("c2", [MIB, 16 * MIB]), ("even8", [1 << 30])]
    asked = []

    def never(name, loaded, replaced):
        asked.append((name, list(loaded), replaced))
        return False

    assert [r.name for r in size_ranges(TABLE, SIZES, NAMES, free=never)] == ["c2", "even8"]
    assert ("c2-latency", ["c2", "even8"], "c2") in asked  # against the files the margin chose, in their order


def test_a_switch_that_costs_only_a_record_serves_the_faster_file():
    def same_links(name, loaded, replaced):
        return name != "even8"  # the 2-channel files share their connections; even8 has more channels

    ranges = size_ranges(TABLE, SIZES, NAMES, free=same_links)
    assert [(r.name, r.min_bytes, r.max_bytes, r.measured) for r in ranges] == [
        ("c2", 0, 16 * MIB - 1, {MIB: 12.4}), ("c2-latency", 16 * MIB, (1 << 30) - 1, {16 * MIB: 105.2}),
        ("even8", 1 << 30, 0, {1 << 30: 194.9})]
    # never slower than the margin's choice: 1 GiB keeps even8 (the margin switched there anyway)
    assert [r.name for r in size_ranges(TABLE, SIZES, NAMES, margin=0.0, free=same_links)] == ["c2", "c2-latency",
                                                                                                "even8"]


def _algo(blocks: dict[int, list[tuple[int, int, int]]], scratch: int = 0, nchunks: int = 4) -> Algo:
    gpus = [Gpu(g, nchunks, nchunks, scratch, [ThreadBlock(i, s, r, c) for i, (s, r, c) in enumerate(tbs)])
            for g, tbs in blocks.items()]
    return Algo("a", "Simple", 1 + max(c for tbs in blocks.values() for _, _, c in tbs), nchunks, len(gpus),
                "allreduce", 1, 1, gpus=gpus)


def test_connections_scratch_and_free_switches():
    ring = _algo({0: [(1, 1, 0)], 1: [(0, 0, 0)]})  # each GPU sends to and receives from the other on channel 0
    assert connections(ring) == {(0, 1, 0), (1, 0, 0)}
    one_way = _algo({0: [(1, -1, 0)], 1: [(-1, 0, 0)]})
    assert connections(one_way) == {(0, 1, 0)}
    wider = _algo({0: [(1, -1, 0), (1, -1, 1)], 1: [(-1, 0, 0), (-1, 0, 1)]})
    scratchy = _algo({0: [(1, -1, 0)], 1: [(-1, 0, 0)]}, scratch=2, nchunks=8)
    assert scratch_per_byte(scratchy) == {0: 0.25, 1: 0.25}
    files = {"ring": ring, "one-way": one_way, "wider": wider, "scratchy": scratchy}
    free = free_switches(files)
    assert free("one-way", ["ring"], "ring")
    assert not free("ring", ["one-way"], "one-way")  # the way back is a new connection
    assert not free("wider", ["ring"], "ring")  # channel 1 is new
    assert free("one-way", ["wider"], "ring")
    assert not free("scratchy", ["ring"], "ring")  # more scratch per byte than the file it replaces
    assert free("one-way", ["ring"], "scratchy")


def test_the_file_choice_checks_switches_on_the_files_themselves(monkeypatch):
    """select_schedules ranks MSCCL files with ``free`` built from those files (the trees' choice keeps the plain
    margin): on ring:n=4 a candidate's latency-order file uses the same connections, k=1's fewer, the ring's more."""
    from forestcoll.msccl.export import export_msccl
    from forestcoll.simulate import select
    from forestcoll.simulate.network import load_network

    net = load_network("ring:n=4")
    cands = select.candidate_schedules(net.topology, net, "allgather", sizes=[MIB])
    files = {name: export_msccl(sched).algo for name, sched in cands.items()}
    files["forestcoll" + select.LATENCY] = export_msccl(cands["forestcoll"], order="latency").algo
    named = {**cands, "forestcoll" + select.LATENCY: cands["forestcoll"]}
    seen = []
    real = select.size_ranges

    def spy(table, sizes, candidates, margin=0.02, free=None):
        seen.append(free)
        return real(table, sizes, candidates, margin, free)

    monkeypatch.setattr(select, "size_ranges", spy)
    select.select_schedules(net.topology, net, "allgather", [MIB], named, workers=1)
    select.select_schedules(net.topology, net, "allgather", [MIB], named, workers=1, files=files)
    assert seen[0] is None and seen[1] is not None
    free = seen[1]
    assert free("forestcoll" + select.LATENCY, ["forestcoll"], "forestcoll")
    assert free("forestcoll-k1", ["forestcoll"], "forestcoll")  # k=1's 12 connections are among the optimal k=2's 16
    assert not free("forestcoll", ["forestcoll-k1"], "forestcoll-k1")
    assert not free("ring", ["forestcoll", "forestcoll-k1"], "forestcoll")  # the ring's file has 6 channels, not 4


def test_a_free_switch_must_gain_more_than_the_models_noise():
    """mi250:nodes=2 allreduce: the plain height-7 file beats the split one at 1 GiB by less than 0.05 GB/s of 154.3;
    that is no reason for a second file (FREE_GAIN: 0.1 %)."""
    table = [_row("h7-s4-latency", MIB, 26.5), _row("h7", MIB, 20.0),
             _row("h7-s4-latency", 1 << 30, 154.30), _row("h7", 1 << 30, 154.34)]
    names = {"h7-s4-latency": None, "h7": None}

    def free(name, loaded, replaced):
        return True

    assert [r.name for r in size_ranges(table, [MIB, 1 << 30], names, free=free)] == ["h7-s4-latency"]
    assert [r.name for r in size_ranges(table, [MIB, 1 << 30], names, free=free, gain=0.0)] == ["h7-s4-latency", "h7"]
