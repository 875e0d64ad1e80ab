"""Benchmark: what a user gets on fabrics we did not design for (a seeded sweep over random realistic fabrics).

Each seed gives one declarative topology document (docs/topology-format.md), as a user would write it: 2-4 boxes
of 2-8 GPUs, of one or two kinds; each kind NVSwitch-like (every GPU on one switch) or direct-link (an xGMI-like
full mesh, or a ring); 1-4 NICs per box, each under a PCIe switch shared by its GPUs, the PCIe switches joined by one
CPU or by two CPU sockets; a rail, single-switch or leaf-spine fabric (oversubscribed, one or two spines); bandwidths as
exact rationals, some links faster one way than the other; node names random and listed in a random order.

For each fabric and each of allreduce and allgather it prints the exact bound, then the simulated algbw (default
model) as a fraction of the bound at 16 MiB and 1 GiB of

* the optimal trees (``forestcoll generate``);
* the MSCCL file ``generate --format msccl`` writes (``msccl/generated.py``, for the runtime the fabric implies);
* the MSCCL++ plan ``generate --format mscclpp`` writes (``write_generated_plan``, cut for 1 GiB);

and the best baseline (ring, double binary tree, hierarchical, direct) at 16 MiB.  Allreduce is built as ``generate``
builds it by default (``--shards auto``, :func:`sweep_shards`: :func:`forestcoll.cli.shards.choose_shard_weights`
and ``with_shards``): where weighted shards (each rank's shard weighted by 1 / (ranks in its box), or the best
weights for reduce-scatter then allgather, :mod:`forestcoll.bound.best_shards`) have a strictly higher exact rate and
a tree schedule, the trees, the MSCCL file and the MSCCL++ plan all carry those shards.  Each row is measured against
its *reference bound*, the exact bound of the contract its artefacts were built for: the weighted rate on a weighted
row (``shards`` column ``box`` or ``best``, the equal-shard bound shown beside it), else the equal-shard bound (where
the box weights would be faster but have no tree schedule, ``equal``, with the box-weighted rate beside it).  Where the MSCCL++ plan (cut for 1 GiB) loses to the
best baseline at 16 MiB, the same trees' plan cut for 16 MiB (what ``generate --sizes`` cuts for that size) too.  A
miss is flagged ``!``: an artefact below 0.95 of the reference bound at 1 GiB, or below the best baseline at 16 MiB;
``^`` marks a rate above the reference bound (allreduce: that bound is for reduce-scatter and allgather in sequence,
which an allreduce that overlaps them, or that splits the buffer otherwise, can beat; docs/sweep.md).  The summary
line counts the rows that miss and the rows with a ``^``; the best baseline is also simulated at 1 GiB, where it has
no target and no column, and the summary counts apart the rows where it runs above the bound there.

    python benchmarks/fabric_sweep.py                       # seeds 0-23 (about 17 min CPU)
    python benchmarks/fabric_sweep.py --seeds 0-3 --markdown
    python benchmarks/fabric_sweep.py --seeds 7 --show      # the fabric of seed 7 as YAML, nothing simulated
    python benchmarks/fabric_sweep.py --seeds 7 --save DIR  # and write DIR/fabric-7.yaml (forestcoll bound DIR/...)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = ((16 << 20, "16MiB"), (1 << 30, "1GiB"))
TARGET = 0.95
COLLECTIVES = ("allreduce", "allgather")
ARTEFACTS = ("trees", "msccl", "mscclpp")

# exact per-direction bandwidths (GB/s) a user's file might give, some of them awkward rationals
NVSWITCH_BW = ("300", "450", "150", "1040/3", "900")
MESH_BW = ("48", "64", "36", "50", "128/3")
RING_BW = ("100", "50", "75/2", "200")
PCIE_BW = ("32", "64", "126/5", "24")
# a link between two CPU sockets, GB/s: what forestcoll's NCCL XML reader gives them (topology/nccl_xml.py
# _cpu_bandwidth, after NVIDIA/nccl src/graph/topo.h: Skylake, Sapphire Rapids, AMD, Power9 and newer Intel)
SOCKET_BW = ("10", "22", "16", "32", "40")
NIC_BW = ("100Gbps", "200Gbps", "400Gbps", "25", "175/8")
NAME_STEMS = ("gpu", "g", "rank", "dev", "cuda", "acc")


def _frac(text: str) -> Fraction:
    """A bandwidth string of this module as GB/s (``Gbps`` read as bits)."""
    if text.endswith("Gbps"):
        return Fraction(text[:-4]) / 8
    return Fraction(text)


def _names(rng: random.Random, stem: str, count: int, taken: set[str]) -> list[str]:
    """``count`` fresh random names ``stem<number>`` (not in ``taken``), in a random order."""
    out: list[str] = []
    while len(out) < count:
        name = f"{stem}{rng.randrange(1000)}"
        if name not in taken:
            taken.add(name)
            out.append(name)
    return out


def _pair(a: str, b: str, bw: str, back: str | None = None, cls: str = "") -> list[dict]:
    """Links between ``a`` and ``b``: ``bw`` both ways, or ``bw`` a->b and ``back`` b->a."""
    extra = {"class": cls} if cls else {}
    if back is None or back == bw:
        return [{"between": [a, b], "bandwidth": bw, **extra}]
    return [{"from": a, "to": b, "bandwidth": bw, **extra}, {"from": b, "to": a, "bandwidth": back, **extra}]


def _join_pcie(rng: random.Random, pcie: list[str], switches: list[str], links: list[dict],
               taken: set[str]) -> tuple[random.Random, list[str], list[dict]] | None:
    """Join a box's PCIe switches as a real box's host does (every NCCL topology dump in ../shared/data/nccl-topo has
    its PCIe switches under a ``<cpu>``): half the time one CPU root complex, added to ``switches`` and ``links``;
    else two CPU sockets each above half the switches, joined by their inter-socket link (class ``sys``, SOCKET_BW),
    returned (their own generator, names, links) for :func:`_place` after the box's shuffles.  That generator is seeded by
    ``rng``'s one draw, so ``rng`` draws what it drew when that case left the switches apart: the rest of every
    fabric is unchanged."""
    pick = rng.random()
    if pick < 0.5:  # one CPU root complex (the draws of the generator before the two-socket case, unchanged)
        cpu = _names(rng, "cpu", 1, taken)[0]
        switches.append(cpu)
        links += [link for p in pcie for link in _pair(p, cpu, rng.choice(PCIE_BW), cls="pcie")]
        return None
    sub = random.Random(int(pick * 2 ** 53))
    cpus = _names(sub, "cpu", 2, taken)
    half = len(pcie) // 2
    joins = [link for i, p in enumerate(pcie) for link in _pair(p, cpus[i >= half], sub.choice(PCIE_BW), cls="pcie")]
    return sub, cpus, joins + _pair(cpus[0], cpus[1], sub.choice(SOCKET_BW), cls="sys")


def _place(rng: random.Random, items: list, into: list) -> None:
    """Insert ``items`` into ``into`` at random places (``rng``), in order."""
    for item in items:
        into.insert(rng.randrange(len(into) + 1), item)


def random_box(rng: random.Random, kind: str) -> dict:
    """One box kind as a declarative ``box:`` mapping (see the module docstring)."""
    ngpus = rng.choice((2, 4, 4, 6, 8, 8))
    style = rng.choice(("nvswitch", "nvswitch", "mesh", "ring")) if ngpus > 2 else rng.choice(("nvswitch", "mesh"))
    taken: set[str] = set()
    gpus = _names(rng, rng.choice(NAME_STEMS), ngpus, taken)
    order = list(range(ngpus))  # the physical order (ring neighbours, NIC groups); the listing order is random
    rng.shuffle(order)
    phys = [gpus[i] for i in order]
    links: list[dict] = []
    switches: list[str] = []
    if style == "nvswitch":
        sw = _names(rng, "nvsw", 1, taken)[0]
        switches.append(sw)
        bw = rng.choice(NVSWITCH_BW)
        for g in gpus:
            links += _pair(g, sw, bw, cls="nvlink")
    elif style == "mesh":
        bw = rng.choice(MESH_BW)
        for i in range(ngpus):
            for j in range(i + 1, ngpus):  # some pairs bundle two links (as MI250's GCDs do)
                pair_bw = str(_frac(bw) * 2) if rng.random() < 0.2 else bw
                links += _pair(phys[i], phys[j], pair_bw, cls="xgmi")
    else:
        bw = rng.choice(RING_BW)
        for i in range(ngpus):
            links += _pair(phys[i], phys[(i + 1) % ngpus], bw, cls="nvlink")
    nnics = rng.choice([n for n in (1, 2, 4) if n <= ngpus and ngpus % n == 0])
    nics = _names(rng, "nic", nnics, taken)
    pcie = _names(rng, "pcie", nnics, taken)
    switches += pcie + nics
    up, down = rng.choice(PCIE_BW), rng.choice(PCIE_BW) if rng.random() < 0.3 else None
    per = ngpus // nnics
    for n in range(nnics):
        for g in phys[n * per:(n + 1) * per]:
            links += _pair(g, pcie[n], up, down, cls="pcie")
        links += _pair(pcie[n], nics[n], rng.choice(PCIE_BW), cls="pcie")
    sockets = None
    if nnics > 1:
        sockets = _join_pcie(rng, pcie, switches, links, taken)
    nic_bw = rng.choice(NIC_BW)
    ports = [{"node": nic, "bandwidth": nic_bw} for nic in nics]
    rng.shuffle(switches)
    rng.shuffle(links)
    if sockets is not None:
        sub, cpus, joins = sockets
        _place(sub, cpus, switches)
        _place(sub, joins, links)
    cpu_tag = {0: "", 1: "+cpu"}.get(sum(s.startswith("cpu") for s in switches), "+2cpu")
    kind = f"{kind}-{ngpus}{style}-{nnics}nic{cpu_tag}"
    return {"kind": kind, "compute": gpus, "switches": switches, "links": links, "ports": ports}


def random_fabric(seed: int) -> dict:
    """The declarative topology document of ``seed`` (deterministic: the same seed, the same document)."""
    rng = random.Random(seed)
    nboxes = rng.choice((2, 2, 3, 4))
    kinds = [random_box(rng, f"kind{k}") for k in range(rng.choice((1, 2)))]
    counts = [1] * len(kinds)
    for _ in range(nboxes - len(kinds)):
        counts[rng.randrange(len(kinds))] += 1
    groups = [{"box": box, "count": c} for box, c in zip(kinds, counts)]
    rng.shuffle(groups)
    kind = rng.choice(("rail", "rail", "switch", "leaf-spine"))
    fabric: dict = {"type": kind}
    if kind == "leaf-spine":
        ports = max(len(k["ports"]) for k in kinds)
        fabric.update(spines=rng.choice((1, 2)), oversub=rng.choice(("1", "2", "3/2")),
                      leaf_ports=ports * rng.choice((1, 2)))
    return {"name": f"sweep-{seed}", "boxes": groups, "fabric": fabric}


def describe(doc: dict) -> str:
    """A short label: boxes (GPUs, style, NICs) and the fabric."""
    parts = []
    for group in doc["boxes"]:
        parts.append(f"{group['count']}x{group['box']['kind'].split('-', 1)[1]}")
    fab = doc["fabric"]
    extra = f" s{fab['spines']} o{fab['oversub']}" if fab["type"] == "leaf-spine" else ""
    return " ".join(parts) + f" {fab['type']}{extra}"


def as_yaml(doc: dict) -> str:
    """The document as the YAML file a user writes (a link or port per line)."""
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, width=200, default_flow_style=None)


def load_fabric(doc: dict):
    """The Topology of a document, read the way ``forestcoll`` reads a user's file."""
    from forestcoll.topology.declarative import load_declarative

    return load_declarative(doc, doc["name"])


