"""The ``forestcoll`` argument parser: every command, its flags and help."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from forestcoll.errors import UsageError

__all__ = ["build_parser"]


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command function ``name`` of ``forestcoll.cli.<module>``, imported when the command runs: building the
    parser (``--help``, a flag error) does not load the commands and their renderers (~20 ms)."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module(f"forestcoll.cli.{module}"), name)(args)

    run.__name__ = run.__qualname__ = name
    return run


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of a usage dump; every command takes --quiet."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # before or after the command name; SUPPRESS: a subcommand's parser does not reset a global -q
        self.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                          help="no progress bar on stderr (it shows only on a terminal, for operations over ~2 s)")

    def error(self, message: str) -> None:  # type: ignore[override]
        where = self.prog.removeprefix("forestcoll").strip()  # main() adds the "forestcoll: error:" prefix
        raise UsageError(f"{where + ': ' if where else ''}{message} (see --help)")


TOPOLOGY_HELP = (
    "a built-in NAME[:key=value,...] (see `forestcoll topo list`), or a file (.json, .yaml, NCCL/RCCL .xml) "
    "optionally followed by :key=value,..."
)


BASELINES_HELP = "ring, double-binary-tree, hierarchical, direct (alltoall: direct, hierarchical)"
DEFAULT_COLLECTIVE = "allreduce"  # one default for every command that takes --collective


def _height(text: str) -> int | str:
    """--max-height: a number of hops, or ``lowest``."""
    if text.strip().lower() == "lowest":
        return "lowest"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of hops or 'lowest', got {text!r}") from None


def _collective_flag(p: argparse.ArgumentParser, what: str = "") -> None:
    p.add_argument("--collective", "-c", default=DEFAULT_COLLECTIVE,
                   help=what + "allreduce (default), allgather, reduce_scatter, broadcast, reduce, alltoall")


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    from forestcoll.topology.fabrics import FABRICS  # not cluster.py: --help would load the topology model

    p.add_argument("--nodes", type=int, help="replicate the box N times (same as the spec option nodes=N)")
    p.add_argument("--fabric", choices=FABRICS, help="how boxes are joined (same as fabric=...)")
    p.add_argument("--bond-nic-ports", action="store_true", help="an NCCL/RCCL .xml dump: each NIC's ports as one "
                   "port of their summed bandwidth, as NCCL's merged device or a RoCE bond (same as bond_nic_ports=1)")


def _sim_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("simulation model")
    g.add_argument("--fairness", default="max-min", choices=("max-min", "link"),
                   help="max-min (default): weighted max-min sharing of links; link: per-link sharing (each link split among its flows, one pass)")
    g.add_argument("--slice", default="1MiB", help="a ring's pipeline slice, the unit the runtimes' chunking rules scale "
                   "with (default 1MiB: NCCL's 4 MiB buffer / 4)")
    g.add_argument("--max-slices", type=int, default=None, help="at most this many slices per block (default: no cap, "
                   "as the runtimes)")
    g.add_argument("--latency", help="link latency per class in microseconds, e.g. net=3,nvlink=0.5")


class _Runtimes:
    """The MSCCL runtimes --runtime takes, read from forestcoll.msccl.lint only when help shows them or the flag
    is given (building the parser stays free of the MSCCL modules; a metavar keeps argparse from listing them
    while it builds)."""

    def _names(self) -> tuple[str, ...]:
        from forestcoll.msccl.lint import RUNTIMES

        return tuple(RUNTIMES)

    def __iter__(self):
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __len__(self) -> int:
        return len(self._names())


def _runtimes() -> _Runtimes:
    return _Runtimes()


def _export_flags(p: argparse.ArgumentParser, buffer: bool = False) -> None:
    g = p.add_argument_group("export (MSCCL++ plans and MSCCL XML)")
    g.add_argument("--proto", "--protocol", dest="proto", choices=("Simple", "LL", "LL128"),
                   help="protocol (default Simple; LL: packets, for small calls; LL128: MSCCL only)")
    g.add_argument("--mode", choices=("both", "in-place", "out-of-place"),
                   help="calls it serves (MSCCL default both; an MSCCL++ plan serves one, default in-place)")
    g.add_argument("--min-bytes", "--min-message-size", dest="min_bytes",
                   help="smallest call size to use it for, e.g. 0 (default), 4096, 1MiB")
    g.add_argument("--max-bytes", "--max-message-size", dest="max_bytes",
                   help="largest call size (MSCCL default 0: no limit; MSCCL++ default 4GiB-1, LL 1MiB)")
    g.add_argument("--name", help="algorithm (MSCCL) or plan (MSCCL++) name in the file")
    g.add_argument("--no-check", action="store_true", help="skip the self-check (lint + interpreter) before writing")
    g.add_argument("--layout", choices=("stage", "tree", "auto", "edge", "shared", "mixed", "source", "level"),
                   help="MSCCL: a channel per pipeline stage (stage, default) or trees round robin (tree); MSCCL++: "
                        "thread blocks per tree edge, per source GPUs or per tree level, or mixed: per edge where "
                        "--max-threadblocks leaves room, coarser where not; shared (allreduce): mixed, with a "
                        "reduce-scatter and an allgather block sharing a thread block (default auto: edge if it fits, "
                        "else shared for allreduce, else mixed)")
    g = p.add_argument_group("MSCCL++ plans only")
    g.add_argument("--design-size", help="call size the pipelines are cut for (default: the max size, at most 1GiB)")
    g.add_argument("--max-threadblocks", type=int,
                   help="thread blocks a GPU runs at once (generate's default: the SMs / CUs of the fabric's GPU, "
                   "A100 108, H100 132, MI250 GCD 104, MI300X 304; else 104)")
    g = p.add_argument_group("MSCCL XML only")
    g.add_argument("--instances", type=int, help="copies of the algorithm on separate channels (default 1)")
    g.add_argument("--channels", type=int, help="channels per instance (default: one per pipeline stage, within the limits)")
    g.add_argument("--runtime", choices=_runtimes(), metavar="RUNTIME",
                   help="whose limits to keep to: %(choices)s (generate's default: the runtime of the fabric's GPUs, "
                   "rccl on AMD; else msccl-executor-nccl)")
    g.add_argument("--split", type=int, metavar="S", help="cut every chunk into S MSCCL chunks, 1..64 (generate "
                   "without --k: plain, split or even pieces, each where faster at 1GiB or 16MiB and slower at neither; export: 1)")
    if buffer:
        g.add_argument("--buffsize", metavar="B", help="choose the file for the runtime buffer NCCL_BUFFSIZE=B (a power "
                       "of two, 64KiB..64MiB; the default is 4MiB) or auto (4MiB, 1MiB or 512KiB, the fastest at "
                       "1GiB): files ranked by their simulated rate with that buffer; the note says what to set")
        g.add_argument("--slice-cost", metavar="US", help="with --buffsize: what each slice a thread block sends costs "
                       "the ranking, in microseconds (default 1us: the Simple protocol's fence and flag; a what-if)")


def _generate(args: argparse.Namespace) -> int:
    """``forestcoll generate``: the runtime-buffer flags checked against the others first, then the command."""
    from forestcoll.msccl.buffer import check_buffer_flags

    check_buffer_flags(args)
    from forestcoll.cli.commands import cmd_generate

    return cmd_generate(args)


class _Unused:
    """Stands for the parser of a command that is not being run: takes the declarations and drops them."""

    def __getattr__(self, name: str):
        return self._drop

    def _drop(self, *args, **kwargs) -> _Unused:
        return self


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; with ``only`` (a command name) just that command's (what a run of it needs: the
    others are ~10 ms of declarations a start-up would not use)."""
    parser = _Parser(prog="forestcoll", description="Throughput-optimal collective schedules for any fabric.")
    parser.add_argument("--version", action="version", version="forestcoll 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    if only is not None:
        declare = sub.add_parser

        def add_parser(name: str, **kwargs):
            return declare(name, **kwargs) if name == only else _Unused()

        sub.add_parser = add_parser  # type: ignore[method-assign]

    p = sub.add_parser("bound", help="exact optimal algbw and the bottleneck cut that proves it")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    _collective_flag(p)
    p.add_argument("--root", help="root rank name for broadcast / reduce (default: the first rank)")
    p.add_argument("--k", type=int, help="also report the best algbw with exactly K trees per root")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--no-symmetry", action="store_true", help="do not exploit automorphisms (slower; for checking)")
    p.set_defaults(func=_command("commands", "cmd_bound"))

    p = sub.add_parser("generate", help="generate a schedule of spanning trees")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    _collective_flag(p)
    p.add_argument("--k", type=int, help="exactly K trees (chunks) per root; default: the smallest exactly optimal k "
                                         "(alltoall: K chunks per pair; default: the fewest that keep the optimum)")
    p.add_argument("--root", help="root rank name for broadcast / reduce (default: the first rank)")
    p.add_argument("--max-k", type=int, help="refuse optimal schedules needing more than this k (default 100000)")
    p.add_argument("--max-height", type=_height, metavar="H",
                   help="trees of at most H hops: the optimal schedule when its trees can be that low, else the "
                        "fastest such schedule forestcoll finds (exact rate, below the bound); lowest: the same "
                        "schedule (same k, same rate) with its trees as low as the search finds (seconds, not ms)")
    p.add_argument("--shards", choices=("auto", "equal", "box"),
                   help="allreduce: how the buffer is split among ranks: equal, or box (rank i's shard weighted "
                        "1/(ranks in its box)); auto (default): the fastest by exact bound of equal, box and the best "
                        "weights for reduce-scatter + allgather (docs/shards.md), ties to the simpler (--sizes: those "
                        "weights' candidates beside the equal ones, the fastest per size)")
    p.add_argument("-o", "--output", help="write the schedule JSON (or the MSCCL++ plan / MSCCL XML, with --format) here")
    p.add_argument("--json", action="store_true", help="print the schedule JSON on stdout")
    p.add_argument("--no-symmetry", action="store_true", help="do not exploit automorphisms")
    p.add_argument("--schedule-format", choices=("auto", "v1", "v2"), default="auto",
                   help="schedule file version: v1 lists every tree; v2 lists template trees and the automorphisms "
                        "that map them (linear size); auto (default): v2 from 256 ranks when it is 4x smaller")
    p.add_argument("--format", choices=("json", "mscclpp", "msccl"),
                   help="json (default): schedule JSON; mscclpp: MSCCL++ execution plan; msccl: MSCCL XML (legacy; "
                        "the default with --sizes)")
    p.add_argument("--sizes", help="pick the fastest schedule (simulated) per size range, e.g. 1MiB..1GiB, and write one "
                                   "file per range (--format mscclpp: plans, LL where it wins; msccl: XML) into the "
                                   "-o directory (created if needed; a name ending .json / .xml is refused unless it "
                                   "is an existing directory)")
    p.add_argument("--candidates", choices=("default", "all"),
                   help="what --sizes simulates: default: the optimal k, k=1, k=2, the largest power of two below "
                        "the optimal k that the runtime can use, one height-limited schedule and the ring; all: also "
                        "every other power of two up to 64 (slow on big fabrics)")
    p.add_argument("--jobs", type=int, help="--sizes: worker processes that simulate the candidates (default: cores, at "
                                            "most 4; the files written do not depend on it)")
    p.add_argument("--fairness", default="max-min", choices=("max-min", "link"), help=argparse.SUPPRESS)
    _export_flags(p, buffer=True)
    p.set_defaults(func=_generate)

    p = sub.add_parser("simulate", help="simulated time, algbw and busbw of a schedule, an MSCCL++ plan, an MSCCL file "
                                        "or a baseline")
    p.add_argument("what", help="a schedule, an MSCCL++ plan or an MSCCL XML file (told by content), or a baseline: "
                                + BASELINES_HELP)
    p.add_argument("--topology", "-t", help=TOPOLOGY_HELP + " (default for a schedule: the one it names)")
    _cluster_flags(p)
    _collective_flag(p, "for baselines: ")
    p.add_argument("--root", help="root rank for broadcast / reduce baselines")
    p.add_argument("--size", default="1GiB", help="call size, nccl-tests convention (default 1GiB)")
    _sim_flags(p)
    g = p.add_argument_group("MSCCL++ plans and MSCCL files")
    g.add_argument("--trees", help="also simulate this schedule (the one the plan or file was exported from) and "
                                   "compare")
    g.add_argument("--port-transport", choices=("executor", "nic"), default="executor",
                   help="executor (default): port channels inside a box go over CUDA IPC, as MSCCL++ picks; nic: "
                        "every port channel goes through the network")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_command("commands", "cmd_simulate"))

    p = sub.add_parser("compare", help="simulate forestcoll and the baselines over sizes: table and plot")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    _collective_flag(p)
    p.add_argument("--root", help="root rank for broadcast / reduce")
    p.add_argument("--sizes", default="1MiB..1GiB", help="sizes: A..B (powers of two) or a comma list (default 1MiB..1GiB)")
    p.add_argument("--algorithms", help="comma list to keep: forestcoll (the optimal k), forestcoll-k1 and the "
                                        "baselines " + BASELINES_HELP + " (default: all that apply)")
    p.add_argument("-o", "--output", help="write the plot here (.png, .svg or .pdf)")
    p.add_argument("--jobs", type=int, help="worker processes (default: cores, at most 4)")
    _sim_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_command("commands", "cmd_compare"))

    p = sub.add_parser("export", help="lower a schedule to an MSCCL++ execution plan (or a legacy MSCCL algorithm XML)")
    p.add_argument("schedule", help="schedule JSON file (from `forestcoll generate`)")
    p.add_argument("--format", choices=("mscclpp", "msccl"),
                   help="mscclpp: MSCCL++ execution plan (JSON); msccl: MSCCL XML (legacy) (default: from the -o "
                        "extension, .json or .xml)")
    p.add_argument("-o", "--output", required=True, help="the file to write")
    p.add_argument("--topology", "-t", help=TOPOLOGY_HELP + " (MSCCL++: boxes and paths; default: the one the schedule "
                                                            "names)")
    p.add_argument("--json", action="store_true", help="print the layout figures as JSON")
    _export_flags(p)
    p.set_defaults(func=_command("commands", "cmd_export"))

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
    p.set_defaults(func=_command("commands", "cmd_msccl_run"))
    p = msub.add_parser("lint", help="check an MSCCL XML file against the runtime's parser rules and limits")
    p.add_argument("file", help="MSCCL algorithm XML")
    p.add_argument("--runtime", default="msccl-executor-nccl", choices=_runtimes(), metavar="RUNTIME",
                   help="whose limits: %(choices)s (default msccl-executor-nccl)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_command("commands", "cmd_msccl_lint"))

    mp = sub.add_parser("mscclpp", help="MSCCL++ execution plans: run in the interpreter, lint")
    mpsub = mp.add_subparsers(dest="mscclpp_command", metavar="ACTION", parser_class=_Parser)
    mpsub.required = True
    p = mpsub.add_parser("run", help="execute an MSCCL++ plan as the executor would and check the result and races")
    p.add_argument("plan", help="MSCCL++ execution plan (JSON)")
    p.add_argument("--size", help="call size, the executor's (allgather: the output; else the input), e.g. 1MiB "
                                  "(default: a small size every GPU accepts)")
    p.add_argument("--mode", choices=("declared", "in-place", "out-of-place"), default="declared",
                   help="buffer mode (default: the one the plan declares)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float16", "int32", "uint32", "uint8"),
                   help="element type of the data (default float32)")
    p.add_argument("--launches", type=int, default=2, help="calls back to back (default 2)")
    p.add_argument("--packet", default="LL16", choices=("LL16", "LL8"), help="packet type of LL plans (default LL16)")
    p.add_argument("--root", type=int, help="root rank of broadcast / reduce (default: found by trying each)")
    p.add_argument("--no-race-check", action="store_true", help="skip the data-race detector (faster)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input data")
    p.add_argument("--verbose", "-v", action="store_true", help="list every error, race, relaxed access and stuck block")
    p.add_argument("--show", type=int, default=10, help="with --verbose: entries to list per kind (default 10)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_command("commands", "cmd_mscclpp_run"))
    p = mpsub.add_parser("lint", help="check an MSCCL++ plan against the executor's parser rules and limits")
    p.add_argument("plan", help="MSCCL++ execution plan (JSON)")
    p.add_argument("--size", help="check the size-dependent rules for this call size (default: the smallest accepted)")
    p.add_argument("--ranks-per-node", type=int, help="GPUs per host: memory channels must stay inside one")
    p.add_argument("--max-threadblocks", type=int, default=104,
                   help="thread blocks a GPU runs at once (default 104; A100 108, H100 132)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_command("commands", "cmd_mscclpp_lint"))

    p = sub.add_parser("verify", help="check a schedule against its topology, independently of the generator")
    p.add_argument("schedule", help="schedule JSON file")
    p.add_argument("--topology", "-t", help=TOPOLOGY_HELP + " (default: the one named in the schedule)")
    _cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_command("commands", "cmd_verify"))

    topo = sub.add_parser("topo", help="topology tools")
    tsub = topo.add_subparsers(dest="topo_command", metavar="ACTION", parser_class=_Parser)
    tsub.required = True
    p = tsub.add_parser("export", help="write a topology as the plain nodes/links JSON")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print the JSON (the default when no -o is given)")
    p.add_argument("-o", "--output", help="write the JSON here")
    p.add_argument("--no-symmetries", action="store_true", help="leave out the declared automorphisms")
    p.set_defaults(func=_command("topo_commands", "cmd_topo_export"))
    p = tsub.add_parser("import", help="import an NCCL/RCCL topology dump (NCCL_TOPO_DUMP_FILE); summary, JSON")
    p.add_argument("topology", help="an NCCL/RCCL topology .xml (or any topology argument)")
    _cluster_flags(p)
    p.add_argument("-o", "--output", help="write the topology JSON here")
    p.add_argument("--json", action="store_true", help="print the topology JSON instead of the summary")
    p.set_defaults(func=_command("topo_commands", "cmd_topo_import"))
    p = tsub.add_parser("show", help="counts, per-rank bandwidth and links by class")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_command("topo_commands", "cmd_topo_show"))
    p = tsub.add_parser("draw", help="draw the fabric (png, svg or pdf), optionally with its bottleneck cut")
    p.add_argument("topology", help=TOPOLOGY_HELP)
    _cluster_flags(p)
    p.add_argument("-o", "--output", required=True, help="picture file: .png, .svg or .pdf")
    p.add_argument("--cut", action="store_true", help="highlight the bottleneck cut of the collective")
    _collective_flag(p, "collective whose bottleneck cut --cut highlights: ")
    p.set_defaults(func=_command("topo_commands", "cmd_topo_draw"))
    p = tsub.add_parser("list", help="list the built-in topologies")
    p.add_argument("--options", action="store_true", help="also list every option with its default")
    p.set_defaults(func=_command("topo_commands", "cmd_topo_list"))
    return parser
