"""The ``forestcoll`` commands: each parses its flags, calls one library function and prints the result.

Flag checks that name a flag (``--nodes must be >= 1``) live here; everything
else is the library's (:mod:`forestcoll.bound`, :mod:`forestcoll.generate`,
:mod:`forestcoll.msccl`, :mod:`forestcoll.simulate`, :mod:`forestcoll.topology`),
whose results print through :mod:`.render` or, with ``--json``, as their
``to_dict()``.
"""

from __future__ import annotations

import argparse
import os
import sys

from forestcoll.cli import render
from forestcoll.cli.fabric import fabric_options
from forestcoll.cli.generate_flags import refuse_root
from forestcoll.cli.progress import progress_for
from forestcoll.collectives import ALLTOALL
from forestcoll.errors import ForestCollError, UsageError
from forestcoll.limits import MAX_JOBS, check_count

EXIT_USAGE = 2


# ----- flags -> library arguments --------------------------------------------------------------


def cluster_options(args: argparse.Namespace) -> dict[str, str]:
    """--nodes / --fabric / --bond-nic-ports as spec options."""
    extra: dict[str, str] = {}
    if getattr(args, "nodes", None) is not None:
        if args.nodes < 1:
            raise UsageError(f"--nodes must be >= 1, got {args.nodes}")
        extra["nodes"] = str(args.nodes)
    if getattr(args, "fabric", None):
        extra["fabric"] = args.fabric
    if getattr(args, "bond_nic_ports", False):
        from forestcoll.topology.spec import split_file_spec

        found = split_file_spec(args.topology) if isinstance(getattr(args, "topology", None), str) else ("x.xml",)
        if found is None or not found[0].lower().endswith(".xml"):
            raise UsageError(f"--bond-nic-ports applies to NCCL/RCCL topology dumps (.xml); {args.topology} is not one")
        extra["bond_nic_ports"] = "1"
    return extra


def check_output(args: argparse.Namespace, *inputs: str | None) -> None:
    """Refuse a bad ``-o`` (a directory, an unwritable place, one of the command's inputs) before any work."""
    from forestcoll.fileio import check_output as check
    from forestcoll.topology.spec import split_file_spec

    if not getattr(args, "output", None):
        return
    paths = list(inputs)
    spec = getattr(args, "topology", None)
    if isinstance(spec, str):
        found = split_file_spec(spec)
        paths.append(found[0] if found else None)
    check(args.output, tuple(paths))


def topology(args: argparse.Namespace):
    from forestcoll.topology import import_topology

    imported = import_topology(args.topology, cluster_options(args))
    warn(imported.warnings, imported.notes)
    return imported.topology


def file_topology(args: argparse.Namespace) -> tuple[object, dict[str, str] | None]:
    """(topology, cluster options) for the commands that build the fabric inside the library (simulate, compare): a
    topology file named on the command line is imported here, once, its warnings and notes printed as ``topology``
    prints them (the library would drop them), and handed on as the Imported (with its options already applied);
    else ``args.topology`` and the cluster options as they are."""
    from forestcoll.topology import import_topology
    from forestcoll.topology.spec import split_file_spec

    spec = getattr(args, "topology", None)
    if not isinstance(spec, str) or split_file_spec(spec) is None:
        return spec, cluster_options(args)
    imported = import_topology(spec, cluster_options(args))
    warn(imported.warnings, imported.notes)
    return imported, None


def warn(warnings, notes=()) -> None:
    """An importer's doubts about a file and what its options did, one line each on stderr (the command runs)."""
    for w in warnings:
        print(f"forestcoll: warning: {w}", file=sys.stderr)
    for n in notes:
        print(f"forestcoll: note: {n}", file=sys.stderr)


def _size_flag(text: str | None, flag: str, zero: bool = False) -> int | None:
    """A size flag (``4096``, ``1MiB``); ``zero`` lets "0" through."""
    from forestcoll.units import parse_size

    if text is None:
        return None
    if zero and str(text).strip() == "0":
        return 0
    try:
        return parse_size(text)
    except UsageError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _refuse(args: argparse.Namespace, flags: tuple[str, ...], fmt: str) -> None:
    for flag in flags:
        if getattr(args, flag, None) is not None:
            raise UsageError(f"--{flag.replace('_', '-')} applies to --format {fmt} only")


