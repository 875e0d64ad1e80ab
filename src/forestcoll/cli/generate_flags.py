"""``generate``'s flags that the chosen output would not use: refused before any work, one line each.

A flag a run ignores is a silent wrong answer to the user who gave it (``--max-height 2 --format mscclpp`` wrote
a plan of deeper trees; ``--proto LL`` with a schedule JSON wrote the same schedule as without it), so each is
refused with what it applies to.  Flags whose default cannot be told from an explicit value (``--proto`` and
``--min-bytes`` used to default to ``Simple`` and ``0``) default to None in the parser and get their value here.
"""

from __future__ import annotations

import argparse

from forestcoll.errors import UsageError

__all__ = ["DEFAULT_MAX_K", "EXPORT_FLAGS", "check_generate_flags", "refuse_root"]

DEFAULT_MAX_K = 100_000  # generate --max-k's default

# the export flags (parser._export_flags) a schedule JSON has no use for; --buffsize / --slice-cost are msccl/buffer's
EXPORT_FLAGS = ("proto", "mode", "min_bytes", "max_bytes", "name", "layout", "design_size", "max_threadblocks",
                "instances", "channels", "runtime", "split")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def refuse_root(args: argparse.Namespace) -> None:
    """``--root`` names the root of broadcast / reduce; with any other collective it is refused (it was ignored)."""
    from forestcoll import collectives

    if getattr(args, "root", None) is not None and not collectives.get(args.collective).rooted:
        raise UsageError(f"--root applies to broadcast and reduce; {collectives.canonical(args.collective)} has no root")


def check_generate_flags(args: argparse.Namespace) -> None:
    """Refuse the flags ``generate`` would ignore for this collective and output (UsageError, one line), then fill in
    the defaults the parser leaves as None (``--max-k``)."""
    from forestcoll import collectives

    if args.sizes is not None and not args.sizes.strip():
        raise UsageError("--sizes is empty: give sizes such as 1MiB..1GiB or 1MiB,16MiB,1GiB")
    refuse_root(args)
    alltoall = not collectives.get(args.collective).tree_based
    if alltoall:
        for flag in ("max_height", "max_k", "candidates"):
            if getattr(args, flag) is not None:
                raise UsageError(f"{_flag(flag)} does not apply to alltoall (its schedule is a flow of paths, not trees)")
        if args.schedule_format != "auto":
            raise UsageError("--schedule-format chooses how tree schedules are written; an alltoall schedule has one "
                             "form")
    file_out = args.format in ("msccl", "mscclpp") or args.sizes is not None
    if getattr(args, "jobs", None) is not None and args.sizes is None:
        raise UsageError("--jobs sets the worker processes of --sizes' simulations; this run simulates nothing")
    if args.schedule_format != "auto" and file_out:
        raise UsageError("--schedule-format applies to the schedule JSON (--format json); this run writes "
                         f"{'files per size range' if args.sizes is not None else 'an ' + args.format.upper() + ' file'}")
    if args.max_height is not None and (args.format == "mscclpp" or args.sizes is not None):
        where = "--sizes (it races a height-limited candidate of its own)" if args.sizes is not None else \
            "--format mscclpp (its trees are chosen for the executor): generate --max-height H -o s.json, then " \
            "forestcoll export s.json --format mscclpp"
        raise UsageError(f"--max-height is not used with {where}")
    if not file_out:
        for flag in EXPORT_FLAGS:
            if getattr(args, flag, None) is not None:
                raise UsageError(f"{_flag(flag)} is an export flag: it applies with --format mscclpp or --format msccl "
                                 "(or --sizes), not to the schedule JSON")
        if args.no_check:
            raise UsageError("--no-check skips an export's self-check: it applies with --format mscclpp or --format "
                             "msccl (or --sizes), not to the schedule JSON")
    if args.max_k is None:
        args.max_k = DEFAULT_MAX_K
