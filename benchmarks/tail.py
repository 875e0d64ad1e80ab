"""Where an optimal-trees simulation loses against the bound: which trees end last, and on which slow links.

Runs the simulator (default model) on ``forestcoll generate``'s optimal trees and prints, as markdown, the
trees that finish last (phase, root, chunks, height, the most box crossings on one of its chains, and the level of
every hop over a slow link: an out-tree hop's depth below its root, an in-tree hop's subtree height, 0 at the
leaves), the last finish of each phase with and without slow hops, and the slow links' busy time against what
they must carry.  A link is slow when its capacity is at most ``--slow`` GB/s (default 6.5: the CPUs' PCIe root
ports of the H100 dump).

    python benchmarks/tail.py mi250:nodes=2 allreduce --size 16777216

A dump: ``python benchmarks/tail.py ../shared/data/nccl-topo/H100-topology.xml allreduce --nodes 4 --fabric
rail`` (1 GiB there: about 8 CPU minutes, 4 GB).
"""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict

from forestcoll.generate import generate
from forestcoll.simulate import trees as simtrees
from forestcoll.simulate.engine import SENT, run
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topology")
    ap.add_argument("collective")
    ap.add_argument("--size", type=int, default=1 << 30, help="bytes (default 1 GiB)")
    ap.add_argument("--nodes", help="boxes, for a dump")
    ap.add_argument("--fabric", help="fabric between boxes, for a dump")
    ap.add_argument("--slow", type=float, default=6.5, help="GB/s at or below which a link counts as slow")
    ap.add_argument("--top", type=int, default=12, help="trees listed")
    args = ap.parse_args()
    extra = {k: v for k, v in (("nodes", args.nodes), ("fabric", args.fabric)) if v}
    topo = load_topology(args.topology, extra or None)
    net = build_network(topo)
    sched = generate(topo, args.collective)
    shapes_seen = []
    shape_trees = simtrees.shape_trees

    def keep(s):  # the shapes the program is built from: its stream keys are (id(shape), sender, receiver)
        shapes_seen.append(shape_trees(s))
        return shapes_seen[-1]

    simtrees.shape_trees = keep
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        builder = simtrees.tree_program(sched, net, float(args.size), float(1 << 20), None)
        program = builder.build("weighted")
        res = run(program, net.capacity)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        simtrees.shape_trees = shape_trees
    shapes = shapes_seen[-1]
    which = {id(s): i for i, s in enumerate(shapes)}
    slow = {link for link, c in enumerate(net.capacity) if c <= args.slow * 1e9}
    finish: dict[int, float] = defaultdict(float)
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    carried: dict[int, float] = defaultdict(float)
    # ProgramBuilder keeps each transfer's stream, links and bytes (private lists, read here only)
    for t, (stream, links, nbytes) in enumerate(zip(builder._stream, builder._links, builder._bytes)):
        if stream[0] not in which:  # a marker (the root's reduction in allreduce)
            continue
        i = which[stream[0]]
        finish[i] = max(finish[i], float(res.delivered[t]))
        if slow.intersection(links):
            begin = max((float(res.sent[d >> 1] if d & 1 == SENT else res.delivered[d >> 1])
                         for d in program.deps[t]), default=0.0)
            for link in slow.intersection(links):
                spans[link].append((begin, float(res.sent[t])))
                carried[link] += nbytes
    index = {r: i for i, r in enumerate(sched.ranks)}

    def slow_levels(i: int) -> list[int]:
        shape, tree = shapes[i], sched.trees[i]
        return [shape.level[index[e.src]] for e in tree.edges if slow.intersection(net.path_links(e.path)[0])]

    box = {n.name: n.box for n in topo.nodes}
    rank_box = [box[r] for r in sched.ranks]

    def crossings(i: int) -> int:
        """The most box crossings on one chain of tree i (what trees/crossings.py lowers)."""
        shape, out = shapes[i], 0
        for v in shape.parent:  # each rank up to the root (out-trees: parents; in-trees: next hops)
            count, u = 0, v
            while u != shape.root:
                count += rank_box[u] != rank_box[shape.parent[u]]
                u = shape.parent[u]
            out = max(out, count)
        return out

    ms = 1e3
    print(f"{args.collective} on {topo.name or args.topology}, {args.size} bytes: {args.size / res.time / 1e9:.1f} GB/s "
          f"(bound {float(sched.bound_algbw):.1f}), {res.time * ms:.4f} ms; bound time "
          f"{args.size / float(sched.bound_algbw) / 1e9 * ms:.4f} ms; simulated in {cpu:.0f} s CPU / {wall:.0f} s wall, "
          f"load {os.getloadavg()[0]:.1f}\n")
    print("| finish ms | phase | root | chunks | height | box crossings | slow hops (level) |\n"
          "|---:|---|---|---:|---:|---:|---|")
    for i in sorted(range(len(shapes)), key=lambda i: -finish[i])[:args.top]:
        t = sched.trees[i]
        print(f"| {finish[i] * ms:.4f} | {t.phase} | {t.root} | {t.chunks} | {t.height()} | {crossings(i)} | "
              f"{slow_levels(i)} |")
    print("\n| phase | trees | with slow hops: last ms | without: last ms |\n|---|---:|---:|---:|")
    for phase in dict.fromkeys(t.phase for t in sched.trees):
        ids = [i for i, t in enumerate(sched.trees) if t.phase == phase]
        on = [finish[i] for i in ids if slow_levels(i)]
        off = [finish[i] for i in ids if not slow_levels(i)]
        print(f"| {phase} | {len(ids)} | {max(on, default=0) * ms:.4f} | {max(off, default=0) * ms:.4f} |")
    if spans:
        busy = []
        for xs in spans.values():
            xs.sort()
            total, (lo, hi) = 0.0, xs[0]
            for a, b in xs[1:]:
                if a > hi:
                    total, lo, hi = total + hi - lo, a, b
                else:
                    hi = max(hi, b)
            busy.append((total + hi - lo, hi))
        need = max(carried[link] / net.capacity[link] for link in spans)
        print(f"\n{len(spans)} slow links: they must carry {need * ms:.4f} ms at most; busy (some transfer on them) "
              f"{min(b for b, _ in busy) * ms:.4f}-{max(b for b, _ in busy) * ms:.4f} ms; last send "
              f"{max(e for _, e in busy) * ms:.4f} ms")


if __name__ == "__main__":
    main()