def _layout_for(args: argparse.Namespace, fmt: str, choices: tuple[str, ...]) -> None:
    """``--layout`` names layouts of both formats; refuse one the chosen format does not have."""
    if args.layout is not None and args.layout not in choices:
        raise UsageError(f"--layout {args.layout} applies to --format {'mscclpp' if fmt == 'msccl' else 'msccl'}; "
                         f"--format {fmt} takes {' or '.join(choices)}")


def export_options(args: argparse.Namespace):
    """The MSCCL XML export flags as :class:`forestcoll.msccl.export.ExportOptions`."""
    from forestcoll.msccl.export import ExportOptions

    _refuse(args, ("design_size", "max_threadblocks"), "mscclpp")
    _layout_for(args, "msccl", ("stage", "tree"))
    for flag in ("instances", "channels"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag} must be >= 1, got {value}")
    mode = args.mode or "both"
    opts = ExportOptions(
        proto=args.proto or "Simple",
        instances=args.instances or 1,
        inplace=mode in ("both", "in-place"),
        outofplace=mode in ("both", "out-of-place"),
        min_bytes=_size_flag("0" if args.min_bytes is None else args.min_bytes, "--min-bytes", zero=True),
        max_bytes=_size_flag(args.max_bytes, "--max-bytes", zero=True) or 0,
        runtime=args.runtime or "msccl-executor-nccl",  # or the fabric's GPU's (msccl/fabric.py)
        channels=args.channels, split=1 if args.split is None else args.split,
        layout=args.layout or "stage", name=args.name,
    )
    opts.check()
    return opts


def mscclpp_options(args: argparse.Namespace):
    """The MSCCL++ export flags as :class:`forestcoll.mscclpp.export.ExportOptions`."""
    from forestcoll.mscclpp.export import ExportOptions

    _refuse(args, ("instances", "channels", "runtime", "split"), "msccl")
    _layout_for(args, "mscclpp", ("auto", "edge", "shared", "mixed", "source", "level"))
    if args.proto == "LL128":
        raise UsageError("--proto LL128 is an MSCCL protocol; MSCCL++ plans are Simple or LL")
    if args.mode == "both":
        raise UsageError("an MSCCL++ plan serves one buffer mode: --mode in-place or --mode out-of-place "
                         "(export one plan per mode)")
    if args.max_threadblocks is not None and args.max_threadblocks < 1:
        raise UsageError(f"--max-threadblocks must be >= 1, got {args.max_threadblocks}")
    opts = ExportOptions(
        protocol=args.proto or "Simple",
        inplace=(args.mode or "in-place") == "in-place",
        min_message_size=_size_flag("0" if args.min_bytes is None else args.min_bytes, "--min-bytes", zero=True),
        max_message_size=_size_flag(args.max_bytes, "--max-bytes"),
        design_size=_size_flag(args.design_size, "--design-size"),
        name=args.name, check=not args.no_check,
        layout=args.layout or "auto", max_threadblocks=args.max_threadblocks or 104,  # or the fabric's GPU's
    )
    opts.validate()
    return opts


def export_format(args: argparse.Namespace) -> str:
    """--format, or the -o file's extension (.json: an MSCCL++ plan, .xml: MSCCL XML)."""
    if args.format:
        return args.format
    ext = os.path.splitext(str(args.output))[1].lower()  # str: -o - is a fileio.Stream
    if ext not in (".json", ".xml"):
        raise UsageError(f"cannot tell the format from {str(args.output)!r}: add --format mscclpp (a plan, .json) or "
                         "--format msccl (MSCCL XML, .xml)")
    return "mscclpp" if ext == ".json" else "msccl"


def sim_options(args: argparse.Namespace) -> dict[str, object]:
    """--fairness / --slice / --max-slices as keyword arguments of the simulator."""
    from forestcoll.units import parse_size

    slice_bytes = parse_size(args.slice)
    if args.max_slices is not None and args.max_slices < 1:
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


def flow_collective(args: argparse.Namespace) -> bool:
    """True when --collective names a collective without trees (all-to-all): its own library calls."""
    from forestcoll import collectives

    return not collectives.get(args.collective).tree_based


def refuse_flags(args: argparse.Namespace, *flags: str) -> None:
    """All-to-all has no root, and its --k means chunks per pair only where it is asked for."""
    for flag in flags:
        if getattr(args, flag, None) is not None:
            hint = " (generate --collective alltoall --k K rounds the schedule to K chunks per pair)" if flag == "k" else ""
            raise UsageError(f"--{flag} does not apply to alltoall{hint}")


