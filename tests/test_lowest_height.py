"""div21: `generate --max-height lowest` keeps the schedule (same k, exactly the same rate, certified) and lowers its
trees as far as the height search finds; the height it reports is the trees' own."""

from __future__ import annotations

import pytest
from conftest import benchmark, cli

from forestcoll import generate, load_topology, verify
from forestcoll.generate import LOWEST
from forestcoll.schedule import read_schedule, tree_heights


@pytest.mark.parametrize(("spec", "collective", "before", "after"), [
    ("dgx-b200:nodes=2", "allgather", 3, 2),
    ("ndv2:nodes=2", "allgather", 5, 4),
    ("torus:dims=4x4", "allgather", 5, 4),
])
def test_the_same_optimum_with_lower_trees(spec, collective, before, after):
    topo = load_topology(spec)
    default = generate(topo, collective)
    lowest = generate(topo, collective, max_height=LOWEST)
    assert default.max_height() == before and lowest.max_height() == after
    assert (lowest.k, lowest.algbw) == (default.k, default.algbw) and lowest.optimal
    assert verify(lowest, topo).ok
    claimed = lowest.stats["lowest_height"]
    assert claimed["first"] == before and claimed["tried"][0] == (before - 1, after)
    assert max(tree_heights(lowest.trees)) == [h for _, h in claimed["tried"] if h is not None][-1]


def test_at_the_radius_nothing_is_searched():
    topo = load_topology("dgx-a100:nodes=2")
    lowest = generate(topo, "allgather", max_height=LOWEST)
    assert lowest.trees == generate(topo, "allgather").trees and lowest.stats["lowest_height"]["tried"] == []


def test_the_cli_reports_the_height_its_file_holds(tmp_path):
    out = tmp_path / "s.json"
    code, stdout, err = cli("generate", "ndv2:nodes=2", "-c", "allreduce", "--max-height", "lowest", "-o", out)
    assert code == 0, err
    assert "height     5 -> 4 hops at the same k and rate; none found at 3" in stdout
    assert "trees      32  (height max 4," in stdout
    sched = read_schedule(str(out))
    assert max(tree_heights(sched.trees)) == 4 and sched.optimal
    assert cli("verify", out)[0] == 0


@pytest.mark.parametrize("bad", ["low", "4.5", ""])
def test_a_height_that_is_neither_hops_nor_lowest_is_refused(bad):
    code, _, err = cli("generate", "ring:n=4", "--max-height", bad)
    assert code == 2 and err.count("\n") == 1 and "--max-height" in err, err


@pytest.mark.slow
def test_sweep_seed_0_allgather_reaches_height_4():
    """The sweep's seed 0 (docs/sweep.md kind 4): the default trees are 5 high, a height-4 packing of the same optimum
    exists (from the constraint program) and is faster at every size."""
    sweep = benchmark("fabric_sweep")
    topo = sweep.load_fabric(sweep.random_fabric(0))
    assert topo.num_compute == 20 and generate(topo, "allgather").max_height() == 5
    lowest = generate(topo, "allgather", max_height=LOWEST)
    assert lowest.max_height() == 4 and lowest.optimal and lowest.k == 1
