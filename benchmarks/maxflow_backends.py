"""Benchmark: one max-flow on the networks forestcoll solves, with OR-Tools, igraph and networkx.

Networks (all with integer capacities, as forestcoll scales them):
* bound-1090: the cut-condition network of dgx-a100:nodes=64 (1,090 nodes plus
  the super-source; the bound and switch removal solve this kind);
* packing-33: a tree-packing test network of mi250:nodes=2 (33 nodes; packing
  solves thousands of these);
* symmetric-2k: a symmetric-packing check on 1,024 ranks (2,049 nodes, ~600k
  arcs: residual arcs plus a source per image tree feeding its vertex set).

For each back end: the time to build the network once, and the mean time of one
max-flow (setting all capacities and solving) over a few sinks.  OR-Tools runs
through forestcoll.graph.maxflow (what the library uses); igraph gets its capacities
as a list of doubles (exact for these integers).  The ratio is against the
fastest back end measured in this run.

    python benchmarks/maxflow_backends.py
"""

from __future__ import annotations

import time
from fractions import Fraction

import igraph
import networkx as nx
import numpy as np
from rich.console import Console
from rich.table import Table

from forestcoll import load_topology
from forestcoll.graph.maxflow import FlowNetwork


def bound_network():
    topo = load_topology("dgx-a100:nodes=64")
    n = len(topo.nodes)
    x = Fraction(12800, 63) / topo.num_compute  # the optimum rate: a tight network
    p, q = x.numerator, x.denominator
    tails = [u for u, _, _ in topo.arcs] + [n] * topo.num_compute
    heads = [v for _, v, _ in topo.arcs] + [i for i in range(n) if topo.is_compute[i]]
    caps = [int(bw * q) for _, _, bw in topo.arcs] + [p] * topo.num_compute
    sinks = [i for i in range(n) if topo.is_compute[i]][::97][:5]
    return "bound-1090", n + 1, tails, heads, caps, n, sinks


def packing_network():
    rng = np.random.default_rng(7)
    topo = load_topology("mi250:nodes=2")
    idx = {c: i for i, c in enumerate(topo.compute_nodes)}
    tails, heads, caps = [], [], []
    for (a, b), bw in topo.capacity.items():
        if a in idx and b in idx:
            tails.append(idx[a])
            heads.append(idx[b])
            caps.append(int(bw * Fraction(15, 2)))  # U*b at k=83
    n = len(idx)
    for a in range(n):  # the switch-split logical arcs, 4 per GCD
        for b in rng.choice([x for x in range(n) if x != a], size=4, replace=False):
            tails.append(a)
            heads.append(int(b))
            caps.append(int(rng.integers(20, 83)))
    z = n
    tails += [z] * n
    heads += list(range(n))
    caps += [83] * n
    caps[-5] = sum(caps)  # z -> x unbounded for the tested arc's tail
    return "packing-33", n + 1, tails, heads, caps, z, [1, 9, 17, 25, 31]


def symmetric_network():
    rng = np.random.default_rng(1)
    n = 1024
    tails, heads, caps = [], [], []
    for u in range(n):
        for v in rng.choice(n, size=20, replace=False):
            if v != u:
                tails.append(u)
                heads.append(int(v))
                caps.append(int(rng.integers(1, 200)))
    z = n
    tails += [z] * n
    heads += list(range(n))
    caps += [1] * n
    verts = rng.choice(n, size=600, replace=False)
    big = 10**9
    for g in range(n):
        s = n + 1 + g
        tails.append(z)
        heads.append(s)
        caps.append(1)
        for v in verts:
            tails.append(s)
            heads.append(int((v + g) % n))
            caps.append(big)
    return "symmetric-2k", 2 * n + 1, tails, heads, caps, z, [5, 500]


def time_backend(backend, n, tails, heads, caps, source, sinks, reps):
    """Build once, then time max-flow queries that set every capacity and solve."""
    t0 = time.perf_counter()
    if backend == "networkx":
        g = nx.DiGraph()
        for a, b, c in zip(tails, heads, caps):
            if g.has_edge(a, b):
                g[a][b]["capacity"] += c
            else:
                g.add_edge(a, b, capacity=c)
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        values = [nx.maximum_flow_value(g, source, t) for t in sinks[:reps]]
        return build, (time.perf_counter() - t0) / len(values), values
    if backend == "igraph":
        graph = igraph.Graph(n=n, edges=list(zip(tails, heads)), directed=True)
        build = time.perf_counter() - t0

        def solve(t):
            return int(graph.maxflow_value(source, t, [float(c) for c in caps]))
    else:  # forestcoll's own wrapper around OR-Tools
        net = FlowNetwork(n, tails, heads)
        cap_arr = np.asarray(caps, dtype=np.int64)
        build = time.perf_counter() - t0

        def solve(t):
            return net.value(cap_arr, source, t)

    values = []
    t0 = time.perf_counter()
    for _ in range(reps):
        for t in sinks:
            values.append(solve(t))
    return build, (time.perf_counter() - t0) / (reps * len(sinks)), values[: len(sinks)]


def main() -> None:
    # import every back end before timing anything
    FlowNetwork(2, [0], [1]).value([1], 0, 1)
    igraph.Graph(n=2, edges=[(0, 1)], directed=True).maxflow_value(0, 1, [1.0])
    console = Console(width=140)
    table = Table(title="one max-flow, per back end (build once, then set capacities + solve)")
    for col in ("network", "nodes", "arcs", "back end", "build ms", "per max-flow ms", "vs fastest", "same values"):
        table.add_column(col, justify="right", no_wrap=True)
    for make, reps, nx_sinks in ((bound_network, 20, 2), (packing_network, 400, 5), (symmetric_network, 2, 0)):
        name, n, tails, heads, caps, source, sinks = make()
        results = {}
        for backend in ("ortools", "igraph", "networkx"):  # OR-Tools through forestcoll.graph.maxflow
            if backend == "networkx" and not nx_sinks:
                continue
            console.print(f"[dim]{name}: {backend} ...[/dim]")
            k = nx_sinks if backend == "networkx" else reps
            results[backend] = time_backend(backend, n, tails, heads, caps, source, sinks, k)
        fastest = min(r[1] for r in results.values())
        reference = results["ortools"][2]
        for backend, (build, per, values) in results.items():
            same = values == reference[: len(values)]
            table.add_row(name, str(n), str(len(tails)), backend, f"{build * 1e3:.1f}", f"{per * 1e3:.3f}",
                          f"{per / fastest:.1f}x", "yes" if same else "NO")
    console.print(table)


if __name__ == "__main__":
    main()
