"""The ``forestcoll topo`` commands: export, import, show, draw and list topologies."""

from __future__ import annotations

import argparse
import sys

from forestcoll.cli import render
from forestcoll.cli.commands import check_output, cluster_options, flow_collective, topology, warn
from forestcoll.errors import UsageError
from forestcoll.rational import format_rational

__all__ = ["cmd_topo_draw", "cmd_topo_export", "cmd_topo_import", "cmd_topo_list", "cmd_topo_show", "fr_text"]


def cmd_topo_export(args: argparse.Namespace) -> int:
    from forestcoll.fileio import dump_json
    from forestcoll.topology import import_topology, topology_to_dict, write_topology
    from forestcoll.topology.jsonio import box_ports

    check_output(args)
    imported = import_topology(args.topology, cluster_options(args))
    warn(imported.warnings, imported.notes)
    topo, ports = imported.topology, box_ports(imported.topology, imported.ports)
    if args.output:
        text = write_topology(topo, args.output, symmetries=not args.no_symmetries, ports=ports)
    else:
        text = dump_json(topology_to_dict(topo, symmetries=not args.no_symmetries, ports=ports))
    if args.json or not args.output:
        sys.stdout.write(text)
    return 0


def cmd_topo_import(args: argparse.Namespace) -> int:
    """Import an NCCL/RCCL XML dump (or any topology) and write the plain JSON."""
    from forestcoll.fileio import dump_json
    from forestcoll.topology import import_topology, topology_to_dict, write_topology
    from forestcoll.topology.jsonio import box_ports
    from forestcoll.topology.show import summarize

    check_output(args)
    imported = import_topology(args.topology, cluster_options(args))
    warn(imported.warnings, imported.notes)
    topo = imported.topology
    ports = box_ports(topo, imported.ports)  # one box: its ports too, so that --nodes N can replicate the file
    text = write_topology(topo, args.output, ports=ports) if args.output else dump_json(topology_to_dict(topo, ports=ports))
    if args.json:
        sys.stdout.write(text)
        return 0
    render.print_summary(summarize(topo, imported.ports))
    if args.output:
        print(f"wrote        {render.wrote(args.output)}")
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

    check_output(args)
    topo = topology(args)
    cut: tuple[str, ...] = ()
    title = topo.name
    if args.cut and flow_collective(args):
        from forestcoll.alltoall.bound import alltoall_bound

        found = alltoall_bound(topo)
        if not found.ok or found.bottleneck is None:
            raise UsageError(found.message)
        neck = found.bottleneck
        cut = neck.cut_nodes
        title = (f"{topo.name}: alltoall bound {fr_text(found)} GB/s; cut S holds {neck.cut_ranks_inside} ranks with "
                 f"{format_rational(neck.cut_bandwidth)} GB/s out")
    elif args.cut:
        from forestcoll.bound import optimal_bound

        fr = format_rational
        bound = optimal_bound(topo, args.collective)
        phase = bound.phases[-1]
        cut = phase.cut_nodes
        title = (f"{topo.name}: {bound.collective} bound {fr(bound.algbw)} GB/s; cut S holds {phase.cut_weight} "
                 f"ranks with {fr(phase.cut_bandwidth)} GB/s {'in' if phase.reversed else 'out'}")
    draw(topo, args.output, cut, title)
    print(f"wrote {args.output}" + (f" (with the {args.collective} bottleneck cut)" if args.cut else ""))
    return 0


def fr_text(bound) -> str:
    """An all-to-all bound as text: exact when certified, else the float value."""
    return format_rational(bound.algbw) if bound.algbw is not None else f"~{bound.algbw_float:.6g}"


def cmd_topo_list(args: argparse.Namespace) -> int:
    render.print_builtins(args.options)
    return 0
