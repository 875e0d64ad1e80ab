"""forestcoll: throughput-optimal collective communication schedules for any fabric.

The pipeline, one package or module per stage (docs/design.md has the map)::

    topology  ->  bound  ->  trees (capacities, splitting, packing, routing)  ->  schedule  ->  verify
    (model)      (exact      (integer capacities, remove switches,               (JSON)        (independent
                 optimum)     spanning trees, paths)                                            checker)
                                                                         schedule  ->  msccl, simulate, runtime/torch

Collectives are defined once in :mod:`forestcoll.collectives`; every result
has ``ok``, ``message`` and ``to_dict()`` (:mod:`forestcoll.results`).

Quick start::

    import forestcoll
    topo = forestcoll.load_topology("dgx-a100:nodes=2")
    forestcoll.optimal_bound(topo).algbw          # Fraction(1040, 3) GB/s
    sched = forestcoll.generate(topo, "allreduce")
    forestcoll.verify(sched, topo).certified_optimal   # True
"""

from forestcoll.bound import Bound, fixed_k_algbw, optimal_bound
from forestcoll.errors import ForestCollError, ScheduleError, TopologyError, UsageError
from forestcoll.generate import generate
from forestcoll.schedule import Schedule, read_schedule, schedule_from_dict, schedule_to_dict
from forestcoll.topology import (
    Link,
    Node,
    Topology,
    TopologyBuilder,
    from_networkx,
    load_topology,
    make_topology,
    to_networkx,
    topology_from_dict,
    topology_to_dict,
)
from forestcoll.verify import VerifyReport, verify

__version__ = "0.1.0"

__all__ = [
    "Bound",
    "ForestCollError",
    "Link",
    "Node",
    "Schedule",
    "ScheduleError",
    "Topology",
    "TopologyBuilder",
    "TopologyError",
    "UsageError",
    "VerifyReport",
    "fixed_k_algbw",
    "from_networkx",
    "generate",
    "load_topology",
    "make_topology",
    "optimal_bound",
    "read_schedule",
    "schedule_from_dict",
    "schedule_to_dict",
    "to_networkx",
    "topology_from_dict",
    "topology_to_dict",
    "verify",
]
