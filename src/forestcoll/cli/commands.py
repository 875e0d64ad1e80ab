"""The ``forestcoll`` commands: each parses its flags, calls one library function and prints the result.

Flag checks that name a flag (``--nodes must be >= 1``) live here; everything
else is the library's (:mod:`forestcoll.bound`, :mod:`forestcoll.generate`,
:mod:`forestcoll.msccl`, :mod:`forestcoll.simulate`, :mod:`forestcoll.topology`),
whose results print through :mod:`.render` or, with ``--json``, as their
``to_dict()``.
"""

from __future__ import annotations

import argparse
import sys

from forestcoll.cli import render
from forestcoll.errors import UsageError

EXIT_USAGE = 2


# ----- flags -> library arguments --------------------------------------------------------------


def cluster_options(args: argparse.Namespace) -> dict[str, str]:
    """--nodes / --fabric as spec options."""
    extra: dict[str, str] = {}
    if getattr(args, "nodes", None) is not None:
        if args.nodes < 1:
            raise UsageError(f"--nodes must be >= 1, got {args.nodes}")
        extra["nodes"] = str(args.nodes)
    if getattr(args, "fabric", None):
        extra["fabric"] = args.fabric
    return extra


def topology(args: argparse.Namespace):
    from forestcoll.topology import load_topology

    return load_topology(args.topology, cluster_options(args))


def export_options(args: argparse.Namespace):
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
        layout=args.layout,
        name=args.name,
    )
    opts.check()
    return opts


def sim_options(args: argparse.Namespace) -> dict[str, object]:
    """--fairness / --slice / --max-slices as keyword arguments of the simulator."""
    from forestcoll.units import parse_size

    slice_bytes = parse_size(args.slice)
    if args.max_slices < 1:
        raise UsageError(f"--max-slices must be >= 1, got {args.max_slices}")
    return {"fairness": args.fairness, "slice_bytes": slice_bytes, "max_slices": args.max_slices}


def latency(args: argparse.Namespace) -> dict[str, float]:
    from forestcoll.units import parse_class_latencies

    return parse_class_latencies(getattr(args, "latency", None))


