"""How fast will it run: an event-driven flow simulator for schedules, MSCCL files and baselines.

:func:`simulate` runs one algorithm for one call size; :mod:`.compare` sweeps
sizes and algorithms.  See docs/simulate.md for the model.
"""

from forestcoll.simulate.core import ALGORITHMS, SimResult, simulate, simulate_program

__all__ = ["ALGORITHMS", "SimResult", "simulate", "simulate_program"]
