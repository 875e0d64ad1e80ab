"""How fast will it run: an event-driven flow simulator for schedules, MSCCL files and baselines.

:func:`simulate` runs one algorithm for one call size; :mod:`.compare` sweeps
sizes and algorithms.  See docs/simulate.md for the model.
"""

from forestcoll.simulate.core import ALGORITHMS, SimResult, simulate, simulate_program
from forestcoll.simulate.network import Network, build_network

__all__ = ["ALGORITHMS", "Network", "SimResult", "build_network", "simulate", "simulate_program"]