def cmd_bound(args: argparse.Namespace) -> int:
    from forestcoll.bound.cluster import cluster_for_bound
    from forestcoll.bound.report import bound_report

    if flow_collective(args):
        return bound_alltoall(args)
    refuse_root(args)
    if args.k is not None and args.k < 1:
        raise UsageError(f"--k must be >= 1, got {args.k}")
    topo = cluster_for_bound(args.topology, cluster_options(args), args.collective, args.k, not args.no_symmetry) or topology(args)
    with progress_for(args) as progress:
        report = bound_report(topo, args.collective, args.root, args.k, not args.no_symmetry, progress=progress)
    if args.k is not None:
        from dataclasses import replace

        from forestcoll.generate import fixed_k_reach
        from forestcoll.rational import format_rational as fr

        try:
            reached, switch = fixed_k_reach(topo, args.collective, args.k, args.root, not args.no_symmetry)
        except ForestCollError as exc:
            report = replace(report, fixed_k_warning=f"not achievable: generate --k {args.k} finds no schedule ({exc})")
        else:
            if switch is not None and reached < report.fixed_k_algbw:
                report = replace(report, fixed_k_reached=reached, fixed_k_warning=(
                    f"not achievable with trees: with k={args.k} switch {switch!r} could send more than it receives "
                    f"and a switch cannot copy; forestcoll's k={args.k} trees reach at least {fr(reached)} GB/s "
                    f"(generate --k {args.k} gives the exact figure)"))
    if args.json:
        render.print_json(report)
    else:
        render.print_bound(report, topo)
    return 0


def bound_alltoall(args: argparse.Namespace) -> int:
    from forestcoll.alltoall.bound import alltoall_bound

    refuse_flags(args, "root", "k")
    topo = topology(args)
    bound = alltoall_bound(topo, symmetry=not args.no_symmetry)
    if not bound.ok:
        raise UsageError(bound.message)
    if args.json:
        render.print_json(bound)
    else:
        render.print_alltoall_bound(bound, topo)
    return 0


def with_source(sched, args: argparse.Namespace):
    """The schedule with its topology record pointing at what the user named: a file by its absolute path (so
    the schedule verifies from any directory), with --nodes / --fabric merged into the spec."""
    from dataclasses import replace

    from forestcoll.topology import resolve_spec

    if sched.record is None:
        return sched
    spec, path = resolve_spec(args.topology, cluster_options(args))
    return replace(sched, record=replace(sched.record, spec=spec, path=path))


