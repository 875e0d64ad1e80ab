"""How the command line shows results as text (``--json`` prints their ``to_dict()`` instead).

Every function here takes a result the library returned and prints it; none
computes anything the library does not already hold.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from forestcoll.collectives import ALLGATHER, ALLTOALL
from forestcoll.fileio import dump_json
from forestcoll.rational import format_rational as fr
from forestcoll.units import format_size


def approx(x: Fraction) -> str:
    return f"{float(x):.6g}"


def wrote(output: object) -> str:
    """Where a command's file went, for its ``wrote`` line: the path, or "to standard output" for ``-o -`` (a
    fileio.Stream, or ``-`` in a result: a file named ``-`` is written as ``./-``)."""
    return "to standard output" if str(output) == "-" else str(output)


def print_json(result: Any, **extra: Any) -> None:
    """A result's ``to_dict()`` (with ``extra`` keys added) as the CLI's JSON."""
    sys.stdout.write(dump_json({**result.to_dict(), **extra}))


def describe_set(members: Sequence[str], universe: Sequence[str], limit: int = 6) -> str:
    if hasattr(members, "outside"):  # a huge cluster's cut (forestcoll.bound.cluster.NodeNames), named lazily
        if len(members) * 2 > len(universe):
            rest = members.outside(limit + 1)
            return f"every node except {{{', '.join(rest[:limit]) + (', ...' if len(rest) > limit else '')}}}"
        return f"{{{', '.join(members[: limit + 1][:limit]) + (', ...' if len(members) > limit else '')}}} ({len(members)} nodes)"
    inside = set(members)
    if len(inside) * 2 > len(universe):
        rest = [u for u in universe if u not in inside]
        shown = ", ".join(rest[:limit]) + (", ..." if len(rest) > limit else "")
        return f"every node except {{{shown}}}"
    shown = ", ".join(list(members)[:limit]) + (", ..." if len(members) > limit else "")
    return f"{{{shown}}} ({len(members)} nodes)"


# ----- bound, schedules, verdicts --------------------------------------------------------------


def print_bound(report, topo) -> None:
    main = report.bound
    # a cluster bounded without building it (forestcoll.bound.cluster) names its nodes on demand
    names = topo.node_names() if hasattr(topo, "node_names") else [n.name for n in topo.nodes]
    print(f"topology        {topo.name}  ({topo.num_compute} compute, {len(topo.switch_nodes)} switch nodes)")
    print(f"collective      {main.collective}" + (f" (root {main.root})" if main.root else ""))
    print(f"optimal algbw   {fr(main.algbw)} GB/s  (~{approx(main.algbw)})")
    print(f"busbw           {fr(main.busbw)} GB/s  (~{approx(main.busbw)})")
    ag = report.companions[ALLGATHER.name]
    if main is not ag:
        print(f"allgather algbw {fr(ag.algbw)} GB/s  (~{approx(ag.algbw)})")
    if report.fixed_k_algbw is not None:
        fixed = report.fixed_k_algbw
        print(f"with k={report.k:<8}  {fr(fixed)} GB/s  (~{approx(fixed)}, {approx(fixed / main.algbw * 100)}% of optimal)")
        if report.fixed_k_warning:
            print(f"warning k={report.k:<6} {report.fixed_k_warning}")
    for p in main.phases:
        side = "into" if p.reversed else "out of"
        ranks = "rank" if p.cut_weight == 1 else "ranks"
        print(
            f"bottleneck      {p.name}: S = {describe_set(p.cut_nodes, names)} holds {p.cut_weight} {ranks} "
            f"but has only {fr(p.cut_bandwidth)} GB/s of links {side} it"
        )
        if p.unbalanced:
            print(
                f"warning         switch {p.unbalanced[0]!r} can send more than it receives: trees may not reach "
                "this bound (generate tells)"
            )
    if report.weighted_note:
        print(f"equal shards    {report.weighted_note}")


def print_schedule(sched, topo, smallest_k: bool, output: str | None) -> None:
    from forestcoll.schedule import tree_heights

    heights = tree_heights(sched.trees)
    print(f"topology   {topo.name}  ({topo.num_compute} ranks)")
    print(f"collective {sched.collective}" + (f" (root {sched.root})" if sched.root else ""))
    print(f"k          {sched.k} chunks per shard" + (" (smallest exactly optimal k)" if smallest_k else ""))
    print(f"trees      {len(sched.trees)}  (height max {max(heights)}, mean {sum(heights) / len(heights):.2f})")
    print(f"algbw      {fr(sched.algbw)} GB/s  (~{approx(sched.algbw)})")
    print(f"optimal    {fr(sched.bound_algbw)} GB/s  ({approx(sched.algbw / sched.bound_algbw * 100)}% of the bound)")
    _print_shards(sched, topo)
    if sched.stats.get("max_height") is not None:
        limit = sched.stats["max_height"]
        how = ("an optimal schedule with such trees" if sched.optimal else
               "the fastest schedule found with such trees (not proved the fastest possible)")
        print(f"height     at most {limit} hops: {how}")
    lowest = sched.stats.get("lowest_height")
    if lowest is not None:
        found = [h for _, h in lowest["tried"] if h is not None]
        missed = [t for t, h in lowest["tried"] if h is None]
        how = (f"{lowest['first']} -> {found[-1]} hops at the same k and rate" if found else
               f"{lowest['first']} hops" + (" (the radius)" if not missed else ""))
        print(f"height     {how}" + (f"; none found at {missed[0]}" if missed else ""))
    print(f"time       {sched.stats['seconds']:.3f} s")
    if output:
        print(f"wrote      {wrote(output)}")


def print_schedule_line(sched, topo) -> None:
    print(f"schedule   {sched.collective} on {topo.name}, k={sched.k}, {len(sched.trees)} trees, "
          f"algbw {fr(sched.algbw)} GB/s (~{approx(sched.algbw)}; {approx(sched.algbw / sched.bound_algbw * 100)}% of the bound)")
    _print_shards(sched, topo)


def _print_shards(sched, topo) -> None:
    """The ``shards`` line of a schedule with weighted shards (which contract its rates are for); nothing otherwise."""
    if sched.shard_weights is not None:
        from forestcoll.cli.shards import describe_shards

        print(f"shards     {describe_shards(sched.shard_weights, topo)}")


def print_verify(report, sched, path: str, topo) -> None:
    count = len(sched.trees) if sched.templates is None else sum(p.trees for p in report.phases)  # v2: per orbit
    print(f"schedule   {path}: {sched.collective}, k={sched.k}, {count} trees")
    print(f"topology   {topo.name}")
    _print_shards(sched, topo)
    for p in report.phases:
        link = f"{p.busiest_link[0]} -> {p.busiest_link[1]}" if p.busiest_link else "-"
        print(f"phase      {p.name}: {p.trees} trees, algbw {fr(p.algbw)} GB/s, busiest link {link}")
    if report.algbw is not None:
        print(f"algbw      {fr(report.algbw)} GB/s  (~{approx(report.algbw)}; claimed {fr(report.claimed_algbw)})")
    if report.bound_algbw is not None and report.efficiency is not None:
        print(f"bound      {fr(report.bound_algbw)} GB/s  ({approx(report.efficiency * 100)}% reached)")
    if report.ok:
        print(f"verdict    {report.message}")
    else:
        for err in report.errors[:20]:
            print(f"error      {err}")
        if len(report.errors) > 20:
            print(f"error      ... and {len(report.errors) - 20} more")
        print("verdict    INVALID")


def print_alltoall_bound(bound, topo) -> None:
    sym = bound.symmetry
    print(f"topology        {topo.name}  ({topo.num_compute} compute, {len(topo.switch_nodes)} switch nodes)")
    print("collective      alltoall")
    if bound.certified:
        print(f"optimal algbw   {fr(bound.algbw)} GB/s  (~{approx(bound.algbw)}; certified: explicit paths reach it, "
              "a length function proves no schedule beats it)")
        print(f"busbw           {fr(bound.busbw)} GB/s  (~{approx(bound.busbw)})")
        print(f"per pair        {fr(bound.rate_per_pair)} GB/s between every ordered pair of ranks at once")
    else:
        lo = approx(bound.lower) if bound.lower is not None else "?"
        hi = approx(bound.upper) if bound.upper is not None else "?"
        print(f"optimal algbw   ~{bound.algbw_float:.6g} GB/s (float, HiGHS); certified within [{lo}, {hi}] GB/s")
    neck = bound.bottleneck
    if neck is not None:
        pairs = f"{neck.cut_ranks_inside} x {neck.cut_ranks_outside} rank pairs"
        tight = "proves the optimum" if neck.cut_tight else "does not prove it alone; the saturated links do"
        print(f"bottleneck      cut {neck.cut_label}: {fr(neck.cut_bandwidth)} GB/s out for {pairs} -> algbw <= "
              f"{fr(neck.cut_algbw)} GB/s ({tight})")
        for group in neck.saturated[:4]:
            print(f"saturated       {group.describe()}")
        if len(neck.saturated) > 4:
            print(f"saturated       ... and {len(neck.saturated) - 4} more kinds of links")
    print(f"LP              {sym['lp_rows']} x {sym['lp_columns']} ({sym['source_orbits']} source orbit(s); "
          f"symmetry: {sym['group']}, {sym['generators']} generator(s)); {bound.seconds.get('total', 0.0):.2f} s")


def print_alltoall_schedule(made, topo, output: str | None) -> None:
    sched, bound = made.schedule, made.bound
    hops = max(len(f.path) - 1 for f in sched.flows)
    relayed = sum(1 for f in sched.flows if any(topo.is_compute[topo.index[x]] for x in f.path[1:-1]))
    print(f"topology   {topo.name}  ({topo.num_compute} ranks)")
    print("collective alltoall")
    print(f"k          {sched.k} chunks per pair")
    print(f"flows      {len(sched.flows)}  (paths of at most {hops} links; {relayed} relayed through another rank)")
    print(f"algbw      {fr(sched.algbw)} GB/s  (~{approx(sched.algbw)})")
    if sched.bound_algbw is not None:
        print(f"optimal    {fr(sched.bound_algbw)} GB/s  ({approx(sched.algbw / sched.bound_algbw * 100)}% of the bound, "
              "certified)")
    elif bound is not None:
        print(f"optimal    ~{bound.algbw_float:.6g} GB/s (not certified)")
    print(f"time       {made.seconds.get('total', 0.0):.3f} s")
    if output:
        print(f"wrote      {wrote(output)}")


def print_alltoall_verify(report, sched, path: str, topo) -> None:
    print(f"schedule   {path}: alltoall, k={sched.k}, {len(sched.flows)} flows")
    print(f"topology   {topo.name}")
    if report.algbw is not None:
        claimed = f"; claimed {fr(report.claimed_algbw)}" if report.claimed_algbw is not None else ""
        print(f"algbw      {fr(report.algbw)} GB/s  (~{approx(report.algbw)}{claimed})")
        links = ", ".join(f"{a} -> {b}" for a, b in report.bottleneck_links[:3])
        more = f" and {len(report.bottleneck_links) - 3} more" if len(report.bottleneck_links) > 3 else ""
        print(f"busiest    {links}{more}")
    if report.bound_algbw is not None and report.algbw is not None:
        print(f"bound      {fr(report.bound_algbw)} GB/s  ({approx(report.algbw / report.bound_algbw * 100)}% reached)")
    if report.ok:
        print(f"verdict    {report.message}")
    else:
        for err in report.errors[:20]:
            print(f"error      {err}")
        print("verdict    INVALID")


# ----- MSCCL -----------------------------------------------------------------------------------


def print_export(result) -> None:
    from forestcoll.msccl.lint import RUNTIMES

    algo = result.algo
    modes = " + ".join(m for m, on in (("in-place", algo.inplace), ("out-of-place", algo.outofplace)) if on)
    size = f"{algo.min_bytes}..{algo.max_bytes or 'any'} bytes"
    print(f"algorithm  {algo.name}: {algo.coll}, {algo.ngpus} gpus, {algo.nchunksperloop} chunks per loop, "
          f"{algo.proto}, {modes}, {size}")
    print(f"layout     {result.channels} channel(s), {result.tbs_per_gpu} thread blocks per GPU (most), "
          f"{result.steps_per_tb} steps per thread block (most), {result.total_steps} steps in all")
    for name, lim in RUNTIMES.items():
        verdict = "fits" if result.fits(name) else "DOES NOT FIT"
        print(f"limits     {name}: {verdict} ({lim.steps_per_tb} steps/tb, {lim.tbs_per_gpu} tbs/GPU, {lim.channels} channels)")
    for line in result.checks:
        print(f"checked    {line}")
    for note in result.notes:
        print(f"note       {note}")
    print(f"wrote      {wrote(result.output)}")


def print_lint(report) -> None:
    for f in report.findings:
        print(f.format(report.file))
    errors = report.errors
    print(f"{report.file}: {len(errors)} error(s), {len(report.findings) - len(errors)} warning(s) for {report.runtime}")


def print_runs(report, show: int) -> None:
    algo = report.algo
    tbs = max((len(g.tbs) for g in algo.gpus), default=0)
    print(f"file       {report.file}: {algo.coll}, {algo.ngpus} gpus, {algo.nchunksperloop} chunks per loop, {algo.proto}, "
          f"{algo.nchannels} channel(s), {tbs} thread blocks per GPU (most)")
    for r in report.runs:
        regime = "unbounded size" if r.nbytes is None else f"a {r.nbytes}-byte call"
        print(f"run        {r.mode}: count {r.count} {r.dtype} {r.op}, {r.chunk_elems} elements per chunk, "
              f"{r.iterations} iteration(s), {r.slots} slot(s) per connection, {r.max_count} chunk(s) per call "
              f"({regime})")
        print(f"           {r.transmissions} transmissions, {r.calls} calls, {r.seconds:.2f} s")
        print(f"result     {r.summary()}")
        for s in r.stuck[:show]:
            print(f"stuck      {s.format()}")
        if len(r.stuck) > show:
            print(f"stuck      ... and {len(r.stuck) - show} more thread blocks")
        for e in r.errors[:show]:
            print(f"error      {e}")
        if len(r.errors) > show:
            print(f"error      ... and {len(r.errors) - show} more")


# ----- MSCCL++ ---------------------------------------------------------------------------------


def _bytes_range(lo: int | None, hi: int | None) -> str:
    return f"{lo or 0}..{hi if hi is not None else 'any'} bytes"


def print_mscclpp_export(result) -> None:
    from forestcoll.mscclpp.semantics import MAX_OPERATION

    plan, s = result.plan, result.stats
    mode = "in-place" if plan.inplace else "out-of-place"
    print(f"plan       {plan.name}: {plan.collective}, {s.gpus} GPUs, {result.chunks_per_root} chunk(s) per shard, "
          f"{plan.protocol}, {mode}, "
          f"{_bytes_range(plan.setting('min_message_size'), plan.setting('max_message_size'))}")
    print(f"layout     {result.layout}: {s.threadblocks_per_gpu} thread blocks per GPU (most), {s.ops_per_threadblock} "
          f"operations per thread block (most; the executor allows {MAX_OPERATION}), {s.memory_channels} memory + "
          f"{s.port_channels} port channels per GPU (most), {s.scratch_chunks} scratch chunks")
    for line in result.checks:
        print(f"checked    {line}")
    if not result.checks:
        print("checked    no (--no-check)")
    for note in result.notes:
        print(f"note       {note}")
    print(f"wrote      {wrote(result.output)}")


def print_mscclpp_run(result, show: int) -> None:
    calls = f"{result.launches} back-to-back call(s)"
    races = "race detection on" if result.race_checked else "no race detection"
    print(f"plan       {result.source}: {result.collective}, {result.ngpus} GPUs, {result.threadblocks} thread blocks")
    print(f"run        {result.mode} call of {result.size} bytes ({result.dtype}; input {result.input_size}, output "
          f"{result.output_size} bytes), {calls}, {races}: {result.ops_executed} operations, {result.bytes_moved} bytes "
          f"moved, {result.seconds:.2f} s")
    print(f"result     {result.message}")
    for note in result.notes:
        print(f"note       {note}")
    if not show:
        return
    for label, items in (("stuck", [x.format() for x in result.stuck]), ("error", result.errors),
                         ("race", result.races), ("relaxed", result.relaxed)):
        for item in items[:show]:
            print(f"{label:<10} {item}")
        if len(items) > show:
            print(f"{label:<10} ... and {len(items) - show} more")


def print_mscclpp_lint(report) -> None:
    for f in report.findings:
        print(f.format(report.source))
    print(report.message)


# ----- simulation ------------------------------------------------------------------------------


def print_plan_simulation(net, sim, size: int, fairness: str) -> None:
    p = sim.plan
    print(f"plan       {sim.source}: {p.collective} on {net.topology.name} ({p.ranks} ranks), "
          f"{p.extra.get('threadblocks', 0)} thread blocks")
    print(f"size       {format_size(size)} ({size} bytes)")
    print(f"time       {p.time_s * 1e3:.4f} ms")
    print(f"algbw      {p.algbw_gbps:.2f} GB/s")
    print(f"busbw      {p.busbw_gbps:.2f} GB/s")
    if sim.trees is not None:
        print(f"trees      {sim.trees.algbw_gbps:.2f} GB/s algbw: the plan reaches {sim.ratio:.1%} of its trees")
    print(f"model      {p.transfers} transfers, {p.events} events, {fairness} sharing, port channels inside a box "
          f"over {'CUDA IPC (as the executor picks)' if p.extra.get('port_transport') == 'executor' else 'the NICs'}; "
          f"{p.wall_s:.2f} s")
    for note in sim.notes:
        print(f"note       {note}")



def _slicing(collective: str, slice_bytes: int, max_slices: int | None) -> str:
    """The slicing a simulation used, in words (all-to-all keeps the fixed rule: simulate/alltoall.py)."""
    if collective == "alltoall":
        return f"slices of {format_size(slice_bytes)} (at most {max_slices or 16} per block)"
    cap = "no cap" if max_slices is None else f"at most {max_slices} per block"
    return f"the runtimes' slicing (ring slice {format_size(slice_bytes)}, {cap})"


def print_simulation(net, res, size: int, fairness: str, slice_bytes: int, max_slices: int | None) -> None:
    print(f"algorithm  {res.algorithm}: {res.collective} on {net.topology.name} ({res.ranks} ranks)")
    print(f"size       {format_size(size)} ({size} bytes)")
    print(f"time       {res.time_s * 1e3:.4f} ms")
    print(f"algbw      {res.algbw_gbps:.2f} GB/s")
    print(f"busbw      {res.busbw_gbps:.2f} GB/s")
    print(f"model      {res.transfers} transfers, {res.events} events, {fairness} sharing, "
          f"{_slicing(res.collective, slice_bytes, max_slices)}; {res.wall_s:.2f} s")
    for note in res.extra.get("notes", ()):
        print(f"note       {note}")


def print_comparison(comp) -> None:
    from rich.console import Console
    from rich.table import Table

    print(f"{comp.collective} on {comp.topology} ({comp.ranks} ranks): simulated algbw in GB/s; "
          f"exact bound {float(comp.bound_algbw):.1f} GB/s; best in bold")
    if getattr(comp, "shards_note", ""):
        print(f"forestcoll's shards: {comp.shards_note}; the baselines have equal shards")
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
    ours = "forestcoll-best" if comp.get("forestcoll-best", last) else "forestcoll"
    if ours == "forestcoll-best":
        print("forestcoll-best is, per size, the fastest forestcoll schedule: "
              + ", ".join(f"{format_size(s)} {comp.get(ours, s).extra.get('chosen')}" for s in comp.sizes()
                          if comp.get(ours, s)))
    others = ("direct", "hierarchical") if comp.collective == ALLTOALL.name else ("ring", "double-binary-tree")
    for other in others:
        sp = comp.speedup(last, other, of=ours)
        if sp:
            print(f"{ours} vs {other} at {format_size(last)}: {sp:.2f}x ({(sp - 1) * 100:+.0f}%)")
    if comp.plot:
        print(f"wrote {comp.plot}")


def print_size_export(out) -> None:
    print(f"topology   {out.topology} ({out.ranks} ranks), {out.collective}; candidates: {', '.join(out.candidates)}")
    for note in getattr(out, "notes", ()):
        print(f"note       {note}")
    for r in out.ranges:
        rng = r.range
        if r.path is None:
            print(f"range      {format_size(rng.min_bytes) if rng.min_bytes else '0'}..: {rng.name} cannot be exported "
                  f"({r.error})")
            continue
        upper = f"{rng.max_bytes}" if rng.max_bytes else "any"
        shown = ", ".join(f"{format_size(s)} {v:.1f}" for s, v in sorted(rng.measured.items()))
        plan = getattr(r.result, "plan", None)
        how = f"{plan.protocol} plan, " if plan is not None else ""
        shards = "" if getattr(out, "shard_weights", None) is None else (
            f", {'weighted' if rng.schedule.shard_weights is not None else 'equal'} shards")  # offered both: which
        print(f"range      {rng.min_bytes}..{upper} bytes: {rng.name} ({how}k={rng.schedule.k}{shards}; GB/s at {shown})")
        for note in r.result.notes:
            print(f"note       {note}")
        print(f"wrote      {r.path}")


# ----- topologies ------------------------------------------------------------------------------


def print_summary(s) -> None:
    def span(pair):
        lo, hi = pair
        return f"{fr(lo)} GB/s" if lo == hi else f"{fr(lo)} to {fr(hi)} GB/s"

    boxes = f", {s.boxes} boxes" if s.boxes > 1 else ""
    print(f"topology     {s.name}")
    print(f"nodes        {s.compute} compute (ranks), {s.switches} switch{boxes}")
    if s.gpu is not None:
        print(f"gpu          {s.gpu.describe()}")
    print(f"per rank     in {span(s.rank_in)}, out {span(s.rank_out)}")
    for c in s.classes:
        kinds = ", ".join(fr(b) for b in c.bandwidths[:4]) + (", ..." if len(c.bandwidths) > 4 else "")
        print(f"links {c.name:<7} {c.count:>5} one-way links, {fr(c.total)} GB/s in all (each: {kinds} GB/s)")
    if s.symmetries:
        print(f"symmetries   {s.symmetries} declared generator(s)")
    if s.network is not None:
        each = ", ".join(f"{fr(b)} GB/s" for b in s.network.speeds)
        print(f"network      {s.network.ports} port(s) on {s.network.nics} NIC(s) per box, {each} each")


def show_default(value: object) -> str:
    if value is None:
        return "auto"  # worked out from the rest (the option's help says how)
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    if isinstance(value, Fraction):
        return fr(value)
    return str(value)


def print_builtins(options: bool) -> None:
    from forestcoll.topology import BUILTINS
    from forestcoll.topology.builtins import CLUSTER_PARAMS

    width = max(len(n) for n in BUILTINS) + 2
    for name, b in BUILTINS.items():
        print(f"{name:<{width}}{b.summary}")
        if options:
            for key, p in b.params.items():
                print(f"{'':<{width}}  {key}={show_default(p.default)}  {p.help}")
    if not options:
        print(f"\nbox families also take {', '.join(CLUSTER_PARAMS)}; `forestcoll topo list --options` lists every option")
