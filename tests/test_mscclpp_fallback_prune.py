"""The fallback's ranking of the fitting k (mscclpp/fallback.py) skips a k whose plan's ceiling shows it cannot win:
it must take the k the full ranking takes, ties included, and say "at most" for the k it skipped."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

import forestcoll.mscclpp.fallback as fallback
from forestcoll.mscclpp.export import ExportOptions
from forestcoll.mscclpp.layouts import SLACK


@dataclass(frozen=True)
class Fake:
    k: int


def _rank(monkeypatch, rates: dict[int, float], tops: dict[int, float] | None):
    """fitting_schedule over fake fitting k with the given rates (and ceilings, None: no ceiling): chosen k, phrase,
    the k simulated."""
    monkeypatch.setattr(fallback, "fitting_powers", lambda *a, **kw: {kk: Fake(kk) for kk in sorted(rates, reverse=True)})
    asked: list[int] = []

    def rate(s: Fake, size: int) -> float:
        asked.append(s.k)
        return rates[s.k]
    if tops is not None:
        rate.ceiling = lambda s, size: tops[s.k]  # type: ignore[attr-defined]
    found = fallback.fitting_schedule(None, "allgather", Fake(1 << 10), ExportOptions(), rate, "plans")
    assert found is not None
    return found[0].k, found[1], asked


def test_prune_takes_what_the_full_ranking_takes(monkeypatch):
    gen = random.Random(17)
    skipped = 0
    for _ in range(3000):
        ks = gen.sample([1, 2, 4, 8, 16, 32, 64], gen.randint(1, 7))
        rates = {kk: gen.choice([100.0, 150.0, 150.0, 200.0, 200.0 * (1 + 1e-12), 250.0]) for kk in ks}
        # ceilings from exactly tight (or a rounding below the simulated rate, which SLACK allows) to loose
        tops = {kk: r * gen.choice([1.0, 1 - SLACK / 10, 1 + 1e-12, 1.001, 1.5]) for kk, r in rates.items()}
        full_k, full_how, full_asked = _rank(monkeypatch, rates, None)
        k, how, asked = _rank(monkeypatch, rates, tops)
        assert k == full_k, (rates, tops)
        assert set(asked) <= set(full_asked) and asked[0] == max(ks)
        skipped += len(full_asked) - len(asked)
        for kk in ks:  # the phrase: each k's rate, or its ceiling when skipped
            assert (f"k={kk} {rates[kk]:.1f}" in how) == (kk in asked and kk != k) or kk == k
            assert (f"k={kk} at most {tops[kk]:.1f}" in how) == (kk not in asked)
        assert how.split(" (")[0] == full_how.split(" (")[0]
    assert skipped > 500  # the ceilings do skip


@pytest.mark.parametrize(("rates", "tops", "k", "asked"), [
    ({32: 421.6, 16: 418.5, 1: 405.2}, {32: 425.2, 16: 424.7, 1: 423.8}, 32, [32, 16, 1]),  # H100 bonded: loose
    ({16: 168.3, 1: 160.0}, {16: 175.3, 1: 160.0}, 16, [16]),  # mi250:nodes=2 allreduce: k=1 cannot win
    ({4: 200.0, 2: 199.9}, {4: 201.0, 2: 199.9}, 4, [4]),  # k=2 cannot reach the incumbent: skipped
    ({4: 200.0, 2: 200.0}, {4: 201.0, 2: 200.0}, 4, [4, 2]),  # could tie within SLACK: simulated; a tie keeps k=4
    ({4: 200.0, 2: 200.1}, {4: 201.0, 2: 200.1}, 2, [4, 2]),  # tight ceiling above the incumbent: simulated, taken
])
def test_prune_cases(monkeypatch, rates, tops, k, asked):
    got, how, simulated = _rank(monkeypatch, rates, tops)
    assert (got, simulated) == (k, asked), how


@pytest.mark.slow  # ~10 s: four 1 GiB simulations of 8 GPUs
def test_prune_on_a_real_fallback_writes_the_same_plan(tmp_path):
    # hypercube:dim=3 allreduce in 8 thread blocks at 1 GiB: the optimal k=3 does not fit; k=2's plan simulates
    # 156.5 GB/s and k=1's plan cannot pass 133.3 (its ceiling), so k=1 is not simulated; without the ceiling it is
    # (129.3) and the same k=2 plan is written
    from forestcoll.mscclpp.export import write_generated_plan
    from forestcoll.simulate.mscclpp import plan_rate
    from forestcoll.topology import load_topology

    topo = load_topology("hypercube:dim=3")
    opts = ExportOptions(max_threadblocks=8, check=False)
    full, pruned = plan_rate(topo), plan_rate(topo)
    asked: list[int] = []

    def counted(plan, size):
        asked.append(plan.name)
        return pruned(plan, size)
    counted.ceiling = pruned.ceiling  # type: ignore[attr-defined]
    _, a = write_generated_plan(topo, "allreduce", str(tmp_path / "a.json"), options=opts,
                                plan_rate=lambda plan, size: full(plan, size))
    _, b = write_generated_plan(topo, "allreduce", str(tmp_path / "b.json"), options=opts, plan_rate=counted)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes() and a.layout == b.layout
    assert "exported k=2, the fastest of the powers of two below it whose plans fit, plans simulated at 1GiB " \
           "(156.5 GB/s; k=1 129.3)" in a.notes[0], a.notes
    assert "(156.5 GB/s; k=1 at most 133.3)" in b.notes[0], b.notes
    assert a.notes[0].replace("k=1 129.3", "k=1 at most 133.3") == b.notes[0] and a.notes[1:] == b.notes[1:]
    assert not any(name.endswith("_k1") for name in asked), asked


def test_mixed_layout_stops_when_nothing_is_left_to_coarsen(monkeypatch):
    # hypercube:dim=3 allgather k=3 in 4 thread blocks: the first round coarsens every group as far as it goes and
    # still needs 14 blocks; the five rounds that followed emitted the same plan again (the fallback's rejected k on
    # the bonded H100 dump: k=349 10.9 -> 5.3 s).  Same message, one emit.
    import forestcoll.mscclpp.export as export
    from forestcoll.generate import generate
    from forestcoll.topology import load_topology

    topo = load_topology("hypercube:dim=3")
    emits: list[int] = []
    real = export._layout_and_emit
    monkeypatch.setattr(export, "_layout_and_emit", lambda *a, **kw: emits.append(1) or real(*a, **kw))
    with pytest.raises(export.ExportError, match="allgather k=3 needs 14 thread blocks per GPU even at the 'mixed' "
                                                 "layout, more than the 4 a GPU runs at once"):
        export.export_mscclpp(generate(topo, "allgather"), topo, ExportOptions(check=False, max_threadblocks=4,
                                                                               layout="mixed"))
    assert len(emits) == 1
