"""Benchmark: tree heights of forestcoll's optimal schedules on the catalog fabrics.

For each fabric it generates the exactly optimal allgather schedule (the trees
allreduce reuses, read backwards, for its reduce-scatter phase) and prints the
smallest exact k, the trees, the largest and mean tree height (in rank-to-rank
hops; a hop through switches counts once), the radius lower bound (no tree of
root r is lower than r's eccentricity in the fabric, so the largest
eccentricity bounds the maximum height from below), whether the independent
verifier certifies the schedule optimal, and the generation time (in process,
imports warm).  It uses only the public API, so the same script measures an
older checkout (``PYTHONPATH=/path/to/old/src python benchmarks/heights.py``).

    python benchmarks/heights.py               # the catalog table
    python benchmarks/heights.py --markdown    # the same, as markdown for the README
    python benchmarks/heights.py --lowest      # also generate --max-height lowest: its height and CPU time
"""

from __future__ import annotations

import argparse
import time
from collections import deque

from rich.console import Console
from tables import show

from forestcoll import generate, load_topology, verify

SPECS = [
    "dgx-a100", "dgx-a100:nodes=2", "dgx-a100:nodes=4", "dgx-h100:nodes=2", "dgx-b200:nodes=2", "hgx-h100",
    "hgx-h100:nics=4", "mi250", "mi250:nodes=2", "mi250:nodes=4", "mi300x:nodes=2", "dgx-1", "ndv2:nodes=2",
    "hetero", "ring:n=8", "torus:dims=4x4", "torus:dims=3x3x3", "hypercube:dim=4", "fully-connected:n=8", "switch:n=8",
]


def radius_bound(topo) -> int:
    """The largest eccentricity of a rank, counting a path through switches as one hop."""
    idx = topo.index
    out: dict[int, list[int]] = {}
    for lk in topo.links:
        out.setdefault(idx[lk.src], []).append(idx[lk.dst])
    compute = topo.is_compute
    worst = 0
    for r in (i for i in range(len(topo.nodes)) if compute[i]):
        hops = {r: 0}
        queue = deque([r])
        while queue:  # 0-1 BFS: entering a switch is free, entering a rank costs a hop
            u = queue.popleft()
            for v in out.get(u, []):
                d = hops[u] + (1 if compute[v] else 0)
                if v not in hops or d < hops[v]:
                    hops[v] = d
                    (queue.append if compute[v] else queue.appendleft)(v)
        worst = max(worst, max(d for v, d in hops.items() if compute[v]))
    return worst


def tree_heights(sched) -> list[int]:
    return [t.height() for t in sched.trees]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print markdown")
    ap.add_argument("--lowest", action="store_true",
                    help="also generate --max-height lowest (the same optimum, trees lowered by the height search): its "
                         "max height and CPU seconds beside the default's")
    ap.add_argument("specs", nargs="*", help="fabrics (default: the catalog list above)")
    args = ap.parse_args()
    generate(load_topology("ring:n=4"), "allgather")  # warm imports
    rows = []
    for spec in args.specs or SPECS:
        topo = load_topology(spec)
        t0, c0 = time.perf_counter(), time.process_time()
        sched = generate(topo, "allgather")
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        hs = tree_heights(sched)
        rep = verify(sched, topo)
        rows.append([spec, str(topo.num_compute), str(sched.k), str(len(sched.trees)), str(max(hs)),
                     f"{sum(hs) / len(hs):.2f}", str(radius_bound(topo)), "yes" if rep.certified_optimal else "NO",
                     f"{secs:.3f}"])
        if args.lowest:
            c0 = time.process_time()
            low = generate(topo, "allgather", max_height="lowest")
            low_cpu = time.process_time() - c0
            same = low.k == sched.k and low.algbw == sched.algbw and verify(low, topo).certified_optimal
            rows[-1] += [f"{max(tree_heights(low))}" + ("" if same else " (NOT the same optimum)"), f"{cpu:.3f}",
                         f"{low_cpu:.2f}"]
    heads = ["fabric", "ranks", "k", "trees", "max height", "mean height", "radius bound", "certified", "generate s"]
    if args.lowest:
        heads += ["lowest height", "default CPU s", "lowest CPU s"]
    show(Console(), "allgather, exactly optimal k", heads, rows, args.markdown, 1)


if __name__ == "__main__":
    main()
