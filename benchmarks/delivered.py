"""Benchmark: what a user gets, not what we prove: every artefact simulated against the exact bound.

For each fabric (2 x DGX-A100, 2 x MI250, and the imported NCCL / RCCL dumps
H100-topology.xml and topo_8p_940.xml as 4 boxes on a rail fabric, found
through ../shared/data/MANIFEST.tsv and skipped when absent) and each of
allreduce and allgather it prints the exact bound and the simulated algbw, at
1 MiB, 16 MiB and 1 GiB, of

* the optimal trees (``forestcoll generate``), with their height;
* the MSCCL file ``generate --format msccl`` writes, for the runtime the
  fabric's GPUs imply (rccl on mi250 and the MI300 dump, msccl-executor-nccl
  on dgx-a100 and the H100 dump; msccl/fabric.py; older checkouts:
  msccl-executor-nccl), simulated as the runtime executes it: the fastest at 1 GiB of the optimal k's file (``forestcoll
  export --format msccl``, when it fits the runtime's limits) and the fitting
  powers of two below it; when it is not the optimal k, its k is named and it
  is also held against its own trees;
* the best baseline (ring, double binary tree, hierarchical, direct: the best
  of those that apply, named);
* with ``--choice``: what the per-size selection (``generate --sizes``,
  ``compare``) picks at that size, and its algbw; and the MSCCL file
  ``generate --sizes ... --format msccl -o dir/`` writes for that size (the
  candidates' files ranked by their own simulated rate), against its own trees.

Same simulator, same defaults for everything.  The script uses only public
calls that exist since the first simulator, so it also measures an older
checkout: ``PYTHONPATH=/path/to/old/src python benchmarks/delivered.py``.

    python benchmarks/delivered.py                    # the table (a few minutes)
    python benchmarks/delivered.py --markdown         # markdown for the README
    python benchmarks/delivered.py --choice           # with the per-size choice (slower)
    python benchmarks/delivered.py --only mi250:nodes=2 --collectives allreduce
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from tables import show

from forestcoll.generate import generate
from forestcoll.msccl.export import ExportError, export_msccl
from forestcoll.simulate import baselines
from forestcoll.simulate.core import simulate
from forestcoll.simulate.msccl import simulate_msccl
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RAIL4 = {"nodes": "4", "fabric": "rail"}


def dump(name: str) -> str:
    """The path of a shared NCCL/RCCL dump, found through ../shared/data/MANIFEST.tsv (first column: its path
    under data/); a path that does not exist when the data (or the file) is absent."""
    manifest = DATA / "MANIFEST.tsv"
    if manifest.exists():
        for line in manifest.read_text().splitlines():
            rel = line.split("\t", 1)[0]
            if rel.rsplit("/", 1)[-1] == name:
                return str(DATA / rel)
    return str(DATA / "nccl-topo" / name)


FABRICS = [
    ("dgx-a100:nodes=2", "dgx-a100:nodes=2", None),
    ("mi250:nodes=2", "mi250:nodes=2", None),
    ("H100-topology.xml x4 rail", dump("H100-topology.xml"), RAIL4),
    ("topo_8p_940.xml x4 rail", dump("topo_8p_940.xml"), RAIL4),
]
SIZES = [(1 << 20, "1MiB"), (16 << 20, "16MiB"), (1 << 30, "1GiB")]


def best_baseline(net, collective: str, size: int):
    results = [simulate(net, name, collective, size) for name in baselines.BASELINES
               if baselines.applicable(name, net, collective)]
    return max(results, key=lambda r: r.algbw_gbps)


def fitting(topo, net, collective: str, sched, own=None):
    """The schedule ``generate --format msccl`` exports: the fastest file that fits among the optimal k's (``own``,
    when it fits) and the powers of two below it; older checkouts: the fitting power of two with the highest exact
    rate, asked only when the optimal k does not fit.  None when that is the optimal k's file, or none fits."""
    try:
        from forestcoll.msccl.export import fitting_msccl
    except ImportError:
        return None
    try:
        from forestcoll.simulate.msccl import file_rate
        found = fitting_msccl(topo, collective, sched, file_rate=file_rate(topo), incumbent=own)
    except ImportError:
        if own is not None:
            return None
        found = fitting_msccl(topo, collective, sched)
    return found[0] if found and found[0] is not sched else None


