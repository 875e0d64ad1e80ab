"""The layout race of ``generate --format mscclpp`` (mscclpp/layouts.py): the chosen trees' plan in each other layout
that fits, then half units on the layout taken; the faster plan at the design size is written, a tie keeps what
``auto`` writes, and a given ``--layout`` or ``--k`` races nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from forestcoll.generate import generate
from forestcoll.mscclpp.export import ExportOptions, export_mscclpp, write_generated_plan, write_mscclpp
from forestcoll.mscclpp.layouts import race_layouts
from forestcoll.mscclpp.plan import write_plan
from forestcoll.topology import load_topology

CUBE = "hypercube:dim=3"  # allgather k=3: edge (16 blocks), source (16) and level (14) plans differ, pieces of 2 chunks


def _by_text(rates: dict[str, float]):
    """A plan_rate giving each plan (known by its text) its rate, 1.0 to any other; the texts it was asked for."""
    asked: list[str] = []

    def rate(plan, size: int) -> float:
        text = write_plan(plan)
        asked.append(text)
        return rates.get(text, 1.0)
    return rate, asked


def _text(topo, sched, **opts) -> str:
    return write_plan(export_mscclpp(sched, topo, ExportOptions(check=False, **opts)).plan)


@pytest.mark.parametrize("fine", [False, True])
def test_a_faster_layout_is_written(tmp_path, fine):
    """level simulates faster than auto's edge: its plan is written (with half units when those are faster still),
    self-checked, and the note lists the layouts raced."""
    topo = load_topology(CUBE)
    sched = generate(topo, "allgather")
    level, level_fine = _text(topo, sched, layout="level"), _text(topo, sched, layout="level", fine_units=True)
    rate, asked = _by_text({level: 2.0, level_fine: 3.0 if fine else 1.5})
    path = tmp_path / "p.json"
    chosen, result = write_generated_plan(topo, "allgather", str(path), plan_rate=rate)
    assert chosen.k == sched.k and result.layout == "level" and result.checks
    assert path.read_text() == (level_fine if fine else level)
    assert result.notes[0].startswith("layouts raced, plans at 1GiB: edge 1.0 (16 thread blocks per GPU), ")
    assert "level 2.0 (14)" in result.notes[0] and "; level taken" in result.notes[0]
    assert ("half units" in result.notes[0]) and (("(taken)" in result.notes[0]) == fine)
    assert len(asked) == len(set(asked)) == 4  # edge, source, level, then level with half units; mixed is edge's plan


def test_half_units_above_the_transfer_limit_lose(tmp_path):
    """The half-units plan's simulation is refused (above the transfer limit, as mi250:nodes=2 allreduce k=16's at
    1 GiB): generate still writes the layout taken, says so in its note, and does not fail."""
    from forestcoll.errors import SimulationTooLarge

    topo = load_topology(CUBE)
    sched = generate(topo, "allgather")
    level, level_fine = _text(topo, sched, layout="level"), _text(topo, sched, layout="level", fine_units=True)
    rate, _asked = _by_text({level: 2.0})

    def refusing(plan, size: int) -> float:
        if write_plan(plan) == level_fine:
            raise SimulationTooLarge("the simulation needs more than 4,194,304 transfers")
        return rate(plan, size)
    path = tmp_path / "p.json"
    _chosen, result = write_generated_plan(topo, "allgather", str(path), plan_rate=refusing)
    assert path.read_text() == level and result.layout == "level"
    assert "half units for pieces of several chunks not simulated" in result.notes[0]


@pytest.mark.parametrize("level_rate", [1.0, 1.0 + 1e-12])
def test_a_tie_keeps_what_auto_writes(tmp_path, level_rate):
    """Every layout as fast (or level faster by a rounding, as dgx-a100:nodes=2 allreduce's source plan at 1 GiB):
    the bytes are those write_mscclpp writes with the auto layout."""
    topo = load_topology(CUBE)
    level = _text(topo, generate(topo, "allgather"), layout="level")
    path = tmp_path / "p.json"
    rate, _asked = _by_text({level: level_rate})
    chosen, result = write_generated_plan(topo, "allgather", str(path), plan_rate=rate)
    assert result.layout == "edge" and "; edge taken" in result.notes[0]
    assert path.read_text() == write_plan(write_mscclpp(chosen, str(tmp_path / "q.json"), topo).plan)


@pytest.mark.parametrize("given", [{"options": ExportOptions(layout="level")}, {"k": 2}])
def test_a_given_layout_or_k_races_nothing(tmp_path, given):
    """``--layout`` or ``--k`` given: nothing is simulated, the plan is what write_mscclpp writes."""
    topo = load_topology(CUBE)

    def never(plan, size):
        raise AssertionError("simulated")
    path = tmp_path / "p.json"
    chosen, result = write_generated_plan(topo, "allgather", str(path), plan_rate=never, **given)
    assert not any("layouts raced" in note for note in result.notes)
    assert path.read_text() == write_plan(write_mscclpp(chosen, str(tmp_path / "q.json"), topo,
                                                        given.get("options")).plan)


def test_layouts_that_do_not_fit_are_not_raced():
    """Within 15 blocks auto takes mixed (15): edge and source (16) do not fit and are not simulated, level (14)
    is, and wins only when faster."""
    topo = load_topology(CUBE)
    sched = generate(topo, "allgather")
    opts = ExportOptions(max_threadblocks=15)
    mine = export_mscclpp(sched, topo, replace(opts, check=False))
    level = _text(topo, sched, layout="level", max_threadblocks=15)
    assert mine.layout == "mixed"
    for faster in (1.0, 1.5):
        rate, asked = _by_text({level: faster})
        best, best_rate, phrase = race_layouts(topo, sched, mine, 1.0, opts, rate)
        assert asked == [level] and best_rate == faster
        assert phrase == f"layouts raced, plans at 1GiB: mixed 1.0 (15 thread blocks per GPU), level {faster:.1f} (14); " \
            + ("mixed" if faster == 1.0 else "level") + " taken"
        assert (best is mine) == (faster == 1.0) and best.layout == ("mixed" if faster == 1.0 else "level")
