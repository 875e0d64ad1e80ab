"""The exact optimum of a tree-based collective and its certificate.

* :mod:`.oracle`: max-flow tests of the cut condition (one target per orbit);
* :mod:`.dinkelbach`: x* of one phase, exactly, with the cut that attains it;
* :mod:`.fixed_k`: schedules with exactly k trees per root (time scale, smallest exact k, their bound);
* :mod:`.optimal`: per collective: phases, root weights, :class:`Bound`;
* :mod:`.report`: :func:`bound_report`, the bound with its companions as ``forestcoll bound`` shows them.
"""

from forestcoll.bound.dinkelbach import RateResult, optimal_rate
from forestcoll.bound.fixed_k import fixed_k_algbw, floor_caps, min_scale_for_k, next_breakpoint, smallest_optimal_k
from forestcoll.bound.optimal import (
    Bound,
    PhaseBound,
    PreparedPhase,
    optimal_bound,
    phase_bound,
    prepare_phase,
    root_weights,
    unbalanced_switches,
)
from forestcoll.bound.oracle import Cut, Oracle

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