def split_as_generate_does(topo, sched, algo):
    """The file ``generate --format msccl`` writes for ``algo`` (``sched``'s file): its plain, split or even-pieces
    version by msccl/generated.py's rule (split only, on checkouts before even pieces); older checkouts: ``algo``."""
    try:
        from forestcoll.msccl.generated import written_variant
    except ImportError:
        try:
            from forestcoll.msccl.generated import split_if_not_slower as written_variant
        except ImportError:
            return algo
    from forestcoll.msccl.export import ExportOptions
    from forestcoll.simulate.msccl import file_rate

    if algo is None:
        return None
    written, note = written_variant(sched, export_msccl(sched), ExportOptions(), file_rate(topo), 1 << 30)
    if note:
        print(f"{sched.topology} {sched.collective} k={sched.k}: {note}", flush=True)
    return written.algo


def fabric_runtime(topo):
    """The export options ``generate --format msccl`` takes for ``topo`` (its GPU's runtime and resident blocks), and
    the runtime's name; (None, msccl-executor-nccl) on checkouts that do not record the GPU."""
    try:
        from forestcoll.msccl.fabric import for_gpu
    except ImportError:
        return None, "msccl-executor-nccl"
    options = for_gpu(None, topo.gpu)
    return options, options.runtime


def written_by_generate(topo, sched):
    """(schedule, algo, why) of the file ``generate --format msccl`` writes, by its own code (msccl/generated.py:
    the k, then the variant, the optimal k's variants competing when its plain file lost the race), for the runtime
    the fabric implies, on ``sched``'s shards (weighted allreduce shards too, as ``generate`` passes them); algo None
    with why when no file fits; None on checkouts without ``generated_msccl``."""
    try:
        from forestcoll.msccl.generated import generated_msccl
        from forestcoll.simulate.msccl import file_rate
    except ImportError:
        return None
    try:
        weights = getattr(sched, "shard_weights", None)
        chosen, result = generated_msccl(topo, sched, fabric_runtime(topo)[0], file_rate=file_rate(topo),
                                         **({"shard_weights": weights} if weights is not None else {}))
    except ExportError as exc:
        return sched, None, str(exc).split(":")[0]
    for note in result.notes:
        print(f"{sched.topology} {sched.collective}: {note}", flush=True)
    return chosen, result.algo, ""


def older_checkout(topo, net, collective: str, sched, label: str):
    """(schedule, algo, why) as checkouts without ``generated_msccl`` chose the file ``generate --format msccl``
    writes: the fastest fitting k (:func:`fitting`), then its variant (:func:`split_as_generate_does`)."""
    xml_sched, why = sched, ""
    try:
        own = export_msccl(sched).algo
    except ExportError as exc:  # the optimal k may not fit the runtime's limits
        own, why = None, str(exc).split(":")[0]
    found = fitting(topo, net, collective, sched, own)
    algo = own
    if found is not None:
        algo, xml_sched = export_msccl(found).algo, found
        print(f"{label} {collective}: the file generate --format msccl writes is k={found.k} (optimal "
              f"k={sched.k}" + (f" does not fit MSCCL: {why}" if own is None else "") + ")", flush=True)
    return xml_sched, split_as_generate_does(topo, xml_sched, algo), why


def per_size_choice(topo, net, collective: str):
    """The per-size selection's pick at each size (name, algbw, range), and the MSCCL file ``generate --sizes ...
    --format msccl`` writes at each size (a cell), or (None, None) when this checkout has no selection."""
    try:
        from forestcoll.simulate.select import candidate_schedules, select_schedules
    except ImportError:
        return None, None
    cands = candidate_schedules(topo, net, collective)
    sizes = [s for s, _ in SIZES]
    sel = select_schedules(topo, net, collective, sizes, cands, workers=1)
    picks = {}
    for rng in sel.ranges:
        for size, algbw in rng.measured.items():
            picks[size] = (rng.name, algbw, rng)
    try:  # the candidates' files ranked by the files' simulated rate, as generate --sizes --format msccl does
        from forestcoll.simulate.select import candidate_files  # noqa: F401
    except ImportError:  # older checkouts rank the trees and write the winner's file
        return picks, {size: per_size_file(net, pick, size) for size, pick in picks.items()}
    return picks, size_files(topo, net, collective, sizes)