def cmd_generate(args: argparse.Namespace) -> int:
    from forestcoll.cli.generate_flags import check_generate_flags
    from forestcoll.cli.shards import choose_shard_weights, generate_with_shards, with_shards

    check_generate_flags(args)
    if args.k is not None and args.k < 1:
        raise UsageError(f"--k must be >= 1, got {args.k}")
    if args.max_k < 1:
        raise UsageError(f"--max-k must be >= 1, got {args.max_k}")
    if isinstance(args.max_height, int) and args.max_height < 1:
        raise UsageError(f"--max-height must be >= 1, got {args.max_height}")
    if flow_collective(args):
        return generate_alltoall(args)
    if args.sizes is not None:
        return generate_by_size(args)
    if args.candidates is not None:
        raise UsageError("--candidates chooses what --sizes simulates; give --sizes too")
    check_output(args)
    args.format = args.format or "json"
    if args.format in ("msccl", "mscclpp"):
        if not args.output:
            raise UsageError(f"--format {args.format} needs -o FILE.{'xml' if args.format == 'msccl' else 'json'}")
        options = export_options(args) if args.format == "msccl" else mscclpp_options(args)
    topo = topology(args)
    options = fabric_options(options, topo, args) if args.format in ("msccl", "mscclpp") else None
    weights = choose_shard_weights(topo, args.collective, args.shards, args.format)  # None: equal (cli/shards.py)
    if args.format == "mscclpp":
        from forestcoll.mscclpp.export import write_generated_plan
        from forestcoll.simulate.mscclpp import plan_rate

        with progress_for(args) as progress:
            sched, result = with_shards(
                lambda **shards: write_generated_plan(topo, args.collective, args.output, k=args.k, root=args.root,
                                                      symmetry=not args.no_symmetry, max_k=args.max_k, options=options,
                                                      plan_rate=plan_rate(topo), progress=progress, **shards),
                weights, args.shards)
        if args.json:
            render.print_json(result)
            return 0
        render.print_schedule_line(sched, topo)
        render.print_mscclpp_export(result)
        return 0
    with progress_for(args) as progress:
        sched = generate_with_shards(topo, args.collective, weights, args.shards, k=args.k, root=args.root,
                                     symmetry=not args.no_symmetry, max_k=args.max_k, max_height=args.max_height,
                                     progress=progress)
    weights = sched.shard_weights  # auto: equal where the weighted optimum has no tree schedule
    sched = with_source(sched, args)
    if args.format == "msccl":
        if args.k is None and args.max_height is None:  # over the runtime's limits: the fastest k that fits, said
            from forestcoll.msccl.buffer import generated_writer
            from forestcoll.simulate.msccl import file_rate
            # ranked by the files' simulated rate at 1 GiB (the layout decides: H100 x4 rail k=4 209 GB/s, k=256 144)
            with progress_for(args) as progress:  # --buffsize: ranked with that runtime buffer (msccl/buffer.py)
                sched, result = generated_writer(args.buffsize, args.slice_cost, file_rate)(
                    topo, sched, args.output, options, check=not args.no_check, progress=progress, file_rate=file_rate(topo),
                    root=args.root, symmetry=not args.no_symmetry, max_k=args.max_k, split=args.split is None,
                    **({"shard_weights": weights} if weights is not None else {}))
            sched = with_source(sched, args)
            render.print_schedule_line(sched, topo)
            if getattr(args, "json", False):
                render.print_json(result)
            else:
                render.print_export(result)
            return 0
        render.print_schedule_line(sched, topo)
        return write_msccl(sched, options, args)
    if args.output:
        from forestcoll.schedule import write_schedule

        write_schedule(sched, args.output, args.schedule_format)
    if args.json:
        render.print_json(sched)
        return 0
    render.print_schedule(sched, topo, args.k is None and sched.optimal, args.output)
    return 0


def generate_alltoall(args: argparse.Namespace) -> int:
    """generate --collective alltoall: the optimal flow's paths, as schedule JSON or MSCCL XML."""
    from forestcoll.alltoall.generate import generate_alltoall as generate
    from forestcoll.simulate.alltoall_ports import generate_for_executor

    refuse_flags(args, "root", "split", "shards")
    if args.sizes is not None:
        raise UsageError("--sizes chooses among tree schedules; an alltoall schedule serves every size "
                         "(generate it with --format msccl)")
    if args.format == "msccl":
        if not args.output:
            raise UsageError("--format msccl needs -o FILE.xml")
        options = export_options(args)
    if args.format == "mscclpp":
        if not args.output:
            raise UsageError("--format mscclpp needs -o FILE.json")
        args.mode = args.mode or "out-of-place"
        options = mscclpp_options(args)
    topo = topology(args)
    options = fabric_options(options, topo, args) if args.format in ("msccl", "mscclpp") else None
    kw = {"chunks": args.k if args.k is not None else "auto", "symmetry": not args.no_symmetry}
    made = generate_for_executor(topo, options, **kw) if args.format == "mscclpp" else generate(topo, **kw)  # type: ignore[arg-type]
    if not made.ok or made.schedule is None:
        raise UsageError(made.message)
    sched = made.schedule
    if args.format in ("msccl", "mscclpp"):
        print(f"schedule   {made.message}")
        return write_msccl(sched, options, args) if args.format == "msccl" else write_mscclpp(sched, topo, options, args)
    if args.output:
        from forestcoll.schedule import write_schedule

        write_schedule(sched, args.output)
    if args.json:
        render.print_json(sched)
        return 0
    render.print_alltoall_schedule(made, topo, args.output)
    return 0


