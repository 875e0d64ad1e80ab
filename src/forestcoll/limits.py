"""The limits a user can hit, in one place (docs/limits.md lists them with their messages).

Each limit keeps forestcoll inside what it can hold and compute exactly on one
machine; inputs beyond one are refused with a one-line :class:`UsageError`
naming the quantity, the value and the limit, before anything large is built.

* Numbers (bandwidths, latencies, sizes written in files or on the command
  line): at most :data:`MAX_DIGITS` significant digits in a numerator or a
  denominator, magnitude between 10^-:data:`MAX_EXPONENT` and 10^:data:`MAX_EXPONENT`.
* Topologies: at most :data:`MAX_RANKS` compute nodes, :data:`MAX_NODES` nodes
  in all, and any one count (``nodes=``, ``count:``, ``n=``) at most :data:`MAX_RANKS`; ``bound``
  takes up to :data:`MAX_BOXES` identical boxes on a rail or switch fabric (:mod:`forestcoll.bound.cluster`).
* XML files: elements nested at most :data:`MAX_XML_DEPTH` deep.
* MSCCL files run or simulated: at most :data:`MAX_MSCCL_CHUNKS` chunks in one
  buffer or loop, :data:`MAX_MSCCL_CHANNELS` channels, :data:`MAX_MSCCL_GPUS`
  gpus, and the interpreter allocates at most :data:`MAX_MSCCL_ELEMENTS` elements; the MSCCL++ interpreter's
  race detector holds at most :data:`MAX_RACE_CLOCK_BYTES` of vector clocks counted dense (thread blocks and proxies
  times agents: it grows with the square of the GPUs; the export's self-check runs without it above that), dense up
  to :data:`DENSE_RACE_CLOCK_BYTES` and shared (copy-on-write parts, :mod:`forestcoll.mscclpp.clocks`) above.
* Files read (topologies, schedules, MSCCL files, MSCCL++ plans): at most :data:`MAX_FILE_BYTES` bytes unless
  the environment variable :data:`FILE_BYTES_ENV` says otherwise (:func:`forestcoll.fileio.max_file_bytes`).
* Simulations: at most :data:`MAX_SIM_TRANSFERS` transfers in one (a 1 PiB call, or ``--slice 1``, would fill
  the machine's memory); the builder refuses the next one (:class:`forestcoll.simulate.engine.ProgramBuilder`).
"""

from __future__ import annotations

from collections.abc import Callable

from forestcoll.errors import SimulationTooLarge, UsageError

__all__ = [
    "DENSE_RACE_CLOCK_BYTES", "FILE_BYTES_ENV", "MAX_BOXES", "MAX_FILE_BYTES", "MAX_DIGITS", "MAX_EXPONENT", "MAX_ITERATIONS", "MAX_JOBS", "MAX_LATENCY_US", "MAX_MSCCL_CHANNELS", "MAX_MSCCL_CHUNKS", "MAX_MSCCL_ELEMENTS", "MAX_MSCCL_GPUS",
    "MAX_NODES", "MAX_RACE_CLOCK_BYTES", "MAX_RANKS", "MAX_SEED", "MAX_SIM_BANDWIDTH_RATIO", "MAX_SIM_TRANSFERS", "MAX_SIZE", "MAX_SIZES", "MAX_XML_ATTRIBUTE", "MAX_XML_DEPTH", "Unsimulated", "check_count", "losing",
]

MAX_DIGITS = 40  # significant digits of a numerator or denominator
MAX_EXPONENT = 30  # numbers lie within 1e-30 .. 1e30 in magnitude (or are 0)
MAX_RANKS = 16_384  # compute nodes (GPUs) of one topology: 4x the largest fabrics we target
MAX_NODES = 262_144  # nodes of one topology (GPUs, NICs, switches), and any single count option
MAX_BOXES = 1 << 20  # boxes (nodes=) of a rail or switch cluster that `bound` answers without building it
MAX_MSCCL_CHUNKS = 1 << 20  # nchunksperloop and i_chunks / o_chunks / s_chunks of a file we run
MAX_MSCCL_CHANNELS = 1 << 10  # nchannels of a file we run (runtimes allow 32 to 128)
MAX_MSCCL_GPUS = 4_096  # gpus of a file we run
MAX_MSCCL_ELEMENTS = 1 << 27  # elements an interpreter (MSCCL or MSCCL++) allocates over every buffer of every gpu (~1 GiB float64)
MAX_RACE_CLOCK_BYTES = 1 << 33  # the MSCCL++ race detector's vector clocks counted dense (held shared above the next)
DENSE_RACE_CLOCK_BYTES = 1 << 31  # up to this the detector holds them dense (fastest; the process takes ~2x this)
MAX_SEED = 2**32 - 1  # --seed of msccl run: 0 .. 2^32-1
MAX_SIM_BANDWIDTH_RATIO = 10**6  # largest / smallest link bandwidth the (floating-point) simulator takes
MAX_SIM_TRANSFERS = 1 << 22  # transfers (slices over a path) one simulation builds: ~450 bytes each, ~2 GB in all
MAX_LATENCY_US = 10**6  # one link's latency: at most one second
MAX_SIZE = 2**50  # bytes of one call (--size, --sizes): 1 PiB
MAX_SIZES = 64  # sizes of one sweep (--sizes)
MAX_JOBS = 256  # worker processes of compare / generate --sizes
MAX_ITERATIONS = 1024  # pipeline iterations of msccl run
MAX_XML_ATTRIBUTE = 4_096  # characters in one XML attribute value
MAX_FILE_BYTES = 1 << 30  # bytes of one file read: 1 GiB (the largest file forestcoll writes: see docs/limits.md)
FILE_BYTES_ENV = "FORESTCOLL_MAX_FILE_BYTES"  # raises (or lowers) MAX_FILE_BYTES: bytes, or a size such as 4GiB
MAX_XML_DEPTH = 100  # nesting of elements in an XML file (NCCL topology dumps nest about 10 deep)


def check_count(value: int, what: str, limit: int = MAX_NODES, lo: int = 0) -> int:
    """``value`` when ``lo <= value <= limit``; else a one-line UsageError that states the limit."""
    if value < lo:
        raise UsageError(f"{what} must be >= {lo}, got {value}")
    if value > limit:
        raise UsageError(f"{what}: {value:,} is above forestcoll's limit of {limit:,} (see docs/limits.md)")
    return value


class Unsimulated(float):
    """The rate (GB/s) of a contender whose simulation the simulator refused (above its transfer limit,
    :class:`~forestcoll.errors.SimulationTooLarge`): 0, so it loses every comparison with a simulated rate, and
    written "not simulated" wherever a rate is formatted."""

    def __new__(cls, _value: float = 0.0) -> Unsimulated:  # (unpickling passes the value: always 0)
        return super().__new__(cls, 0.0)

    def __format__(self, spec: str) -> str:
        return "not simulated (above the simulator's transfer limit)"


def losing(rate: Callable[..., float]) -> Callable[..., float]:
    """``rate(...)`` (a simulated rate) that gives :class:`Unsimulated` where the simulation is refused for its size
    (:class:`~forestcoll.errors.SimulationTooLarge`) instead of raising; its other attributes (``ceiling``) kept."""

    def guarded(*args, **kwargs) -> float:
        try:
            return rate(*args, **kwargs)
        except SimulationTooLarge:
            return Unsimulated()
    guarded.__dict__.update(getattr(rate, "__dict__", {}))
    return guarded