def size_files(topo, net, collective: str, sizes) -> dict[int, str]:
    """A cell per size: the file ``generate --sizes ... --format msccl -o dir/`` writes for that size (its own
    export_by_size for the fabric's runtime, files not self-checked), simulated at that size, against its own trees."""
    import tempfile

    from forestcoll.simulate.select import export_by_size

    with tempfile.TemporaryDirectory() as outdir:  # for the fabric's runtime, as generate --sizes writes them
        written = export_by_size(topo, collective, sizes, outdir, check=False, workers=1, options=fabric_runtime(topo)[0])
    cells = {}
    for rng in written.selection.ranges:
        for size, algbw in rng.measured.items():
            trees = simulate(net, rng.schedule, size=size).algbw_gbps
            cells[size] = f"{algbw:.1f} ({algbw / trees:.2f} of its trees; {rng.name})"
    return cells


def per_size_file(net, pick, size: int) -> str:
    """The MSCCL file of ``pick``'s range (older checkouts' ``generate --sizes --format msccl``), simulated at
    ``size``, against the pick's own trees."""
    name, algbw, rng = pick
    try:
        res = export_msccl(rng.schedule, min_bytes=rng.min_bytes, max_bytes=rng.max_bytes)
    except ExportError as exc:
        return f"- ({str(exc).split(':')[0]})"
    x = simulate_msccl(res.algo, net, size).algbw_gbps
    return f"{x:.1f} ({x / algbw:.2f} of its trees)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print markdown")
    ap.add_argument("--choice", action="store_true", help="add the per-size selection's pick (slower)")
    ap.add_argument("--only", action="append", help="run only this fabric label or spec (repeatable)")
    ap.add_argument("--collectives", default="allreduce,allgather", help="comma-separated (default allreduce,allgather)")
    args = ap.parse_args()
    rows = []
    runtimes: dict[str, str] = {}
    t_start = time.perf_counter()
    for label, spec, extra in FABRICS:
        if args.only and label not in args.only and spec not in args.only:
            continue
        if extra is not None and not Path(spec).exists():
            print(f"skipping {label}: {spec} is not here")
            continue
        topo = load_topology(spec, extra)
        runtimes[label] = fabric_runtime(topo)[1]
        print(f"{label}: MSCCL files for {runtimes[label]}", flush=True)
        net = build_network(topo)
        for collective in args.collectives.split(","):
            sched = generate(topo, collective)
            written = written_by_generate(topo, sched)
            if written is not None:
                xml_sched, algo, why = written
            else:
                xml_sched, algo, why = older_checkout(topo, net, collective, sched, label)
            bound = float(sched.bound_algbw)
            picks, files = per_size_choice(topo, net, collective) if args.choice else (None, None)
            for size, name in SIZES:
                tree = simulate(net, sched, size=size)
                xml = simulate_msccl(algo, net, size) if algo is not None else None
                if xml is not None and xml_sched is not sched:  # the file's own trees too
                    mine = simulate(net, xml_sched, size=size).algbw_gbps
                    of_own = f"; k={xml_sched.k}, {xml.algbw_gbps / mine:.2f} of its trees"
                else:
                    of_own = ""
                base = best_baseline(net, collective, size)
                row = [label, collective, f"{bound:.1f}", name, f"{tree.algbw_gbps:.1f} ({tree.algbw_gbps / bound:.2f})",
                       (f"{xml.algbw_gbps:.1f} ({xml.algbw_gbps / tree.algbw_gbps:.2f} of trees"
                        + of_own + ")") if xml else f"- ({why})",
                       f"{base.algbw_gbps:.1f} {base.algorithm}", str(sched.max_height())]
                if args.choice:
                    pick = picks.get(size) if picks else None
                    row.append(f"{pick[1]:.1f} {pick[0]}" if pick else "-")
                    row.append(files.get(size, "-") if files else "-")
                rows.append(row)
                print(" | ".join(row), flush=True)  # progress: a long run keeps what it measured
    columns = ["fabric", "collective", "bound GB/s", "size", "trees GB/s (of bound)", "MSCCL file GB/s",
               "best baseline GB/s", "tree height"] + (["per-size choice GB/s", "its MSCCL file GB/s"] if args.choice else [])
    used = "; ".join(f"{label} {rt}" for label, rt in runtimes.items())
    show(Console(), f"Delivered: simulated algbw (default model) against the exact bound; MSCCL files for the runtime "
         f"the fabric implies ({used})", columns, rows, args.markdown, 4)
    print(f"\n({time.perf_counter() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
