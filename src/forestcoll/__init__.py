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

from forestcoll.lazy import lazy_exports

__version__ = "0.1.0"

# each name imports its module on first use: `forestcoll --help` and the CLI's commands load only what they run
_EXPORTS = {
    "Bound": "forestcoll.bound",
    "fixed_k_algbw": "forestcoll.bound",
    "optimal_bound": "forestcoll.bound",
    "ForestCollError": "forestcoll.errors",
    "ScheduleError": "forestcoll.errors",
    "TopologyError": "forestcoll.errors",
    "UsageError": "forestcoll.errors",
    "generate": "forestcoll.generate",
    "Schedule": "forestcoll.schedule",
    "read_schedule": "forestcoll.schedule",
    "schedule_from_dict": "forestcoll.schedule",
    "schedule_to_dict": "forestcoll.schedule",
    "Link": "forestcoll.topology",
    "Node": "forestcoll.topology",
    "Topology": "forestcoll.topology",
    "TopologyBuilder": "forestcoll.topology",
    "from_networkx": "forestcoll.topology",
    "load_topology": "forestcoll.topology",
    "make_topology": "forestcoll.topology",
    "to_networkx": "forestcoll.topology",
    "topology_from_dict": "forestcoll.topology",
    "topology_to_dict": "forestcoll.topology",
    "VerifyReport": "forestcoll.verify",
    "verify": "forestcoll.verify",
}
lazy_exports(__name__, _EXPORTS)

__all__ = sorted(_EXPORTS)
