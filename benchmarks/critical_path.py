"""Benchmark: where an MSCCL++ plan's time goes, against its own trees (the critical path, summed by operation).

Simulates one call of the plan and of the trees it was exported from (default model), walks back from the transfer
delivered last along the dependencies that decided each start (:mod:`forestcoll.simulate.critical`), and prints, by
the kind of operation that issued each transfer on that chain, how many are on it, their latencies (transfers that
carry bytes, and zero-byte ones: signals) and the time their bytes took to leave; then the excess over size / bound.
``start`` marks the handshake before a block's pipelines, ``end`` the one after them.

    forestcoll generate dgx-a100:nodes=2 -c allgather -o ag.json
    forestcoll export ag.json --format mscclpp -o ag-plan.json
    python benchmarks/critical_path.py dgx-a100:nodes=2 ag-plan.json ag.json --size 16MiB
    python benchmarks/critical_path.py dgx-a100:nodes=2 ag-plan.json ag.json --size 16MiB --steps
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main(argv: list[str] | None = None) -> int:
    """Print the decomposition; 2 with one line on stderr on bad input."""
    from forestcoll.errors import ForestCollError
    from forestcoll.mscclpp.plan import read_plan
    from forestcoll.schedule import Schedule, read_schedule
    from forestcoll.simulate.critical import plan_critical_path, tree_critical_path
    from forestcoll.simulate.network import build_network
    from forestcoll.topology import load_topology
    from forestcoll.units import parse_size

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("topology", help="the fabric (a built-in spec or a file)")
    ap.add_argument("plan", help="the MSCCL++ plan (JSON)")
    ap.add_argument("schedule", nargs="?", help="the tree schedule it was exported from (its bound and its trees)")
    ap.add_argument("--size", default="16MiB", help="the call's nccl-tests size (default 16MiB)")
    ap.add_argument("--steps", action="store_true", help="also list the plan's chain, transfer by transfer")
    args = ap.parse_args(argv)
    try:
        size = parse_size(args.size)
        net = build_network(load_topology(args.topology))
        plan = read_plan(args.plan)
        sched = read_schedule(args.schedule) if args.schedule else None
        if sched is not None and not isinstance(sched, Schedule):
            raise ForestCollError(f"{args.schedule}: not a tree schedule")
        ideal = size / float(sched.bound_algbw) / 1e9 if sched is not None else None
        cp = plan_critical_path(net, plan, size)
        ct = tree_critical_path(net, sched, size) if sched is not None else None
    except (ForestCollError, OSError, ValueError) as exc:
        print(f"critical_path: {exc}", file=sys.stderr)
        return 2
    print(f"plan {args.plan}, {args.size}: {cp.time * 1e6:.1f} us")
    print(cp.table(ideal))
    if args.steps:
        for s in cp.steps:
            arrived = "" if s.delivered is None else f", arrived {s.delivered * 1e6:.2f}"
            print(f"  {s.kind:<22} #{s.tid:<7} started {s.start * 1e6:9.2f}, sent {s.sent * 1e6:9.2f}{arrived}")
    if ct is not None:
        print(f"trees {args.schedule}, {args.size}: {ct.time * 1e6:.1f} us")
        print(ct.table(ideal))
    return 0


if __name__ == "__main__":
    sys.exit(main())
