"""Benchmark: allreduce with equal shards vs weighted shards on fabrics whose boxes differ (in ranks or NICs).

For each fabric file: the exact equal-shard bound and the weighted rate (:mod:`forestcoll.bound.shards`), then the
simulated algbw (default model) at 1 MiB, 16 MiB and 1 GiB of the optimal trees and of the MSCCL file
``generate --format msccl`` writes (``msccl/generated.py``: k and variant raced), each with equal shards
(``--shards equal``), with box weights (``--shards box``, where boxes differ in ranks) and with the best weights
(:mod:`forestcoll.bound.best_shards`, where ``--shards auto`` takes them), and the best baseline (ring, double
binary tree, hierarchical, direct) at each size.

    python benchmarks/weighted_shards.py docs/examples/uneven-boxes.yaml
    python benchmarks/fabric_sweep.py --seeds 6 --save /tmp/f --show > /dev/null
    python benchmarks/weighted_shards.py /tmp/f/fabric-6.yaml
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = ((1 << 20, "1MiB"), (16 << 20, "16MiB"), (1 << 30, "1GiB"))


def measure(path: str) -> list[str]:
    """Rows of the table for one fabric file."""
    from fabric_sweep import best_baseline

    from forestcoll.bound.best_shards import auto_shard_weights
    from forestcoll.bound.optimal import optimal_bound
    from forestcoll.bound.shards import box_shard_weights, weighted_allreduce
    from forestcoll.cli.shards import rank_weights
    from forestcoll.errors import TopologyError
    from forestcoll.generate import generate
    from forestcoll.msccl.export import ExportOptions
    from forestcoll.msccl.fabric import fabric_options
    from forestcoll.msccl.generated import generated_msccl
    from forestcoll.simulate.core import simulate
    from forestcoll.simulate.msccl import file_rate, simulate_msccl
    from forestcoll.simulate.network import build_network
    from forestcoll.topology import load_topology

    topo = load_topology(path)
    net = build_network(topo)
    node = box_shard_weights(topo)
    auto = auto_shard_weights(topo)
    variants = [("equal", None)] + ([("box", rank_weights(topo, node))] if node is not None else [])
    if auto is not None and auto[1] == "best":
        variants.append(("best", rank_weights(topo, auto[0])))
    if len(variants) == 1:
        return [f"{topo.name}: equal shards are optimal (or the box weights, boxes equal in ranks): nothing to weight"]
    equal_bound = optimal_bound(topo, "allreduce").algbw
    weighted_bound = weighted_allreduce(topo, auto[0] if auto is not None else node).algbw
    rows = [f"{topo.name} ({topo.num_compute} ranks): equal-shard bound {float(equal_bound):.3f} GB/s, "
            f"weighted {float(weighted_bound):.3f} GB/s ({float(weighted_bound / equal_bound):.3f}x)"]
    base = {label: best_baseline(net, "allreduce", size) for size, label in SIZES}
    rows.append(f"  {'best baseline':<24}" + "".join(f"{base[lb].algbw_gbps:>9.2f}" for _s, lb in SIZES)
                + "   " + ", ".join(f"{lb} {base[lb].algorithm}" for _s, lb in SIZES))
    for shards, weights in variants:
        t0 = time.process_time()
        try:
            sched = generate(topo, "allreduce", shard_weights=weights)
        except TopologyError as exc:  # a switch that sends more than it receives (sweep seed 4)
            rows.append(f"  {shards + ' trees':<24}   no tree schedule: {str(exc).split(':')[0]}")
            continue
        kw = {} if weights is None else {"shard_weights": weights}
        with contextlib.redirect_stdout(io.StringIO()):
            xml_sched, result = generated_msccl(topo, sched, fabric_options(ExportOptions(), topo),
                                                file_rate=file_rate(topo), **kw)
        bound = float(sched.bound_algbw)
        for what, run in (("trees", lambda size, s=sched: simulate(net, s, size=size).algbw_gbps),
                          (f"MSCCL k={xml_sched.k}", lambda size, a=result.algo: simulate_msccl(a, net, size).algbw_gbps)):
            rates = [run(size) for size, _lb in SIZES]
            rows.append(f"  {shards + ' ' + what:<24}" + "".join(f"{r:>9.2f}" for r in rates)
                        + f"   1GiB {rates[-1] / bound:.3f} of its bound, {rates[-1] / float(weighted_bound):.3f} of "
                        f"the weighted; 16MiB {'beats' if rates[1] > base['16MiB'].algbw_gbps else 'below'} the baseline")
        rows.append(f"  ({shards}: {time.process_time() - t0:.1f} s CPU)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fabrics", nargs="+", help="topology files (boxes that differ in ranks)")
    args = ap.parse_args()
    print(f"{'allreduce algbw, GB/s':<26}" + "".join(f"{lb:>9}" for _s, lb in SIZES))
    for path in args.fabrics:
        for row in measure(path):
            print(row, flush=True)


if __name__ == "__main__":
    main()
