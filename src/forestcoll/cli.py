"""The ``forestcoll`` command line: a thin layer over the library.

Every user error is printed as one line ``forestcoll: error: ...`` on stderr
with exit status 2; files are written whole (temporary file, then rename) or
not at all.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from forestcoll.errors import ForestCollError, UsageError
from forestcoll.fileio import dump_json

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see --help)")


def _approx(x: Fraction) -> str:
    return f"{float(x):.6g}"


def _describe_set(members: Sequence[str], universe: Sequence[str], limit: int = 6) -> str:
    inside = set(members)
    if len(inside) * 2 > len(universe):
        rest = [u for u in universe if u not in inside]
        shown = ", ".join(rest[:limit]) + (", ..." if len(rest) > limit else "")
        return f"every node except {{{shown}}}"
    shown = ", ".join(list(members)[:limit]) + (", ..." if len(members) > limit else "")
    return f"{{{shown}}} ({len(members)} nodes)"


# ----- commands ---------------------------------------------------------------------------------


def _cluster_options(args: argparse.Namespace) -> dict[str, str]:
    """--nodes / --fabric as spec options."""
    extra: dict[str, str] = {}
    if getattr(args, "nodes", None) is not None:
        if args.nodes < 1:
            raise UsageError(f"--nodes must be >= 1, got {args.nodes}")
        extra["nodes"] = str(args.nodes)
    if getattr(args, "fabric", None):
        extra["fabric"] = args.fabric
    return extra


def _topology(args: argparse.Namespace):
    from forestcoll.topology import load_topology

    return load_topology(args.topology, _cluster_options(args))



def cmd_bound(args: argparse.Namespace) -> int:
    from forestcoll.bound import optimal_bound
    from forestcoll.collectives import canonical as canonical_collective
    from forestcoll.rational import format_rational as fr

    topo = _topology(args)
    collective = canonical_collective(args.collective)
    sym = not args.no_symmetry
    ag = optimal_bound(topo, "allgather", symmetry=sym)
    main = ag if collective == "allgather" else optimal_bound(topo, collective, args.root, sym)
    ar = main if collective == "allreduce" else optimal_bound(topo, "allreduce", symmetry=sym)
    rs = main if collective == "reduce_scatter" else optimal_bound(topo, "reduce_scatter", symmetry=sym)
    fixed = None
    if args.k is not None:
        from forestcoll.bound import fixed_k_algbw

        fixed = fixed_k_algbw(topo, collective, args.k, args.root, sym)
    cut = ag.phases[0]
    data: dict[str, Any] = {
        "topology": topo.name,
        "compute_nodes": topo.num_compute,
        "switch_nodes": len(topo.switch_nodes),
        "collective": collective,
        "algbw_gbps": fr(main.algbw),
        "busbw_gbps": fr(main.busbw),
        "allgather_algbw_gbps": fr(ag.algbw),
        "reduce_scatter_algbw_gbps": fr(rs.algbw),
        "allreduce_algbw_gbps": fr(ar.algbw),
        "bottleneck_cut": list(cut.cut_nodes),
        "bottleneck_cut_bandwidth_gbps": fr(cut.cut_bandwidth),
        "bottleneck_cut_ranks": cut.cut_weight,
        "phases": [
            {
                "name": p.name,
                "rate_per_root_gbps": fr(p.rate),
                "bottleneck_cut": list(p.cut_nodes),
                "cut_bandwidth_gbps": fr(p.cut_bandwidth),
                "cut_roots": p.cut_weight,
                "reversed_links": p.reversed,
            }
            for p in main.phases
        ],
    }
    if main.root is not None:
        data["root"] = main.root
    if fixed is not None:
        data["k"] = args.k
        data["fixed_k_algbw_gbps"] = fr(fixed)
    if args.json:
        sys.stdout.write(dump_json(data))
        return 0
    names = [n.name for n in topo.nodes]
    print(f"topology        {topo.name}  ({topo.num_compute} compute, {len(topo.switch_nodes)} switch nodes)")
    print(f"collective      {collective}" + (f" (root {main.root})" if main.root else ""))
    print(f"optimal algbw   {fr(main.algbw)} GB/s  (~{_approx(main.algbw)})")
    print(f"busbw           {fr(main.busbw)} GB/s  (~{_approx(main.busbw)})")
    if collective != "allgather":
        print(f"allgather algbw {fr(ag.algbw)} GB/s  (~{_approx(ag.algbw)})")
    if fixed is not None:
        print(f"with k={args.k:<8}  {fr(fixed)} GB/s  (~{_approx(fixed)}, {_approx(fixed / main.algbw * 100)}% of optimal)")
    for p in main.phases:
        side = "into" if p.reversed else "out of"
        ranks = "rank" if p.cut_weight == 1 else "ranks"
        print(
            f"bottleneck      {p.name}: S = {_describe_set(p.cut_nodes, names)} holds {p.cut_weight} {ranks} "
            f"but has only {fr(p.cut_bandwidth)} GB/s of links {side} it"
        )
        if p.unbalanced:
            print(
                f"warning         switch {p.unbalanced[0]!r} can send more than it receives: trees may not reach "
                "this bound (generate tells)"
            )
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from forestcoll.fileio import atomic_write_text, dump_json
    from forestcoll.generate import generate
    from forestcoll.rational import format_rational as fr
    from forestcoll.schedule import schedule_to_dict

    if args.k is not None and args.k < 1:
        raise UsageError(f"--k must be >= 1, got {args.k}")
    if args.sizes:
        return _generate_by_size(args)
    if args.format == "msccl":
        if not args.output:
            raise UsageError("--format msccl needs -o FILE.xml")
        options = _export_options(args)
    topo = _topology(args)
    sched = generate(topo, args.collective, k=args.k, root=args.root, symmetry=not args.no_symmetry, max_k=args.max_k)
    if args.format == "msccl":
        print(f"schedule   {sched.collective} on {topo.name}, k={sched.k}, {len(sched.trees)} trees, "
              f"algbw {fr(sched.algbw)} GB/s (~{_approx(sched.algbw)}; {_approx(sched.algbw / sched.bound_algbw * 100)}% of the bound)")
        return _write_msccl(sched, options, args)
    text = dump_json(schedule_to_dict(sched))
    if args.output:
        atomic_write_text(args.output, text)
    if args.json:
        sys.stdout.write(text)
        return 0
    heights = [t.height() for t in sched.trees]
    print(f"topology   {topo.name}  ({topo.num_compute} ranks)")
    print(f"collective {sched.collective}" + (f" (root {sched.root})" if sched.root else ""))
    print(f"k          {sched.k} chunks per shard" + (" (smallest exactly optimal k)" if args.k is None else ""))
    print(f"trees      {len(sched.trees)}  (height max {max(heights)}, mean {sum(heights) / len(heights):.2f})")
    print(f"algbw      {fr(sched.algbw)} GB/s  (~{_approx(sched.algbw)})")
    print(f"optimal    {fr(sched.bound_algbw)} GB/s  ({_approx(sched.algbw / sched.bound_algbw * 100)}% of the bound)")
    print(f"time       {sched.stats['seconds']:.3f} s")
    if args.output:
        print(f"wrote      {args.output}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from forestcoll.rational import format_rational as fr
    from forestcoll.schedule import read_schedule
    from forestcoll.verify import verify

    sched = read_schedule(args.schedule)
    spec = args.topology or sched.topology
    if not spec:
        raise UsageError("the schedule names no topology; pass --topology")
    from forestcoll.topology import load_topology

    topo = load_topology(spec, _cluster_options(args))
    report = verify(sched, topo)
    if args.json:
        out = {
            "ok": report.ok,
            "errors": report.errors,
            "algbw_gbps": fr(report.algbw) if report.algbw is not None else None,
            "claimed_algbw_gbps": fr(report.claimed_algbw),
            "bound_algbw_gbps": fr(report.bound_algbw) if report.bound_algbw is not None else None,
            "efficiency": fr(report.efficiency) if report.efficiency is not None else None,
            "certified_optimal": report.certified_optimal,
            "phases": [
                {
                    "name": p.name,
                    "trees": p.trees,
                    "algbw_gbps": fr(p.algbw),
                    "cut_bound_algbw_gbps": fr(p.cut_algbw) if p.cut_algbw is not None else None,
                    "busiest_link": list(p.busiest_link) if p.busiest_link else None,
                }
                for p in report.phases
            ],
        }
        sys.stdout.write(dump_json(out))
    else:
        print(f"schedule   {args.schedule}: {sched.collective}, k={sched.k}, {len(sched.trees)} trees")
        print(f"topology   {topo.name}")
        for p in report.phases:
            link = f"{p.busiest_link[0]} -> {p.busiest_link[1]}" if p.busiest_link else "-"
            print(f"phase      {p.name}: {p.trees} trees, algbw {fr(p.algbw)} GB/s, busiest link {link}")
        if report.algbw is not None:
            print(f"algbw      {fr(report.algbw)} GB/s  (~{_approx(report.algbw)}; claimed {fr(report.claimed_algbw)})")
        if report.bound_algbw is not None and report.efficiency is not None:
            print(f"bound      {fr(report.bound_algbw)} GB/s  ({_approx(report.efficiency * 100)}% reached)")
        if report.certified_optimal:
            print("verdict    OK, optimal: the loads reach the bound of the schedule's own bottleneck cut")
        elif report.ok:
            print("verdict    OK")
        else:
            for err in report.errors[:20]:
                print(f"error      {err}")
            if len(report.errors) > 20:
                print(f"error      ... and {len(report.errors) - 20} more")
            print("verdict    INVALID")
    if not report.ok:
        print(f"forestcoll: error: {args.schedule}: {report.errors[0]}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _export_options(args: argparse.Namespace):
    from forestcoll.msccl.export import ExportOptions

    for flag in ("instances", "min_bytes", "max_bytes", "channels"):
        value = getattr(args, flag)
        if value is not None and value < (1 if flag in ("instances", "channels") else 0):
            raise UsageError(f"--{flag.replace('_', '-')} must be >= {1 if flag in ('instances', 'channels') else 0}, got {value}")
    opts = ExportOptions(
        proto=args.proto,
        instances=args.instances,
        inplace=args.mode in ("both", "in-place"),
        outofplace=args.mode in ("both", "out-of-place"),
        min_bytes=args.min_bytes,
        max_bytes=args.max_bytes,
        runtime=args.runtime,
        channels=args.channels,
        name=args.name,
    )
    opts.check()
    return opts


def _write_msccl(sched, options, args: argparse.Namespace) -> int:
    from forestcoll.fileio import atomic_write_text
    from forestcoll.msccl.export import export_msccl, self_check
    from forestcoll.msccl.ir import write_algo
    from forestcoll.msccl.lint import RUNTIMES

    result = export_msccl(sched, options)
    algo = result.algo
    checks = [] if args.no_check else self_check(result)
    atomic_write_text(args.output, write_algo(algo))
    if getattr(args, "json", False):
        out = result.to_dict()
        out["checked"] = not args.no_check
        out["output"] = args.output
        sys.stdout.write(dump_json(out))
        return 0
    modes = " + ".join(m for m, on in (("in-place", algo.inplace), ("out-of-place", algo.outofplace)) if on)
    size = f"{algo.min_bytes}..{algo.max_bytes or 'any'} bytes"
    print(f"algorithm  {algo.name}: {algo.coll}, {algo.ngpus} gpus, {algo.nchunksperloop} chunks per loop, "
          f"{algo.proto}, {modes}, {size}")
    print(f"layout     {result.channels} channel(s), {result.tbs_per_gpu} thread blocks per GPU (most), "
          f"{result.steps_per_tb} steps per thread block (most), {result.total_steps} steps in all")
    for name, lim in RUNTIMES.items():
        verdict = "fits" if result.fits(name) else "DOES NOT FIT"
        print(f"limits     {name}: {verdict} ({lim.steps_per_tb} steps/tb, {lim.tbs_per_gpu} tbs/GPU, {lim.channels} channels)")
    for line in checks:
        print(f"checked    {line}")
    for note in result.notes:
        print(f"note       {note}")
    print(f"wrote      {args.output}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from forestcoll.schedule import read_schedule

    options = _export_options(args)
    sched = read_schedule(args.schedule)
    print(f"schedule   {args.schedule}: {sched.collective}, k={sched.k}, {len(sched.trees)} trees, {len(sched.ranks)} ranks")
    return _write_msccl(sched, options, args)


def cmd_msccl_lint(args: argparse.Namespace) -> int:
    from forestcoll.msccl.ir import read_algo
    from forestcoll.msccl.lint import lint

    algo, text = read_algo(args.file)
    findings = lint(algo, text, args.runtime)
    errors = [f for f in findings if f.severity == "error"]
    if args.json:
        sys.stdout.write(dump_json({"file": args.file, "runtime": args.runtime, "ok": not errors,
                                    "findings": [{"line": f.line, "severity": f.severity, "message": f.message} for f in findings]}))
    else:
        for f in findings:
            print(f.format(args.file))
        print(f"{args.file}: {len(errors)} error(s), {len(findings) - len(errors)} warning(s) for {args.runtime}")
    if errors:
        print(f"forestcoll: error: {errors[0].format(args.file)}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def cmd_msccl_run(args: argparse.Namespace) -> int:
    from forestcoll.msccl.interpreter import run_modes
    from forestcoll.msccl.ir import read_algo

    algo, _text = read_algo(args.file)
    nbytes: int | str | None = "auto"
    if args.bytes is not None:
        nbytes = None if args.bytes == "unbounded" else _positive_int(args.bytes, "--bytes")
    results = run_modes(algo, None if args.mode == "declared" else args.mode, source=args.file, count=args.count,
                        dtype=args.dtype, op=args.op, iterations=args.iterations, slots=args.slots, nbytes=nbytes,
                        max_count=args.max_count, root=args.root, race_check=not args.no_race_check, seed=args.seed)
    if args.json:
        sys.stdout.write(dump_json({"file": args.file, "ok": all(r.ok for r in results), "runs": [r.to_dict() for r in results]}))
    else:
        tbs = max((len(g.tbs) for g in algo.gpus), default=0)
        print(f"file       {args.file}: {algo.coll}, {algo.ngpus} gpus, {algo.nchunksperloop} chunks per loop, {algo.proto}, "
              f"{algo.nchannels} channel(s), {tbs} thread blocks per GPU (most)")
        for r in results:
            regime = "unbounded size" if r.nbytes is None else f"a {r.nbytes}-byte call"
            print(f"run        {r.mode}: count {r.count} {r.dtype} {r.op}, {r.chunk_elems} elements per chunk, "
                  f"{r.iterations} iteration(s), {r.slots} slot(s) per connection, {r.max_count} chunk(s) per call "
                  f"({regime})")
            print(f"           {r.transmissions} transmissions, {r.calls} calls, {r.seconds:.2f} s")
            print(f"result     {r.summary()}")
            for s in r.stuck[:args.show]:
                print(f"stuck      {s.format()}")
            if len(r.stuck) > args.show:
                print(f"stuck      ... and {len(r.stuck) - args.show} more thread blocks")
            for e in r.errors[:args.show]:
                print(f"error      {e}")
            if len(r.errors) > args.show:
                print(f"error      ... and {len(r.errors) - args.show} more")
    bad = next((r for r in results if not r.ok), None)
    if bad is not None:
        what = f"deadlock: {bad.stuck[0].format()}" if bad.stuck else bad.errors[0]
        print(f"forestcoll: error: {args.file} ({bad.mode}): {what}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def _positive_int(text: str, flag: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{flag} expects a positive integer or 'unbounded', got {text!r}") from None
    if value < 1:
        raise UsageError(f"{flag} must be >= 1, got {value}")
    return value


# ----- simulation ------------------------------------------------------------------------------


def _sim_options(args: argparse.Namespace) -> dict[str, Any]:
    from forestcoll.units import parse_size

    slice_bytes = parse_size(args.slice)
    if args.max_slices < 1:
        raise UsageError(f"--max-slices must be >= 1, got {args.max_slices}")
    return {"fairness": args.fairness, "slice_bytes": slice_bytes, "max_slices": args.max_slices}


def _network(spec: str, args: argparse.Namespace):
    from forestcoll.simulate.network import build_network
    from forestcoll.topology import load_topology
    from forestcoll.units import parse_class_latencies

    topo = load_topology(spec, _cluster_options(args))
    return topo, build_network(topo, parse_class_latencies(getattr(args, "latency", None)))


def cmd_simulate(args: argparse.Namespace) -> int:
    from forestcoll.simulate import simulate
    from forestcoll.simulate.baselines import BASELINES
    from forestcoll.units import format_size, parse_size

    size = parse_size(args.size)
    opts = _sim_options(args)
    what = args.what
    if what in BASELINES:
        if not args.topology:
            raise UsageError(f"simulating {what} needs --topology")
        topo, net = _network(args.topology, args)
        res = simulate(net, what, args.collective, size, root=args.root, **opts)
    elif what.lower().endswith(".xml"):
        from forestcoll.msccl.ir import read_algo
        from forestcoll.simulate.msccl import msccl_collective, simulate_msccl

        if not args.topology:
            raise UsageError("simulating an MSCCL file needs --topology")
        algo, _text = read_algo(what)
        msccl_collective(algo, what)
        topo, net = _network(args.topology, args)
        res = simulate_msccl(algo, net, size, source=what, **opts)
    else:
        from forestcoll.schedule import read_schedule

        sched = read_schedule(what)
        spec = args.topology or sched.topology
        if not spec:
            raise UsageError("the schedule names no topology; pass --topology")
        topo, net = _network(spec, args)
        res = simulate(net, sched, size=size, **opts)
    if args.json:
        sys.stdout.write(dump_json(res.to_dict()))
        return 0
    print(f"algorithm  {res.algorithm}: {res.collective} on {topo.name} ({res.ranks} ranks)")
    print(f"size       {format_size(size)} ({size} bytes)")
    print(f"time       {res.time_s * 1e3:.4f} ms")
    print(f"algbw      {res.algbw_gbps:.2f} GB/s")
    print(f"busbw      {res.busbw_gbps:.2f} GB/s")
    print(f"model      {res.transfers} transfers, {res.events} events, {opts['fairness']} sharing, "
          f"slices of {format_size(opts['slice_bytes'])} (at most {opts['max_slices']} per block); {res.wall_s:.2f} s")
    return 0


def _schedules_for(topo, collective: str, root: str | None) -> dict:
    from forestcoll.generate import generate

    best = generate(topo, collective, root=root)
    out = {"forestcoll": best}
    if best.k != 1:
        out["forestcoll-k1"] = generate(topo, collective, k=1, root=root)
    return out


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from forestcoll.simulate.baselines import BASELINES
    from forestcoll.simulate.compare import compare, default_workers, plot_comparison
    from forestcoll.units import format_size, parse_sizes

    sizes = parse_sizes(args.sizes)
    opts = _sim_options(args)
    chosen = None
    if args.algorithms:
        chosen = [a.strip() for a in args.algorithms.split(",") if a.strip()]
        unknown = [a for a in chosen if a not in BASELINES and a not in ("forestcoll", "forestcoll-k1")]
        if unknown:
            raise UsageError(f"unknown algorithm {unknown[0]!r}; choose from forestcoll, forestcoll-k1, {', '.join(BASELINES)}")
    if args.output and os.path.splitext(args.output)[1].lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"{args.output}: the plot must be .png, .svg or .pdf")
    workers = args.jobs or default_workers()
    if workers < 1:
        raise UsageError(f"--jobs must be >= 1, got {workers}")
    topo, net = _network(args.topology, args)
    from forestcoll.collectives import canonical as canonical_collective

    collective = canonical_collective(args.collective)
    schedules = _schedules_for(topo, collective, args.root)
    if chosen is not None:
        schedules = {k: v for k, v in schedules.items() if k in chosen}
    base = [b for b in BASELINES if chosen is None or b in chosen]
    console = Console(stderr=True)
    total = len(sizes) * (len(schedules) + len(base))
    with console.status(f"simulating up to {total} runs ...") if not args.json else contextlib.nullcontext():
        comp = compare(topo, net, collective, sizes, schedules, base, root=args.root, workers=workers, **opts)
    if args.output:
        plot_comparison(comp, args.output)
    if args.json:
        out = comp.to_dict()
        if args.output:
            out["plot"] = args.output
        sys.stdout.write(dump_json(out))
        return 0
    print(f"{comp.collective} on {comp.topology} ({comp.ranks} ranks): simulated algbw in GB/s; "
          f"exact bound {float(comp.bound_algbw):.1f} GB/s; best in bold")
    table = Table()
    table.add_column("size")
    names = comp.algorithms()
    for name in names:
        table.add_column(name, justify="right")
    for size in comp.sizes():
        row = [format_size(size)]
        best = max((comp.get(n, size).algbw_gbps for n in names if comp.get(n, size)), default=0)
        for name in names:
            r = comp.get(name, size)
            cell = f"{r.algbw_gbps:.1f}" if r else "-"
            row.append(f"[bold]{cell}[/bold]" if r and r.algbw_gbps == best else cell)
        table.add_row(*row)
    Console(width=200).print(table)
    last = comp.sizes()[-1]
    for other in ("ring", "double-binary-tree"):
        sp = comp.speedup(last, other)
        if sp:
            print(f"forestcoll vs {other} at {format_size(last)}: {sp:.2f}x ({(sp - 1) * 100:+.0f}%)")
    if args.output:
        print(f"wrote {args.output}")
    return 0


def _generate_by_size(args: argparse.Namespace) -> int:
    """generate --sizes: the best schedule per size range, one MSCCL file per range."""
    from dataclasses import replace

    from forestcoll.collectives import canonical as canonical_collective
    from forestcoll.fileio import atomic_write_text
    from forestcoll.msccl.export import ExportError, export_msccl, self_check
    from forestcoll.msccl.ir import write_algo
    from forestcoll.simulate.compare import candidate_schedules, default_workers, select_schedules
    from forestcoll.units import format_size, parse_sizes

    if not args.output:
        raise UsageError("--sizes needs -o DIRECTORY for the MSCCL files")
    if args.k is not None:
        raise UsageError("--sizes chooses k itself; leave out --k")
    sizes = parse_sizes(args.sizes)
    base_opts = _export_options(args)
    os.makedirs(args.output, exist_ok=True)
    topo, net = _network(args.topology, args)
    collective = canonical_collective(args.collective)
    cands = candidate_schedules(topo, net, collective, args.root)
    sel = select_schedules(topo, net, collective, sizes, cands, workers=default_workers(), fairness=args.fairness)
    print(f"topology   {topo.name} ({topo.num_compute} ranks), {collective}; candidates: {', '.join(cands)}")
    for i, rng in enumerate(sel.ranges):
        opts = replace(base_opts, min_bytes=rng.min_bytes, max_bytes=rng.max_bytes,
                       name=f"{rng.name}_{collective}_{i}".replace("-", "_"))
        try:
            result = export_msccl(rng.schedule, opts)
        except ExportError as exc:
            print(f"range      {format_size(rng.min_bytes) if rng.min_bytes else '0'}..: {rng.name} cannot be exported ({exc})")
            continue
        if not args.no_check:
            self_check(result)
        upper = f"{rng.max_bytes}" if rng.max_bytes else "any"
        path = os.path.join(args.output, f"{collective}-{i:02d}-{rng.name}-{rng.min_bytes}-{upper}.xml")
        atomic_write_text(path, write_algo(result.algo))
        shown = ", ".join(f"{format_size(s)} {v:.1f}" for s, v in sorted(rng.measured.items()))
        print(f"range      {rng.min_bytes}..{upper} bytes: {rng.name} (k={rng.schedule.k}; GB/s at {shown})")
        for note in result.notes:
            print(f"note       {note}")
        print(f"wrote      {path}")
    return 0


def cmd_topo_export(args: argparse.Namespace) -> int:
    from forestcoll.fileio import atomic_write_text, dump_json
    from forestcoll.topology import topology_to_dict

    topo = _topology(args)
    text = dump_json(topology_to_dict(topo, symmetries=not args.no_symmetries))
    if args.output:
        atomic_write_text(args.output, text)
    if args.json or not args.output:
        sys.stdout.write(text)
    return 0


def cmd_topo_import(args: argparse.Namespace) -> int:
    """Import an NCCL/RCCL XML dump (or any topology) and write the plain JSON."""
    from forestcoll.fileio import atomic_write_text, dump_json
    from forestcoll.topology import topology_to_dict

    topo = _topology(args)
    text = dump_json(topology_to_dict(topo))
    if args.output:
        atomic_write_text(args.output, text)
    if args.json:
        sys.stdout.write(text)
        return 0
    _print_summary(topo)
    path = args.topology.split(":", 1)[0]
    if path.lower().endswith(".xml"):
        from forestcoll.rational import format_rational as fr
        from forestcoll.topology.nccl_xml import import_nccl_xml

        ports = import_nccl_xml(path).ports
        speeds = sorted({p.bandwidth for p in ports})
        cards = len({p.node for p in ports})
        each = ", ".join(f"{fr(b)} GB/s" for b in speeds)
        print(f"network      {len(ports)} port(s) on {cards} NIC(s) per box, {each} each")
    if args.output:
        print(f"wrote        {args.output}")
    return 0


def _print_summary(topo) -> None:
    from forestcoll.rational import format_rational as fr
    from forestcoll.topology.show import summarize

    s = summarize(topo)

    def span(pair):
        lo, hi = pair
        return f"{fr(lo)} GB/s" if lo == hi else f"{fr(lo)} to {fr(hi)} GB/s"

    boxes = f", {s.boxes} boxes" if s.boxes > 1 else ""
    print(f"topology     {s.name}")
    print(f"nodes        {s.compute} compute (ranks), {s.switches} switch{boxes}")
    print(f"per rank     in {span(s.rank_in)}, out {span(s.rank_out)}")
    for c in s.classes:
        kinds = ", ".join(fr(b) for b in c.bandwidths[:4]) + (", ..." if len(c.bandwidths) > 4 else "")
        print(f"links {c.name:<7} {c.count:>5} one-way links, {fr(c.total)} GB/s in all (each: {kinds} GB/s)")
    if s.symmetries:
        print(f"symmetries   {s.symmetries} declared generator(s)")


def cmd_topo_show(args: argparse.Namespace) -> int:
    from forestcoll.rational import format_rational as fr
    from forestcoll.topology.show import summarize

    topo = _topology(args)
    if args.json:
        s = summarize(topo)
        sys.stdout.write(dump_json({
            "topology": s.name,
            "compute_nodes": s.compute,
            "switch_nodes": s.switches,
            "boxes": s.boxes,
            "rank_in_gbps": [fr(x) for x in s.rank_in],
            "rank_out_gbps": [fr(x) for x in s.rank_out],
            "link_classes": [
                {"class": c.name, "links": c.count, "total_gbps": fr(c.total), "bandwidths_gbps": [fr(b) for b in c.bandwidths]}
                for c in s.classes
            ],
        }))
        return 0
    _print_summary(topo)
    return 0


def cmd_topo_draw(args: argparse.Namespace) -> int:
    from forestcoll.topology.draw import draw

    topo = _topology(args)
    cut: tuple[str, ...] = ()
    title = topo.name
    if args.cut:
        from forestcoll.bound import optimal_bound
        from forestcoll.rational import format_rational as fr

        bound = optimal_bound(topo, args.collective)
        phase = bound.phases[-1]
        cut = phase.cut_nodes
        title = (f"{topo.name}: {bound.collective} bound {fr(bound.algbw)} GB/s; cut S holds {phase.cut_weight} "
                 f"ranks with {fr(phase.cut_bandwidth)} GB/s {'in' if phase.reversed else 'out'}")
    draw(topo, args.output, cut, title)
    print(f"wrote {args.output}")
    return 0


def cmd_topo_list(args: argparse.Namespace) -> int:
    from forestcoll.topology import BUILTINS
    from forestcoll.topology.builtins import CLUSTER_PARAMS

    width = max(len(n) for n in BUILTINS) + 2
    for name, b in BUILTINS.items():
        print(f"{name:<{width}}{b.summary}")
        if args.options:
            for key, p in b.params.items():
                print(f"{'':<{width}}  {key}={_show_default(p.default)}  {p.help}")
    if not args.options:
        print(f"\nbox families also take {', '.join(CLUSTER_PARAMS)}; `forestcoll topo list --options` lists every option")
    return 0


def _show_default(value: object) -> str:
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    if isinstance(value, Fraction):
        from forestcoll.rational import format_rational

        return format_rational(value)
    return str(value)


# ----- parser ----------------------------------------------------------------------------------

TOPOLOGY_HELP = (
    "a built-in NAME[:key=value,...] (see `forestcoll topo list`), or a file (.json, .yaml, NCCL/RCCL .xml) "
    "optionally followed by :key=value,..."
)


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    from forestcoll.topology.cluster import FABRICS

    p.add_argument("--nodes", type=int, help="replicate the box N times (same as the spec option nodes=N)")
    p.add_argument("--fabric", choices=FABRICS, help="how boxes are joined (same as fabric=...)")


def _sim_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("simulation model")
    g.add_argument("--fairness", default="max-min", choices=("max-min", "link"),
                   help="max-min (default): weighted max-min sharing of links; link: per-link sharing, faster")
    g.add_argument("--slice", default="1MiB", help="pipeline slice size (default 1MiB)")
    g.add_argument("--max-slices", type=int, default=16, help="at most this many slices per block (default 16)")
    g.add_argument("--latency", help="link latency per class in microseconds, e.g. net=3,nvlink=0.5")


def _runtimes() -> tuple[str, ...]:
    from forestcoll.msccl.lint import RUNTIMES

    return tuple(RUNTIMES)


def _export_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("MSCCL export")
    g.add_argument("--proto", default="Simple", choices=("Simple", "LL", "LL128"), help="protocol (default Simple)")
    g.add_argument("--instances", type=int, default=1, help="copies of the algorithm on separate channels (default 1)")
    g.add_argument("--channels", type=int, help="channels per instance (default: the fewest within the step limit)")
    g.add_argument("--mode", choices=("both", "in-place", "out-of-place"), default="both",
                   help="calls the algorithm serves (default both)")
    g.add_argument("--min-bytes", type=int, default=0, help="smallest call size to use it for (default 0)")
    g.add_argument("--max-bytes", type=int, default=0, help="largest call size (default 0: no limit)")
    g.add_argument("--runtime", default="msccl-executor-nccl", choices=_runtimes(),
                   help="whose limits to keep to (default msccl-executor-nccl)")
    g.add_argument("--name", help="algorithm name in the file")
    g.add_argument("--no-check", action="store_true", help="skip running the file in the interpreter before writing it")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="forestcoll", description="Throughput-optimal collective schedules for any fabric.")
    parser.add_argument("--version", action="version", version="forestcoll 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("bound", help="exact optimal algbw and the bottleneck cut that proves it")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--collective", "-c", default="allgather", help="allgather (default), reduce_scatter, allreduce, broadcast, reduce")
    p.add_argument("--root", help="root rank name for broadcast / reduce (default: the first rank)")
    p.add_argument("--k", type=int, help="also report the best algbw with exactly K trees per root")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-symmetry", action="store_true", help="do not exploit automorphisms (slower; for checking)")
    p.set_defaults(func=cmd_bound)

    p = sub.add_parser("generate", help="generate a schedule of spanning trees")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--collective", "-c", default="allgather", help="allgather (default), reduce_scatter, allreduce, broadcast, reduce")
    p.add_argument("--k", type=int, help="exactly K trees (chunks) per root; default: the smallest exactly optimal k")
    p.add_argument("--root", help="root rank name for broadcast / reduce (default: the first rank)")
    p.add_argument("--max-k", type=int, default=100_000, help="refuse optimal schedules needing more than this k")
    p.add_argument("-o", "--output", help="write the schedule JSON (or, with --format msccl, the MSCCL XML) here")
    p.add_argument("--json", action="store_true", help="print the schedule JSON on stdout")
    p.add_argument("--no-symmetry", action="store_true", help="do not exploit automorphisms")
    p.add_argument("--format", choices=("json", "msccl"), default="json", help="json (default): schedule JSON; msccl: MSCCL XML")
    p.add_argument("--sizes", help="pick the fastest schedule (simulated) per size range, e.g. 1MiB..1GiB, and write one "
                                   "MSCCL file per range into the -o directory")
    p.add_argument("--fairness", default="max-min", choices=("max-min", "link"), help=argparse.SUPPRESS)
    _export_flags(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("simulate", help="simulated time, algbw and busbw of a schedule, an MSCCL file or a baseline")
    p.add_argument("what", help="schedule JSON, MSCCL .xml, or a baseline: ring, double-binary-tree, hierarchical, direct")
    p.add_argument("--topology", "-t", help=TOPOLOGY_HELP + " (default for a schedule: the one it names)")
    _cluster_flags(p)
    p.add_argument("--collective", "-c", default="allreduce", help="for baselines (default allreduce)")
    p.add_argument("--root", help="root rank for broadcast / reduce baselines")
    p.add_argument("--size", default="1GiB", help="call size, nccl-tests convention (default 1GiB)")
    _sim_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("compare", help="simulate forestcoll and the baselines over sizes: table and plot")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--collective", "-c", default="allreduce", help="allreduce (default), allgather, reduce_scatter, broadcast, reduce")
    p.add_argument("--root", help="root rank for broadcast / reduce")
    p.add_argument("--sizes", default="1MiB..1GiB", help="sizes: A..B (powers of two) or a comma list (default 1MiB..1GiB)")
    p.add_argument("--algorithms", help="comma list to keep (default: forestcoll, forestcoll-k1 and every baseline that applies)")
    p.add_argument("-o", "--output", help="write the plot here (.png, .svg or .pdf)")
    p.add_argument("--jobs", type=int, help="worker processes (default: cores, at most 4)")
    _sim_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("export", help="lower a schedule to an MSCCL algorithm XML (MSCCL-on-NCCL, RCCL)")
    p.add_argument("schedule", help="schedule JSON file (from `forestcoll generate`)")
    p.add_argument("--format", choices=("msccl",), default="msccl", help="output format (msccl)")
    p.add_argument("-o", "--output", required=True, help="the XML file to write")
    p.add_argument("--json", action="store_true", help="print the layout figures as JSON")
    _export_flags(p)
    p.set_defaults(func=cmd_export)

    ms = sub.add_parser("msccl", help="MSCCL algorithm files: run in the interpreter, lint")
    msub = ms.add_subparsers(dest="msccl_command", metavar="ACTION", parser_class=_Parser)
    msub.required = True
    p = msub.add_parser("run", help="execute an MSCCL XML file as the runtime would and check the result")
    p.add_argument("file", help="MSCCL algorithm XML")
    p.add_argument("--count", type=int, help="elements per rank in the call (default: the smallest that gives >= 4 per chunk)")
    p.add_argument("--dtype", default="float32", help="float16, float32 (default), float64, int8, int32, int64")
    p.add_argument("--op", default="sum", help="reduction: sum (default), prod, max, min")
    p.add_argument("--mode", choices=("declared", "in-place", "out-of-place"), default="declared",
                   help="buffer mode (default: every mode the file declares)")
    p.add_argument("--iterations", type=int, default=2, help="pipeline iterations at most (default 2)")
    p.add_argument("--slots", type=int, help="calls a connection buffers (default: 2 for Simple, 8 for LL / LL128; 1 is strictest)")
    p.add_argument("--bytes", help="size of the call whose regime to reproduce (default: the file's maxBytes, "
                                   "'unbounded' when it is 0)")
    p.add_argument("--max-count", type=int, help="chunks per primitive call (default: from --bytes)")
    p.add_argument("--root", type=int, help="root rank of broadcast / reduce (default: inferred from the file)")
    p.add_argument("--no-race-check", action="store_true", help="skip the data-race detector (faster)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input data")
    p.add_argument("--show", type=int, default=10, help="stuck thread blocks / errors to list (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_msccl_run)
    p = msub.add_parser("lint", help="check an MSCCL XML file against the runtime's parser rules and limits")
    p.add_argument("file", help="MSCCL algorithm XML")
    p.add_argument("--runtime", default="msccl-executor-nccl", choices=_runtimes(), help="whose limits (default msccl-executor-nccl)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_msccl_lint)

    p = sub.add_parser("verify", help="check a schedule against its topology, independently of the generator")
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument("--topology", "-t", help=TOPOLOGY_HELP + " (default: the one named in the schedule)")
    _cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_verify)

    topo = sub.add_parser("topo", help="topology tools")
    tsub = topo.add_subparsers(dest="topo_command", metavar="ACTION", parser_class=_Parser)
    tsub.required = True
    p = tsub.add_parser("export", help="write a topology as the plain nodes/links JSON")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print the JSON (the default when no -o is given)")
    p.add_argument("-o", "--output", help="write the JSON here")
    p.add_argument("--no-symmetries", action="store_true", help="leave out the declared automorphisms")
    p.set_defaults(func=cmd_topo_export)
    p = tsub.add_parser("import", help="import an NCCL/RCCL topology dump (NCCL_TOPO_DUMP_FILE); summary, JSON")
    p.add_argument("topology", help="an NCCL/RCCL topology .xml (or any topology argument)")
    _cluster_flags(p)
    p.add_argument("-o", "--output", help="write the topology JSON here")
    p.add_argument("--json", action="store_true", help="print the topology JSON instead of the summary")
    p.set_defaults(func=cmd_topo_import)
    p = tsub.add_parser("show", help="counts, per-rank bandwidth and links by class")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_topo_show)
    p = tsub.add_parser("draw", help="draw the fabric (png, svg or pdf), optionally with its bottleneck cut")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("-o", "--output", required=True, help="picture file: .png, .svg or .pdf")
    p.add_argument("--cut", action="store_true", help="highlight the bottleneck cut of the collective")
    p.add_argument("--collective", "-c", default="allgather", help="collective for --cut (default allgather)")
    p.set_defaults(func=cmd_topo_draw)
    p = tsub.add_parser("list", help="list the built-in topologies")
    p.add_argument("--options", action="store_true", help="also list every option with its default")
    p.set_defaults(func=cmd_topo_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``forestcoll`` console script."""
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except ForestCollError as exc:
        print(f"forestcoll: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("forestcoll: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: say so in one line unless asked for the traceback
        if os.environ.get("FORESTCOLL_DEBUG"):
            traceback.print_exc()
        print(f"forestcoll: internal error: {type(exc).__name__}: {exc} (set FORESTCOLL_DEBUG=1 for details)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