def generate_by_size(args: argparse.Namespace) -> int:
    """generate --sizes: the best schedule per size range, one MSCCL++ plan (or MSCCL file) per range."""
    from forestcoll.cli.shards import choose_shard_weights, with_shards
    from forestcoll.fileio import earlier_files, output_directory
    from forestcoll.simulate.select import export_by_size
    from forestcoll.units import parse_sizes

    if args.format == "json":
        raise UsageError("--sizes writes a file per size range: --format mscclpp (plans) or --format msccl (XML)")
    args.format = args.format or "msccl"  # what --sizes wrote before MSCCL++ plans existed
    if not args.output:
        raise UsageError(f"--sizes needs -o DIRECTORY for the {'plans' if args.format == 'mscclpp' else 'MSCCL files'}")
    if args.k is not None:
        raise UsageError("--sizes chooses k itself; leave out --k")
    if args.output.lower().endswith((".json", ".xml", ".yaml", ".yml")) and not os.path.isdir(args.output):
        raise UsageError(f"--sizes writes one file per size range into the directory -o names; {args.output!r} looks "
                         f"like a file name: give a directory, e.g. -o {os.path.splitext(args.output)[0] or 'out'}/")
    sizes = parse_sizes(args.sizes)
    workers = None if args.jobs is None else check_count(args.jobs, "--jobs", MAX_JOBS, lo=1)
    if args.format == "mscclpp":
        if args.design_size is not None:
            raise UsageError("--sizes cuts every plan for the sizes of its range; leave out --design-size")
        if args.proto not in (None, "Simple"):
            raise UsageError("--sizes picks Simple or LL per size range; leave out --proto")
    topo = topology(args)  # once: its GPU sets the options, and the selection runs on it
    weights = choose_shard_weights(topo, args.collective, args.shards, "sizes")  # auto: beside equal shards, per size
    options = fabric_options(export_options(args) if args.format == "msccl" else mscclpp_options(args), topo, args)
    with progress_for(args) as progress, output_directory(args.output):  # all the range files, or none
        out = with_shards(lambda **shards: export_by_size(
            topo, args.collective, sizes, args.output, root=args.root, options=options, fairness=args.fairness,
            check=not args.no_check, latency_us=latency(args), format=args.format, progress=progress,
            candidates=args.candidates or "default", workers=workers, equal_shards=args.shards != "box", **shards),
            weights, args.shards)
    render.print_size_export(out)
    earlier = earlier_files(args.output, [r.path for r in out.ranges if r.path])
    if earlier:  # the runtime loads every file of the folder and picks by size: overlapping ranges
        print(f"note       {args.output} also holds {len(earlier)} file(s) of an earlier run for {out.collective} "
              f"({', '.join(earlier[:3])}{', ...' if len(earlier) > 3 else ''}): the runtime loads every file there; "
              "remove them or write into an empty directory")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from forestcoll.schedule import read_schedule, schedule_topology
    from forestcoll.verify import verify

    sched = read_schedule(args.schedule, expand=False)  # a version-2 file is checked orbit by orbit
    topo = schedule_topology(sched, args.topology, cluster_options(args))
    if sched.collective == ALLTOALL.name:
        from forestcoll.alltoall.verify import verify_alltoall

        report = verify_alltoall(sched, topo)
    else:
        with progress_for(args) as progress:
            report = verify(sched, topo, progress=progress)
    if args.json:
        render.print_json(report)
    elif sched.collective == ALLTOALL.name:
        render.print_alltoall_verify(report, sched, args.schedule, topo)
    else:
        if sched.record is None and not args.topology:
            print(f"note       {args.schedule} records no topology fingerprint (written before forestcoll kept one): "
                  f"checked against {sched.topology!r} by name")
        render.print_verify(report, sched, args.schedule, topo)
    if not report.ok:
        print(f"forestcoll: error: {args.schedule}: {report.message}", file=sys.stderr)
        return EXIT_USAGE
    return 0


# ----- MSCCL -----------------------------------------------------------------------------------


def write_msccl(sched, options, args: argparse.Namespace) -> int:
    from forestcoll.msccl.export import write_msccl as write

    with progress_for(args) as progress:
        result = write(sched, args.output, options, check=not args.no_check, progress=progress)
    if getattr(args, "json", False):
        render.print_json(result)
    else:
        render.print_export(result)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from forestcoll.schedule import read_schedule

    check_output(args, args.schedule, args.topology)
    fmt = export_format(args)
    if fmt == "msccl" and args.topology:
        raise UsageError("--topology applies to --format mscclpp only (an MSCCL file does not depend on it)")
    sched = read_schedule(args.schedule)
    if fmt == "mscclpp" and sched.collective == ALLTOALL.name:
        args.mode = args.mode or "out-of-place"  # an all-to-all runs out of place only
    options = export_options(args) if fmt == "msccl" else mscclpp_options(args)
    parts = f"{len(sched.flows)} flows" if sched.collective == ALLTOALL.name else f"{len(sched.trees)} trees"
    print(f"schedule   {args.schedule}: {sched.collective}, k={sched.k}, {parts}, {len(sched.ranks)} ranks")
    if fmt == "mscclpp":
        return write_mscclpp(sched, args.topology, options, args)
    return write_msccl(sched, options, args)