def box_weighted_allreduce(topo) -> Fraction | None:
    """The exact rate of reduce-scatter then allgather with every rank's shard weighted by 1 / (ranks in its box)
    (:func:`forestcoll.bound.shards.box_weighted_allreduce`); None when every box has as many ranks."""
    from forestcoll.bound.shards import box_weighted_allreduce as weighted

    found = weighted(topo)
    return None if found is None else found.algbw


def sweep_shards(topo, collective: str) -> tuple[tuple[int, ...] | None, Fraction | None]:
    """(per-rank shard weights ``generate -c COLLECTIVE`` takes by default, None for equal shards; the box-weighted
    allreduce rate, None where boxes are equal or the collective is not allreduce): the CLI's own rule
    (:func:`forestcoll.cli.shards.choose_shard_weights`, ``--shards auto``), before ``with_shards``' fallback to equal
    shards where the weighted optimum has no tree schedule."""
    from forestcoll.cli.shards import choose_shard_weights

    weights = choose_shard_weights(topo, collective, None, "json")
    return weights, box_weighted_allreduce(topo) if collective == "allreduce" else None


def shards_kind(topo, weights: tuple[int, ...] | None) -> str:
    """``equal`` (None), ``box`` (the weights 1 / (ranks in box)) or ``best`` (other weights: ``--shards auto``'s best
    weights for reduce-scatter + allgather, :mod:`forestcoll.bound.best_shards`)."""
    from forestcoll.bound.shards import box_shard_weights
    from forestcoll.cli.shards import rank_weights

    if weights is None:
        return "equal"
    box = box_shard_weights(topo)
    return "box" if box is not None and rank_weights(topo, box) == tuple(weights) else "best"


