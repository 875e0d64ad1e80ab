"""All-to-all: the exact optimal throughput of any fabric (max concurrent multi-commodity flow),
schedules of paths, their independent verifier, simulation and MSCCL export."""

from forestcoll.alltoall.bound import AlltoallBound, Bottleneck, alltoall_bound

__all__ = ["AlltoallBound", "Bottleneck", "alltoall_bound"]
