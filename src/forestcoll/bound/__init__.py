"""The exact optimum of a tree-based collective and its certificate.

* :mod:`.oracle`: max-flow tests of the cut condition (one target per orbit);
* :mod:`.dinkelbach`: x* of one phase, exactly, with the cut that attains it;
* :mod:`.fixed_k`: schedules with exactly k trees per root (time scale, smallest exact k, their bound);
* :mod:`.optimal`: per collective: phases, root weights, :class:`Bound`;
* :mod:`.report`: :func:`bound_report`, the bound with its companions as ``forestcoll bound`` shows them.
"""

from forestcoll.lazy import lazy_exports

__all__ = [
    "Bound",
    "Cut",
    "Oracle",
    "PhaseBound",
    "PreparedPhase",
    "RateResult",
    "fixed_k_algbw",
    "floor_caps",
    "min_scale_for_k",
    "next_breakpoint",
    "optimal_bound",
    "optimal_rate",
    "phase_bound",
    "prepare_phase",
    "root_weights",
    "smallest_optimal_k",
    "unbalanced_switches",
]

# each name imports its module on first use: `forestcoll bound` of a built-in cluster (bound/cluster.py) needs
# Bound but not the max-flow stack (numpy, ortools: ~0.1 s of its 0.17 s CPU)
lazy_exports(__name__, {
    "RateResult": "forestcoll.bound.dinkelbach", "optimal_rate": "forestcoll.bound.dinkelbach",
    "fixed_k_algbw": "forestcoll.bound.fixed_k", "floor_caps": "forestcoll.bound.fixed_k",
    "min_scale_for_k": "forestcoll.bound.fixed_k", "next_breakpoint": "forestcoll.bound.fixed_k",
    "smallest_optimal_k": "forestcoll.bound.fixed_k",
    "Bound": "forestcoll.bound.optimal", "PhaseBound": "forestcoll.bound.optimal",
    "PreparedPhase": "forestcoll.bound.optimal", "optimal_bound": "forestcoll.bound.optimal",
    "phase_bound": "forestcoll.bound.optimal", "prepare_phase": "forestcoll.bound.optimal",
    "root_weights": "forestcoll.bound.optimal", "unbalanced_switches": "forestcoll.bound.optimal",
    "Cut": "forestcoll.bound.oracle", "Oracle": "forestcoll.bound.oracle",
})