def best_baseline(net, collective: str, size: int):
    """The fastest applicable baseline at ``size``."""
    from forestcoll.simulate import baselines
    from forestcoll.simulate.core import simulate

    results = [simulate(net, name, collective, size) for name in baselines.BASELINES
               if baselines.applicable(name, net, collective)]
    return max(results, key=lambda r: r.algbw_gbps)


def measure(topo, collective: str) -> dict:
    """Every artefact's simulated algbw at SIZES for one fabric and collective, with the bound and the baseline."""
    from delivered import written_by_generate

    from forestcoll.bound.optimal import optimal_bound
    from forestcoll.cli.shards import generate_with_shards, with_shards
    from forestcoll.msccl.fabric import fabric_options
    from forestcoll.mscclpp.export import ExportError, ExportOptions, write_generated_plan
    from forestcoll.simulate.core import simulate
    from forestcoll.simulate.msccl import simulate_msccl
    from forestcoll.simulate.mscclpp import plan_rate, simulate_plan
    from forestcoll.simulate.network import build_network

    net = build_network(topo)
    t0 = time.process_time()
    weights, weighted = sweep_shards(topo, collective)
    sched = generate_with_shards(topo, collective, weights, None)  # auto: equal where the weights have no trees
    weights = sched.shard_weights
    kind = shards_kind(topo, weights)
    # the reference bound: the exact bound of the contract built (the weighted rate on a weighted row)
    out: dict = {"bound": float(sched.bound_algbw), "k": sched.k, "trees": {}, "msccl": {}, "mscclpp": {},
                 "baseline": {}, "notes": [], "shards": kind,
                 "equal_bound": float(optimal_bound(topo, collective).algbw) if weights is not None else None}
    with contextlib.redirect_stdout(io.StringIO()) as said:  # delivered.py prints the export's notes
        xml_sched, algo, why = written_by_generate(topo, sched)
    out["notes"] += said.getvalue().splitlines()
    out["weighted"] = weighted
    out["msccl_k"] = xml_sched.k if algo is not None else None
    out["msccl_why"] = why
    with tempfile.TemporaryDirectory() as tmp:
        try:
            psched, res = with_shards(  # the plan generate --format mscclpp writes, with the trees' shards
                lambda **shards: write_generated_plan(topo, collective, f"{tmp}/plan.json",
                                                      options=fabric_options(ExportOptions(), topo),
                                                      plan_rate=plan_rate(topo), **shards), weights, None)
            out["mscclpp_shards"] = shards_kind(topo, psched.shard_weights)
            plan, out["mscclpp_k"] = res.plan, psched.k
            out["notes"] += list(res.notes)
        except ExportError as exc:
            plan, out["mscclpp_k"], out["mscclpp_why"] = None, None, str(exc).split(":")[0]
    for size, label in SIZES:
        out["trees"][label] = simulate(net, sched, size=size).algbw_gbps
        out["msccl"][label] = simulate_msccl(algo, net, size).algbw_gbps if algo is not None else None
        out["mscclpp"][label] = simulate_plan(net, plan, size).algbw_gbps if plan is not None else None
        base = best_baseline(net, collective, size)
        out["baseline"][label] = (base.algbw_gbps, base.algorithm)
    out["mscclpp_cut16"] = None
    if plan is not None and out["mscclpp"]["16MiB"] < out["baseline"]["16MiB"][0]:  # what a plan cut for 16 MiB gets
        from dataclasses import replace

        from forestcoll.mscclpp.export import export_mscclpp
        from forestcoll.mscclpp.ports import executor_ports

        cut = replace(fabric_options(ExportOptions(), topo), layout=res.layout, design_size=16 << 20, check=False)
        plan16 = export_mscclpp(psched, executor_ports(topo).topology, cut).plan
        out["mscclpp_cut16"] = simulate_plan(net, plan16, 16 << 20).algbw_gbps
    out["cpu_s"] = time.process_time() - t0
    return out


