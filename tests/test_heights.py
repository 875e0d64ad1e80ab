"""Tree heights: generate --max-height never exceeds the stated height, and the exact rate it reports is
what the link loads give; without a limit the optimum is kept (the lowering only moves trees within the
capacities)."""

from __future__ import annotations

import pytest

from forestcoll import generate, load_topology
from forestcoll.bound import optimal_bound
from forestcoll.errors import UsageError
from forestcoll.verify import verify

# dgx-1 at height 2 is the fast tier's most expensive test (15-20 s CPU): the slow tier runs it, the fast tier keeps
# dgx-a100:nodes=2 at height 2 and the four ring, torus and hypercube cases (ci19)
CASES = [("ring:n=6", "allgather", 3), ("torus:dims=2x3", "allreduce", 3), ("hypercube:dim=3", "allgather", 3),
         pytest.param("dgx-1", "allgather", 2, marks=pytest.mark.slow), ("dgx-a100:nodes=2", "allreduce", 2),
         ("ring:n=6", "allreduce", 4)]


@pytest.mark.parametrize("spec,coll,height", CASES)
def test_height_limit_holds_and_rate_is_exact(spec, coll, height):
    topo = load_topology(spec)
    sched = generate(topo, coll, max_height=height)
    assert sched.max_height() <= height
    report = verify(sched, topo)
    assert report.ok, report.message
    bound = optimal_bound(topo, coll).algbw
    assert sched.bound_algbw <= bound  # never claims more than the exact optimum


@pytest.mark.parametrize("spec,coll", [("ring:n=6", "allgather"), ("dgx-1", "allreduce"), ("mi250:nodes=1", "allgather")])
def test_unlimited_keeps_the_optimum(spec, coll):
    topo = load_topology(spec)
    sched = generate(topo, coll)
    assert verify(sched, topo).ok
    assert sched.bound_algbw == optimal_bound(topo, coll).algbw


def test_height_below_the_radius_is_refused():
    with pytest.raises(UsageError, match="no tree of height 2 exists: r0 is 3 hops"):
        generate(load_topology("ring:n=6"), "allgather", max_height=2)
