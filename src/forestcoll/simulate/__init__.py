"""How fast will it run: an event-driven flow simulator for schedules, MSCCL files and baselines.

:func:`simulate` runs one algorithm for one call size (:func:`simulate_spec` takes what the command line
takes: a schedule file, an MSCCL file or a baseline name); :mod:`.compare` sweeps sizes and algorithms,
:mod:`.select` picks the best schedule per size range.  See docs/simulate.md for the model.
"""

from forestcoll.simulate.core import ALGORITHMS, SimResult, simulate, simulate_program, simulate_spec
from forestcoll.simulate.network import Network, build_network, load_network

__all__ = ["ALGORITHMS", "Network", "SimResult", "build_network", "load_network", "simulate", "simulate_program",
           "simulate_spec"]