def positive_int(text: str, flag: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{flag} expects a positive integer or 'unbounded', got {text!r}") from None
    if value < 1:
        raise UsageError(f"{flag} must be >= 1, got {value}")
    return value


# ----- bound, generate, verify -----------------------------------------------------------------


def cmd_bound(args: argparse.Namespace) -> int:
    from forestcoll.bound.report import bound_report

    topo = topology(args)
    report = bound_report(topo, args.collective, args.root, args.k, not args.no_symmetry)
    if args.json:
        render.print_json(report)
    else:
        render.print_bound(report, topo)
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from forestcoll.generate import generate

    if args.k is not None and args.k < 1:
        raise UsageError(f"--k must be >= 1, got {args.k}")
    if args.max_height is not None and args.max_height < 1:
        raise UsageError(f"--max-height must be >= 1, got {args.max_height}")
    if args.sizes:
        return generate_by_size(args)
    if args.format == "msccl":
        if not args.output:
            raise UsageError("--format msccl needs -o FILE.xml")
        options = export_options(args)
    topo = topology(args)
    sched = generate(topo, args.collective, k=args.k, root=args.root, symmetry=not args.no_symmetry, max_k=args.max_k,
                     max_height=args.max_height)
    if args.format == "msccl":
        render.print_schedule_line(sched, topo)
        return write_msccl(sched, options, args)
    if args.output:
        from forestcoll.schedule import write_schedule

        write_schedule(sched, args.output)
    if args.json:
        render.print_json(sched)
        return 0
    render.print_schedule(sched, topo, args.k is None and sched.optimal, args.output)
    return 0


def generate_by_size(args: argparse.Namespace) -> int:
    """generate --sizes: the best schedule per size range, one MSCCL file per range."""
    from forestcoll.simulate.select import export_by_size
    from forestcoll.units import parse_sizes

    if not args.output:
        raise UsageError("--sizes needs -o DIRECTORY for the MSCCL files")
    if args.k is not None:
        raise UsageError("--sizes chooses k itself; leave out --k")
    sizes = parse_sizes(args.sizes)
    options = export_options(args)
    out = export_by_size(args.topology, args.collective, sizes, args.output, extra=cluster_options(args), root=args.root,
                         options=options, fairness=args.fairness, check=not args.no_check, latency_us=latency(args))
    render.print_size_export(out)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from forestcoll.schedule import read_schedule, schedule_topology
    from forestcoll.verify import verify

    sched = read_schedule(args.schedule)
    topo = schedule_topology(sched, args.topology, cluster_options(args))
    report = verify(sched, topo)
    if args.json:
        render.print_json(report)
    else:
        render.print_verify(report, sched, args.schedule, topo)
    if not report.ok:
        print(f"forestcoll: error: {args.schedule}: {report.message}", file=sys.stderr)
        return EXIT_USAGE
    return 0


# ----- MSCCL -----------------------------------------------------------------------------------


def write_msccl(sched, options, args: argparse.Namespace) -> int:
    from forestcoll.msccl.export import write_msccl as write

    result = write(sched, args.output, options, check=not args.no_check)
    if getattr(args, "json", False):
        render.print_json(result)
    else:
        render.print_export(result)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from forestcoll.schedule import read_schedule

    options = export_options(args)
    sched = read_schedule(args.schedule)
    print(f"schedule   {args.schedule}: {sched.collective}, k={sched.k}, {len(sched.trees)} trees, {len(sched.ranks)} ranks")
    return write_msccl(sched, options, args)


def cmd_msccl_lint(args: argparse.Namespace) -> int:
    from forestcoll.msccl.lint import lint_file

    report = lint_file(args.file, args.runtime)
    if args.json:
        render.print_json(report)
    else:
        render.print_lint(report)
    if not report.ok:
        print(f"forestcoll: error: {report.message}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def cmd_msccl_run(args: argparse.Namespace) -> int:
    from forestcoll.msccl.interpreter import run_file

    nbytes: int | str | None = "auto"
    if args.bytes is not None:
        nbytes = None if args.bytes == "unbounded" else positive_int(args.bytes, "--bytes")
    report = run_file(args.file, None if args.mode == "declared" else args.mode, count=args.count, dtype=args.dtype,
                      op=args.op, iterations=args.iterations, slots=args.slots, nbytes=nbytes, max_count=args.max_count,
                      root=args.root, race_check=not args.no_race_check, seed=args.seed)
    if args.json:
        render.print_json(report)
    else:
        render.print_runs(report, args.show)
    if not report.ok:
        print(f"forestcoll: error: {report.message}", file=sys.stderr)
        return EXIT_USAGE
    return 0


# ----- simulation ------------------------------------------------------------------------------


def cmd_simulate(args: argparse.Namespace) -> int:
    from forestcoll.simulate import simulate_spec
    from forestcoll.units import parse_size

    size = parse_size(args.size)
    opts = sim_options(args)
    net, res = simulate_spec(args.what, args.topology, extra=cluster_options(args), collective=args.collective,
                             root=args.root, size=size, latency_us=latency(args), **opts)
    if args.json:
        render.print_json(res)
    else:
        render.print_simulation(net, res, size, **opts)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.console import Console

    from forestcoll.simulate.compare import compare_topology, default_workers
    from forestcoll.units import parse_sizes

    sizes = parse_sizes(args.sizes)
    opts = sim_options(args)
    chosen = [a.strip() for a in args.algorithms.split(",") if a.strip()] if args.algorithms else None
    workers = args.jobs or default_workers()
    if workers < 1:
        raise UsageError(f"--jobs must be >= 1, got {workers}")
    status = None if args.json else Console(stderr=True).status
    comp = compare_topology(args.topology, args.collective, sizes, extra=cluster_options(args), algorithms=chosen,
                            root=args.root, latency_us=latency(args), workers=workers, plot=args.output, status=status,
                            **opts)
    if args.json:
        render.print_json(comp)
    else:
        render.print_comparison(comp)
    return 0


# ----- topologies ------------------------------------------------------------------------------


def cmd_topo_export(args: argparse.Namespace) -> int:
    from forestcoll.fileio import dump_json
    from forestcoll.topology import topology_to_dict, write_topology

    topo = topology(args)
    if args.output:
        text = write_topology(topo, args.output, symmetries=not args.no_symmetries)
    else:
        text = dump_json(topology_to_dict(topo, symmetries=not args.no_symmetries))
    if args.json or not args.output:
        sys.stdout.write(text)
    return 0


def cmd_topo_import(args: argparse.Namespace) -> int:
    """Import an NCCL/RCCL XML dump (or any topology) and write the plain JSON."""
    from forestcoll.fileio import dump_json
    from forestcoll.topology import import_topology, topology_to_dict, write_topology
    from forestcoll.topology.show import summarize

    imported = import_topology(args.topology, cluster_options(args))
    topo = imported.topology
    text = write_topology(topo, args.output) if args.output else dump_json(topology_to_dict(topo))
    if args.json:
        sys.stdout.write(text)
        return 0
    render.print_summary(summarize(topo, imported.ports))
    if args.output:
        print(f"wrote        {args.output}")
    return 0


def cmd_topo_show(args: argparse.Namespace) -> int:
    from forestcoll.topology.show import summarize

    summary = summarize(topology(args))
    if args.json:
        render.print_json(summary)
    else:
        render.print_summary(summary)
    return 0


def cmd_topo_draw(args: argparse.Namespace) -> int:
    from forestcoll.topology.draw import draw

    topo = topology(args)
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
    render.print_builtins(args.options)
    return 0
