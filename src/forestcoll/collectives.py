"""The collectives forestcoll knows, each defined once.

Every module that needs to know something about a collective (its phases and
their direction, whether one rank is the root, whether it reduces, what the
runtimes call it, the nccl-tests bus factor, how its data is cut into chunks)
asks this table instead of comparing names.  Adding a collective is one new
:class:`Collective` entry in :data:`COLLECTIVES` plus the modules of its own
algorithm; tree-based entries (``tree_based=True``) go through the bound, the
tree packing and every lowering as they are.

Conventions (nccl-tests): the *size* of a call is the bytes of the whole
buffer the collective fills (allgather: the output; reduce-scatter: the input;
allreduce, broadcast, reduce: the buffer; all-to-all: each rank's input, of
which size/N goes to every rank), ``algbw = size / time`` and
``busbw = algbw * bus_factor(N)``.

The data of a call are ``shards``: one per rank for allgather, reduce-scatter
and allreduce (rank r's shard is the r-th 1/N of the buffer), one for a rooted
collective (the root's whole buffer).  A schedule cuts every shard into ``k``
chunks, so one loop of an MSCCL file moves ``shards(N) * k`` chunks.  For
all-to-all a rank's buffer holds N blocks (one per peer) and its schedules
cut every block into k chunks: the same ``N * k`` chunks per buffer.

A *phase* packs trees in one direction: ``out``-trees carry a root's shard to
every rank (allgather, broadcast), ``in``-trees carry every rank's
contribution, reduced on the way, into the root (reduce-scatter, reduce).  An
``in`` phase is an ``out`` phase on the reversed fabric.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from forestcoll.errors import UsageError

__all__ = [
    "ALLGATHER",
    "ALLTOALL",
    "ALLREDUCE",
    "BROADCAST",
    "COLLECTIVES",
    "PHASES",
    "REDUCE",
    "REDUCE_SCATTER",
    "Collective",
    "Phase",
    "bus_factor",
    "canonical",
    "from_msccl",
    "from_mscclpp",
    "get",
    "names",
    "phase",
    "tree_collective",
]

OUT = "out"
IN = "in"


@dataclass(frozen=True)
class Phase:
    """One tree phase: its name (as in schedule files) and the direction of its trees."""

    name: str
    direction: str  # "out": from the root to every rank; "in": from every rank into the root, reducing

    @property
    def reversed(self) -> bool:
        """True for in-tree phases: they are out-tree phases on the reversed fabric."""
        return self.direction == IN


@dataclass(frozen=True)
class Collective:
    """Everything forestcoll needs to know about one collective.

    ``bus`` = (a, b) gives busbw / algbw = (a*N + b) / N (nccl-tests): allreduce
    2(N-1)/N, allgather and reduce-scatter (N-1)/N, broadcast and reduce 1.
    ``input`` / ``output`` say what a rank's buffers hold: ``"all"`` every shard,
    ``"own"`` only the rank's own shard (allgather input, reduce-scatter output).
    """

    name: str  # canonical name, as in schedule files and the API
    aliases: tuple[str, ...]
    phases: tuple[Phase, ...]  # tree phases in the order they run (empty for a collective without trees)
    rooted: bool  # one root (broadcast, reduce) instead of every rank a root of its own shard
    reduces: bool  # combines data with a reduction operator
    tree_based: bool  # optimal schedules are packed spanning trees (bound, splitting, packing apply)
    msccl: str | None  # the ``coll`` attribute of an MSCCL algorithm file
    # the ``collective`` of an MSCCL++ execution plan: the executor runs a plan whatever this names (only
    # "allgather" changes its size check); the DSL and the NCCL shim know allgather, reducescatter, allreduce,
    # broadcast, alltoall, sendrecv (the shim hands ncclReduce to NCCL/RCCL), so a "reduce" plan runs through the
    # executor's API only
    mscclpp: str | None
    bus: tuple[int, int]
    input: str = "all"
    output: str = "all"
    summary: str = ""

    def bus_factor(self, ranks: int) -> Fraction:
        """busbw / algbw on ``ranks`` ranks (nccl-tests)."""
        a, b = self.bus
        return Fraction(a * ranks + b, ranks)

    def shards(self, ranks: int) -> int:
        """Independent blocks of data in a call: 1 when rooted, else one per rank."""
        return 1 if self.rooted else ranks

    def shard_bytes(self, size: float, ranks: int) -> float:
        """Bytes of one shard in a call of nccl-tests size ``size``."""
        return size / self.shards(ranks)

    def chunks_per_loop(self, ranks: int, k: int) -> int:
        """Chunks one pass of a schedule with ``k`` chunks per shard moves (MSCCL ``nchunksperloop``)."""
        return self.shards(ranks) * k

    @property
    def phase_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.phases)

    def mirror_of(self, phase: Phase) -> Phase | None:
        """The out-tree phase of this collective whose trees, read backwards, serve the in-tree ``phase``
        on a fabric equal to its own reverse (same roots, reversed links); None for out phases."""
        if phase.direction != IN:
            return None
        return next((p for p in self.phases if p.direction == OUT), None)


ALLGATHER_PHASE = Phase("allgather", OUT)
REDUCE_SCATTER_PHASE = Phase("reduce_scatter", IN)
BROADCAST_PHASE = Phase("broadcast", OUT)
REDUCE_PHASE = Phase("reduce", IN)

ALLGATHER = Collective(
    "allgather", ("all_gather", "all-gather"), (ALLGATHER_PHASE,), rooted=False, reduces=False, tree_based=True,
    msccl="allgather", mscclpp="allgather", bus=(1, -1), input="own",
    summary="every rank ends with every rank's shard",
)
REDUCE_SCATTER = Collective(
    "reduce_scatter", ("reducescatter", "reduce-scatter"), (REDUCE_SCATTER_PHASE,), rooted=False, reduces=True,
    tree_based=True, msccl="reducescatter", mscclpp="reducescatter", bus=(1, -1), output="own",
    summary="rank r ends with the reduction of every rank's r-th shard",
)
ALLREDUCE = Collective(
    "allreduce", ("all_reduce", "all-reduce"), (REDUCE_SCATTER_PHASE, ALLGATHER_PHASE), rooted=False, reduces=True,
    tree_based=True, msccl="allreduce", mscclpp="allreduce", bus=(2, -2),
    summary="every rank ends with the reduction of every rank's buffer (reduce-scatter, then allgather)",
)
BROADCAST = Collective(
    "broadcast", (), (BROADCAST_PHASE,), rooted=True, reduces=False, tree_based=True,
    msccl="broadcast", mscclpp="broadcast", bus=(1, 0),
    summary="every rank ends with the root's buffer",
)
REDUCE = Collective(
    "reduce", (), (REDUCE_PHASE,), rooted=True, reduces=True, tree_based=True,
    msccl="reduce", mscclpp="reduce", bus=(1, 0),
    summary="the root ends with the reduction of every rank's buffer",
)

ALLTOALL = Collective(
    "alltoall", ("all_to_all", "all-to-all"), (), rooted=False, reduces=False, tree_based=False,
    msccl="alltoall", mscclpp="alltoall", bus=(1, -1),
    summary="rank s's t-th block ends in rank t's s-th block (a flow problem: forestcoll.alltoall, not trees)",
)

COLLECTIVES: dict[str, Collective] = {
    c.name: c for c in (ALLGATHER, REDUCE_SCATTER, ALLREDUCE, BROADCAST, REDUCE, ALLTOALL)
}
PHASES: dict[str, Phase] = {p.name: p for c in COLLECTIVES.values() for p in c.phases}
_BY_ALIAS: dict[str, Collective] = {a: c for c in COLLECTIVES.values() for a in (c.name, *c.aliases)}


def names() -> tuple[str, ...]:
    """Canonical names, in the table's order."""
    return tuple(COLLECTIVES)