def misses(m: dict) -> list[str]:
    """The targets ``m`` (one :func:`measure`) misses: an artefact below TARGET of the reference bound (``m["bound"]``,
    that of the shards built) at 1 GiB, or below the best baseline at 16 MiB."""
    found = []
    for art in ARTEFACTS:
        for _, size in SIZES:
            if low(m, art, size):
                found.append(f"{art} {size}" + (" < baseline" if size != "1GiB" else ""))
    return found


def low(m: dict, art: str, size: str) -> bool:
    """Whether ``art``'s rate at ``size`` misses its target (none written counts as a miss)."""
    rate = m[art][size]
    if rate is None:
        return True
    return rate < TARGET * m["bound"] if size == "1GiB" else rate < m["baseline"][size][0]


def above(m: dict) -> bool:
    """Whether a rate the table shows runs faster than the reference bound (more than 0.1 %: a ``^`` in the row): an
    artefact at some size, or the best baseline at 16 MiB.  That bound is for phases in sequence (reduce-scatter,
    then allgather) on the row's shards, which an allreduce that overlaps them, or splits the buffer otherwise, can
    beat."""
    rates = [m[art][size] for art in ARTEFACTS for _, size in SIZES] + [m["baseline"]["16MiB"][0]]
    return any(r is not None and _over(r, m["bound"]) for r in rates)