# ----- MSCCL++ ---------------------------------------------------------------------------------


def write_mscclpp(sched, topo, options, args: argparse.Namespace) -> int:
    from forestcoll.mscclpp.export import write_mscclpp as write

    if sched.collective == ALLTOALL.name:
        from forestcoll.alltoall.mscclpp import write_alltoall_mscclpp as write
    with progress_for(args) as progress:
        counted = {} if sched.collective == ALLTOALL.name else {"progress": progress}  # all-to-all reports nothing yet
        result = write(sched, args.output, topo, options, **counted)
    if getattr(args, "json", False):
        render.print_json(result)
    else:
        render.print_mscclpp_export(result)
    return 0


def cmd_mscclpp_run(args: argparse.Namespace) -> int:
    from forestcoll.mscclpp.interpreter import run_file

    if args.launches < 1:
        raise UsageError(f"--launches must be >= 1, got {args.launches}")
    if args.show < 0:
        raise UsageError(f"--show must be >= 0, got {args.show}")
    with progress_for(args) as progress:
        result = run_file(args.plan, size=_size_flag(args.size, "--size"),
                          mode=None if args.mode == "declared" else args.mode, dtype=args.dtype, launches=args.launches,
                          race_check=not args.no_race_check, packet=args.packet, seed=args.seed, root=args.root,
                          progress=progress)
    if args.json:
        render.print_json(result)
    else:
        render.print_mscclpp_run(result, args.show if args.verbose else 0)
    if not result.ok:
        print(f"forestcoll: error: {args.plan}: {result.message}", file=sys.stderr)
        return EXIT_USAGE
    return 0


def cmd_mscclpp_lint(args: argparse.Namespace) -> int:
    from forestcoll.mscclpp.lint import lint_file

    for flag in ("ranks_per_node", "max_threadblocks"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    report = lint_file(args.plan, _size_flag(args.size, "--size"), args.ranks_per_node, args.max_threadblocks)
    if args.json:
        render.print_json(report)
    else:
        render.print_mscclpp_lint(report)
    if not report.ok:
        print(f"forestcoll: error: {report.message}", file=sys.stderr)
        return EXIT_USAGE
    return 0


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

    if args.show < 0:
        raise UsageError(f"--show must be >= 0, got {args.show}")
    if args.count is not None and args.count < 1:  # was "count -5 does not split into 8 equal chunks"
        raise UsageError(f"--count must be >= 1, got {args.count}")

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
        if isinstance(nbytes, int):  # the regime of an N-byte call: say when the runtime would not take that size
            from forestcoll.msccl.semantics import size_notes

            for note in size_notes(report.algo, nbytes):  # the file as read once (a FIFO gives it once)
                print(f"note       {note}")
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
    given, extra = file_topology(args)
    with progress_for(args) as progress:
        net, res = simulate_spec(args.what, given, extra=extra, collective=args.collective,
                                 root=args.root, size=size, latency_us=latency(args), trees=args.trees,
                                 port_transport=args.port_transport, progress=progress, **opts)
    if args.json:
        render.print_json(res)
    elif hasattr(res, "plan"):
        render.print_plan_simulation(net, res, size, args.fairness)
    else:
        render.print_simulation(net, res, size, **opts)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from forestcoll.simulate.compare import compare_topology, default_workers
    from forestcoll.units import parse_sizes

    refuse_root(args)
    sizes = parse_sizes(args.sizes)
    opts = sim_options(args)
    chosen = [a.strip() for a in args.algorithms.split(",") if a.strip()] if args.algorithms else None
    workers = default_workers() if args.jobs is None else check_count(args.jobs, "--jobs", MAX_JOBS, lo=1)
    check_output(args)
    given, extra = file_topology(args)
    with progress_for(args) as progress:
        comp = compare_topology(given, args.collective, sizes, extra=extra, algorithms=chosen,
                                root=args.root, latency_us=latency(args), workers=workers, plot=args.output,
                                progress=progress, **opts)
    if args.json:
        render.print_json(comp)
    else:
        render.print_comparison(comp)
    return 0