def get(name: str | Collective) -> Collective:
    """The entry for a name or alias (case-insensitive); unknown names raise :class:`UsageError`."""
    if isinstance(name, Collective):
        return name
    key = str(name).strip().lower()
    if key not in _BY_ALIAS:
        raise UsageError(f"unknown collective {name!r}; choose one of {', '.join(COLLECTIVES)}")
    return _BY_ALIAS[key]


def tree_collective(name: str | Collective) -> Collective:
    """The entry for ``name``, which must be tree-based (the bound, the tree packing and their lowerings apply);
    UsageError otherwise."""
    coll = get(name)
    if not coll.tree_based or not coll.phases:
        raise UsageError(f"{coll.name} is not built from spanning trees; forestcoll's tree bound and generator do not apply")
    return coll


def canonical(name: str) -> str:
    """Normalise a collective name (``reducescatter`` -> ``reduce_scatter``); unknown names raise UsageError."""
    return get(name).name


def phase(name: str) -> Phase:
    """The phase called ``name`` (KeyError when there is none)."""
    return PHASES[name]


def from_msccl(coll: str) -> Collective | None:
    """The collective whose MSCCL ``coll`` attribute is ``coll`` (None for one forestcoll does not know)."""
    return next((c for c in COLLECTIVES.values() if c.msccl == coll), None)


def from_mscclpp(name: str) -> Collective | None:
    """The collective whose MSCCL++ plan ``collective`` is ``name`` (None for one forestcoll does not know)."""
    return next((c for c in COLLECTIVES.values() if c.mscclpp == name), None)


def bus_factor(collective: str | Collective, ranks: int) -> Fraction:
    """busbw / algbw as nccl-tests defines it."""
    return get(collective).bus_factor(ranks)