def baseline_above(m: dict) -> bool:
    """Whether the best baseline at 1 GiB, which the table does not show (it has no target there), runs faster than
    the reference bound: counted apart in the summary."""
    return _over(m["baseline"]["1GiB"][0], m["bound"])


def _over(rate: float, bound: float) -> bool:
    return rate > 1.001 * bound


def _cell(rate: float | None, bound: float, flag: bool) -> str:
    if rate is None:
        return "- !"
    return f"{rate:.1f} ({rate / bound:.2f})" + (" !" if flag else "") + (" ^" if _over(rate, bound) else "")


def row(seed: int, label: str, collective: str, m: dict) -> list[str]:
    """One table row (misses flagged with ``!``)."""
    bound = m["bound"]
    cells = [str(seed), label, collective, f"{bound:.1f}", str(m["k"])]
    for art in ARTEFACTS:
        for _, size in SIZES:
            cells.append(_cell(m[art][size], bound, low(m, art, size)))
    base, name = m["baseline"]["16MiB"]
    cut16 = m.get("mscclpp_cut16")
    cells += [f"{base:.1f} {name}" + (" ^" if _over(base, bound) else ""), f"{cut16:.1f} ({cut16 / bound:.2f})" if cut16 is not None else "", f"{m['msccl_k'] if m['msccl_k'] is not None else '-'}/"
              f"{m['mscclpp_k'] if m['mscclpp_k'] is not None else '-'}",
              shards_cell(m), f"{m['cpu_s']:.0f}"]
    return cells


