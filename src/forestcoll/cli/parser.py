"""The ``forestcoll`` argument parser: every command, its flags and help."""

from __future__ import annotations

import argparse

from forestcoll.cli import commands
from forestcoll.errors import UsageError

__all__ = ["build_parser"]


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see --help)")


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
    g.add_argument("--channels", type=int, help="channels per instance (default: one per pipeline stage, within the limits)")
    g.add_argument("--layout", choices=("stage", "tree"), default="stage",
                   help="channel assignment: a channel per pipeline stage (default) or trees round robin")
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
    p.set_defaults(func=commands.cmd_bound)

    p = sub.add_parser("generate", help="generate a schedule of spanning trees")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--collective", "-c", default="allgather", help="allgather (default), reduce_scatter, allreduce, broadcast, reduce")
    p.add_argument("--k", type=int, help="exactly K trees (chunks) per root; default: the smallest exactly optimal k")
    p.add_argument("--root", help="root rank name for broadcast / reduce (default: the first rank)")
    p.add_argument("--max-k", type=int, default=100_000, help="refuse optimal schedules needing more than this k")
    p.add_argument("--max-height", type=int, metavar="H",
                   help="trees of at most H hops: the optimal schedule when its trees can be that low, else the "
                        "fastest such schedule forestcoll finds (exact rate, below the bound)")
    p.add_argument("-o", "--output", help="write the schedule JSON (or, with --format msccl, the MSCCL XML) here")
    p.add_argument("--json", action="store_true", help="print the schedule JSON on stdout")
    p.add_argument("--no-symmetry", action="store_true", help="do not exploit automorphisms")
    p.add_argument("--format", choices=("json", "msccl"), default="json", help="json (default): schedule JSON; msccl: MSCCL XML")
    p.add_argument("--sizes", help="pick the fastest schedule (simulated) per size range, e.g. 1MiB..1GiB, and write one "
                                   "MSCCL file per range into the -o directory")
    p.add_argument("--fairness", default="max-min", choices=("max-min", "link"), help=argparse.SUPPRESS)
    _export_flags(p)
    p.set_defaults(func=commands.cmd_generate)

    p = sub.add_parser("simulate", help="simulated time, algbw and busbw of a schedule, an MSCCL file or a baseline")
    p.add_argument("what", help="schedule JSON, MSCCL .xml, or a baseline: ring, double-binary-tree, hierarchical, direct")
    p.add_argument("--topology", "-t", help=TOPOLOGY_HELP + " (default for a schedule: the one it names)")
    _cluster_flags(p)
    p.add_argument("--collective", "-c", default="allreduce", help="for baselines (default allreduce)")
    p.add_argument("--root", help="root rank for broadcast / reduce baselines")
    p.add_argument("--size", default="1GiB", help="call size, nccl-tests convention (default 1GiB)")
    _sim_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=commands.cmd_simulate)

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
    p.set_defaults(func=commands.cmd_compare)

    p = sub.add_parser("export", help="lower a schedule to an MSCCL algorithm XML (MSCCL-on-NCCL, RCCL)")
    p.add_argument("schedule", help="schedule JSON file (from `forestcoll generate`)")
    p.add_argument("--format", choices=("msccl",), default="msccl", help="output format (msccl)")
    p.add_argument("-o", "--output", required=True, help="the XML file to write")
    p.add_argument("--json", action="store_true", help="print the layout figures as JSON")
    _export_flags(p)
    p.set_defaults(func=commands.cmd_export)

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
    p.set_defaults(func=commands.cmd_msccl_run)
    p = msub.add_parser("lint", help="check an MSCCL XML file against the runtime's parser rules and limits")
    p.add_argument("file", help="MSCCL algorithm XML")
    p.add_argument("--runtime", default="msccl-executor-nccl", choices=_runtimes(), help="whose limits (default msccl-executor-nccl)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=commands.cmd_msccl_lint)

    p = sub.add_parser("verify", help="check a schedule against its topology, independently of the generator")
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument("--topology", "-t", help=TOPOLOGY_HELP + " (default: the one named in the schedule)")
    _cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=commands.cmd_verify)

    topo = sub.add_parser("topo", help="topology tools")
    tsub = topo.add_subparsers(dest="topo_command", metavar="ACTION", parser_class=_Parser)
    tsub.required = True
    p = tsub.add_parser("export", help="write a topology as the plain nodes/links JSON")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print the JSON (the default when no -o is given)")
    p.add_argument("-o", "--output", help="write the JSON here")
    p.add_argument("--no-symmetries", action="store_true", help="leave out the declared automorphisms")
    p.set_defaults(func=commands.cmd_topo_export)
    p = tsub.add_parser("import", help="import an NCCL/RCCL topology dump (NCCL_TOPO_DUMP_FILE); summary, JSON")
    p.add_argument("topology", help="an NCCL/RCCL topology .xml (or any topology argument)")
    _cluster_flags(p)
    p.add_argument("-o", "--output", help="write the topology JSON here")
    p.add_argument("--json", action="store_true", help="print the topology JSON instead of the summary")
    p.set_defaults(func=commands.cmd_topo_import)
    p = tsub.add_parser("show", help="counts, per-rank bandwidth and links by class")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=commands.cmd_topo_show)
    p = tsub.add_parser("draw", help="draw the fabric (png, svg or pdf), optionally with its bottleneck cut")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("-o", "--output", required=True, help="picture file: .png, .svg or .pdf")
    p.add_argument("--cut", action="store_true", help="highlight the bottleneck cut of the collective")
    p.add_argument("--collective", "-c", default="allgather", help="collective for --cut (default allgather)")
    p.set_defaults(func=commands.cmd_topo_draw)
    p = tsub.add_parser("list", help="list the built-in topologies")
    p.add_argument("--options", action="store_true", help="also list every option with its default")
    p.set_defaults(func=commands.cmd_topo_list)
    return parser
