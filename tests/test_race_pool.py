"""The race of one size in worker processes (:class:`forestcoll.simulate.race_pool.RacePool`) gives exactly what the
sequential race gives, and ``generate --sizes --format mscclpp`` writes the same files and notes with any ``--jobs``."""

from __future__ import annotations

import hashlib
import math
import re

import pytest
from conftest import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forestcoll.simulate.network import load_network
from forestcoll.simulate.plan_sizes import select_plans
from forestcoll.simulate.race import race
from forestcoll.simulate.race_pool import RacePool
from forestcoll.simulate.select import candidate_schedules, export_by_size

FABRICS = ("ring:n=4", "dgx-a100")


@pytest.fixture(scope="module")
def fabrics():
    """Per fabric: its network, its candidate schedules (trees: cheap contenders) and a pool of 2 workers."""
    out = {}
    for fabric in FABRICS:
        net = load_network(fabric)
        cands = candidate_schedules(net.topology, net, "allreduce", sizes=[1 << 16, 1 << 24])
        out[fabric] = (net, list(cands.values()), RacePool(net, 2))
    return out


def _rows(got):
    return [(r.algorithm, r.time_s, r.algbw_gbps) for r in got.results], got.pruned


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fabric=st.sampled_from(FABRICS), picks=st.lists(st.integers(0, 63), min_size=2, max_size=7),
       size=st.sampled_from([1 << 12, 1 << 16, 1 << 20, 1 << 24]), slack=st.sampled_from([0.0, 0.02, 0.2]),
       first=st.integers(-1, 7), known=st.sampled_from([None, 0.5, 1.0, 1.5]))
def test_the_parallel_race_is_the_sequential_one(fabrics, fabric, picks, size, slack, first, known):
    """Random contender sets (a schedule may compete under two names: ties in bound), sizes, slacks, first
    contenders and best times already known: the same results in the same order, with the same times, and the same
    pruned bounds; the workers never leave the replay a contender to simulate itself."""
    net, scheds, pool = fabrics[fabric]
    cands = {f"c{i}": scheds[p % len(scheds)] for i, p in enumerate(picks)}
    name = f"c{first}" if first >= 0 else None
    best_s = math.inf
    if known is not None:  # a best time known beforehand: a multiple of the first one's time
        best_s = known * race(net, size, {"x": scheds[picks[0] % len(scheds)]}).results[0].time_s
    want = race(net, size, cands, best_s=best_s, slack=slack, first=name)
    before = pool.tried_here
    assert _rows(pool.race(size, cands, best_s=best_s, slack=slack, first=name)) == _rows(want)
    assert pool.tried_here == before


def test_the_workers_simulate_more_and_the_replay_keeps_the_sequential_rows(fabrics):
    """dgx-a100, 6 candidates at 64 KiB, no slack: the sequential race keeps one result (the others stop at its
    time); the workers, starting with looser limits, finish runs the replay must drop."""
    net, scheds, pool = fabrics["dgx-a100"]
    cands = {f"c{i}": s for i, s in enumerate(scheds)}
    want = race(net, 1 << 16, cands)
    simulated = pool.simulated
    got = pool.race(1 << 16, cands)
    assert _rows(got) == _rows(want) and len(want.results) < len(cands)
    assert pool.simulated - simulated > len(want.results)


def _masked(notes: list[str]) -> list[str]:
    return [re.sub(r"; [0-9.]+ s, [0-9.]+ s CPU\)", ")", n) for n in notes]


def test_select_plans_is_the_same_with_any_number_of_workers():
    """The ranking of the candidates' MSCCL++ plans: the same selection, rates and note (but its times) with 1, 2
    and 3 workers."""
    net = load_network("ring:n=4")
    sizes = [64 << 10, 1 << 20, 16 << 20]
    cands = candidate_schedules(net.topology, net, "allreduce", sizes=sizes, element_bytes=16)
    got = []
    for workers in (1, 2, 3):
        sel, rates, note = select_plans(net, "allreduce", sizes, cands, workers=workers)
        ranges = [(r.min_bytes, r.max_bytes, r.name, r.measured) for r in sel.ranges]
        got.append((ranges, [(r.algorithm, r.size_bytes, r.time_s) for r in sel.table], rates, _masked([note])))
    assert got[0] == got[1] == got[2]


def _digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_generate_writes_the_same_plans_with_any_jobs(tmp_path, collective):
    """ring:n=4 ``generate --sizes 64KiB,1MiB,16MiB --format mscclpp``: ``--jobs 1`` and ``--jobs 2`` write the
    same files (sha256) and print the same lines, but the ranking's times."""
    runs = []
    for jobs in (1, 2):
        out = tmp_path / f"j{jobs}"
        code, text, err = cli("generate", "ring:n=4", "-c", collective, "--sizes", "64KiB,1MiB,16MiB", "--format",
                              "mscclpp", "-o", out, "--jobs", jobs)
        assert code == 0, err
        runs.append((_digest(out), _masked(text.replace(str(out), "DIR").splitlines())))
    assert runs[0] == runs[1] and len(runs[0][0]) >= 2


@pytest.mark.slow
def test_the_proxy_writes_the_same_plans_with_one_to_four_workers(tmp_path):
    """dgx-a100:nodes=2 allreduce ``--sizes 1MiB,16MiB,1GiB``: the same files and notes (but times) with 1..4
    workers (~15 s CPU each)."""
    runs = []
    for workers in (1, 2, 3, 4):
        out = export_by_size("dgx-a100:nodes=2", "allreduce", [1 << 20, 16 << 20, 1 << 30], str(tmp_path / str(workers)),
                             format="mscclpp", workers=workers)
        assert out.ok
        runs.append((_digest(tmp_path / str(workers)), _masked(out.notes)))
    assert all(r == runs[0] for r in runs)


@pytest.mark.parametrize("args, message", [
    (["--jobs", "0", "--sizes", "1MiB", "--format", "mscclpp", "-o", "DIR"], "--jobs"),
    (["--jobs", "2", "--format", "mscclpp", "-o", "DIR/p.json"], "--jobs sets the worker processes of --sizes"),
])
def test_generate_refuses_jobs_it_cannot_use(tmp_path, args, message):
    """``--jobs 0``, and ``--jobs`` without ``--sizes``: one line, exit 2, nothing written."""
    code, out, err = cli("generate", "ring:n=4", *[a.replace("DIR", str(tmp_path / "d")) for a in args])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()