def shards_cell(m: dict) -> str:
    """The allreduce row's shards: ``box, equal X`` or ``best, equal X`` (built with box weights or with the best
    weights; X the equal-shard bound), ``equal, box
    Y (r)`` (equal shards although boxes differ; Y the box-weighted rate, r of the reference bound), '' for equal boxes;
    a plan on other shards than the trees says so."""
    text = ""
    if m.get("shards") in ("box", "best"):
        text = f"{m['shards']}, equal {m['equal_bound']:.1f}"
    elif m.get("weighted"):
        text = f"equal, box {float(m['weighted']):.1f} ({float(m['weighted']) / m['bound']:.2f})"
    plan = m.get("mscclpp_shards")
    if plan is not None and plan != m.get("shards", "equal"):
        text += f"; MSCCL++ {plan}"
    return text


COLUMNS = ["seed", "fabric", "collective", "reference bound GB/s", "k", "trees 16MiB (of bound)", "trees 1GiB",
           "MSCCL 16MiB", "MSCCL 1GiB", "MSCCL++ 16MiB", "MSCCL++ 1GiB", "best baseline 16MiB",
           "MSCCL++ cut for 16MiB", "k MSCCL/MSCCL++",
           "allreduce shards, other bound", "CPU s"]


def parse_seeds(text: str) -> list[int]:
    """``0-23`` or ``1,5,9`` or a mix."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return seeds


def main() -> None:
    from rich.console import Console
    from tables import show

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-23", help="seeds: 0-23, 1,5,9 (default 0-23)")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma-separated (default allreduce,allgather)")
    ap.add_argument("--markdown", action="store_true", help="print markdown")
    ap.add_argument("--show", action="store_true", help="print each seed's fabric as YAML and stop")
    ap.add_argument("--save", metavar="DIR", help="also write each fabric to DIR/fabric-SEED.yaml")
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    if args.show or args.save:
        for seed in seeds:
            text = as_yaml(random_fabric(seed))
            if args.save:
                os.makedirs(args.save, exist_ok=True)
                Path(args.save, f"fabric-{seed}.yaml").write_text(text)
            if args.show:
                print(f"# seed {seed}: {describe(random_fabric(seed))}\n{text}")
        if args.show:
            return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load average {load:.2f}", flush=True)
    rows: list[list[str]] = []
    counted = missed = beaten = base_beaten = 0
    t_start, cpu_start = time.perf_counter(), time.process_time()
    for seed in seeds:
        doc = random_fabric(seed)
        topo = load_fabric(doc)
        label = f"{describe(doc)} ({topo.num_compute} GPUs)"
        for collective in args.collectives.split(","):
            m = measure(topo, collective)
            found = misses(m)
            counted += 1
            missed += bool(found)
            beaten += above(m)
            base_beaten += baseline_above(m)
            rows.append(row(seed, label, collective, m))
            print(" | ".join(rows[-1]) + (f"   MISS: {', '.join(found)}" if found else ""), flush=True)
    show(Console(), f"Fabric sweep: simulated algbw (default model) against the exact (reference) bound; ! = below {TARGET} "
         "of it at 1 GiB, or below the best baseline at 16 MiB; ^ = above it", COLUMNS, rows, args.markdown, 3)
    print("\n" + summary(counted, missed, beaten, base_beaten)
          + f" ({time.perf_counter() - t_start:.0f} s wall, {time.process_time() - cpu_start:.0f} s CPU)")


def summary(counted: int, missed: int, beaten: int, base_beaten: int) -> str:
    """The closing line: rows meeting every target, rows with a ``^`` (:func:`above`), and rows whose best baseline
    at 1 GiB, not in the table, runs above the bound (:func:`baseline_above`)."""
    return (f"{counted - missed} of {counted} (fabric, collective) meet every target; {missed} miss; {beaten} show "
            f"a rate above the bound (^); in {base_beaten} the best baseline at 1 GiB (no column) runs above it")


if __name__ == "__main__":
    main()
