"""Quantities with units, parsed exactly in one place: bandwidths, sizes and latencies.

Every quantity a user writes (command line, spec option, YAML, JSON) goes
through this module, so ``dgx-h100:nic_bw=400Gbps`` means on the command line
what ``nic_bw: 400Gbps`` means in a topology file.

* Bandwidth, in GB/s (10^9 bytes per second, the unit of every bandwidth inside
  forestcoll): a bare number (``25``, ``"20.6"``, ``"1040/3"``) or a number with
  a unit (:data:`BANDWIDTH_UNITS_HELP`); bits count 8 to a byte, decimal
  prefixes are powers of ten, binary ones (GiB/s) powers of two.  Exact, > 0.
* Size, in bytes: ``4096``, ``"512MB"``, ``"1.5MiB"`` (case-insensitive; K, M,
  G, T decimal, KiB ... TiB binary).  A whole number >= 1.
* Latency, in microseconds: a bare number or one with ``ns``, ``us``, ``ms`` or
  ``s``.  Exact, >= 0.

Numbers are kept as :class:`fractions.Fraction` (via :func:`forestcoll.rational.parse_rational`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from forestcoll.errors import ForestCollError, UsageError
from forestcoll.limits import MAX_LATENCY_US, MAX_SIZE, MAX_SIZES
from forestcoll.rational import format_rational, parse_rational

__all__ = [
    "BANDWIDTH_UNITS_HELP",
    "format_size",
    "parse_bandwidth",
    "parse_class_latencies",
    "parse_latency",
    "parse_size",
    "parse_sizes",
    "split_quantity",
]

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?\d+\s*/\s*\d+"
_QUANTITY = re.compile(rf"^\s*(?P<num>{_NUMBER})\s*(?P<unit>[A-Za-z/µ]*)\s*$")


def split_quantity(text: str) -> tuple[str, str] | None:
    """``"400 Gbps"`` -> ``("400", "Gbps")``; ``"1040/3"`` -> ``("1040/3", "")``; None when it is not number + unit."""
    m = _QUANTITY.match(text)
    return (m.group("num").replace(" ", ""), m.group("unit")) if m else None


# ----- bandwidth ---------------------------------------------------------------------------------

BANDWIDTH_UNITS_HELP = "GB/s, GBps, GiB/s, MB/s, TB/s, Gb/s, Gbps, Gbit/s, Mb/s, Mbps, Tb/s, Tbps (a bare number is GB/s)"
_DECIMAL = {"k": Fraction(1, 10**6), "m": Fraction(1, 10**3), "g": Fraction(1), "t": Fraction(10**3)}
_BINARY = {"ki": Fraction(2**10, 10**9), "mi": Fraction(2**20, 10**9), "gi": Fraction(2**30, 10**9), "ti": Fraction(2**40, 10**9)}
# prefix (k, M, G, T, optionally binary "i"), then B (bytes) or b (bits), then /s or ps (or bit/s)
_BANDWIDTH_UNIT = re.compile(r"^(?P<prefix>[kKmMgGtT]i?)(?:(?P<bytes>B/s|Bps)|(?P<bits>b/s|bps|bit/s|bits/s))$")


def _bandwidth_factor(unit: str) -> Fraction | None:
    """GB/s per one of ``unit`` (None when the unit is not known); an empty unit is GB/s."""
    if unit == "":
        return Fraction(1)
    m = _BANDWIDTH_UNIT.match(unit)
    if not m:
        return None
    prefix = m.group("prefix").lower()
    scale = _BINARY[prefix] if prefix.endswith("i") else _DECIMAL[prefix]
    return scale / 8 if m.group("bits") else scale


def parse_bandwidth(value: object, what: str = "bandwidth") -> Fraction:
    """A positive exact bandwidth in GB/s from a number (GB/s) or a string with a unit."""
    if isinstance(value, str):
        found = split_quantity(value)
        if found is None:
            raise ForestCollError(f"{what}: {value!r} is not a bandwidth (a number of GB/s such as 300, \"20.6\" or "
                                  "\"1040/3\", or one with a unit such as \"400Gbps\")")
        number, unit = found
        factor = _bandwidth_factor(unit)
        if factor is None:
            raise ForestCollError(f"{what}: unknown unit {unit!r} in {value!r}; use {BANDWIDTH_UNITS_HELP}")
        bw = parse_rational(number, what) * factor
    else:
        bw = parse_rational(value, what)
    if bw <= 0:
        raise ForestCollError(f"{what}: must be > 0, got {format_rational(bw)}")
    return bw


# ----- latency -----------------------------------------------------------------------------------

_LATENCY_UNITS = {"": Fraction(1), "us": Fraction(1), "µs": Fraction(1), "ns": Fraction(1, 1000), "ms": Fraction(1000),
                  "s": Fraction(10**6)}


def parse_latency(value: object, what: str = "latency") -> Fraction:
    """An exact latency >= 0 in microseconds from a number (microseconds) or a string with ns / us / ms / s."""
    if isinstance(value, str):
        found = split_quantity(value)
        if found is None or found[1] not in _LATENCY_UNITS:
            raise ForestCollError(f"{what}: {value!r} is not a latency (microseconds, or a number with ns, us, ms or s)")
        lat = parse_rational(found[0], what) * _LATENCY_UNITS[found[1]]
    else:
        lat = parse_rational(value, what)
    if lat < 0:
        raise ForestCollError(f"{what}: must be >= 0, got {format_rational(lat)}")
    if lat > MAX_LATENCY_US:
        raise ForestCollError(f"{what}: {format_rational(lat)} us is above forestcoll's limit of 1 s (see docs/limits.md)")
    return lat


def parse_class_latencies(text: str | None, what: str = "--latency") -> dict[str, float]:
    """``"net=3,nvlink=0.5"`` -> per link class latency in microseconds (the simulator's override table)."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise UsageError(f"{what} expects CLASS=MICROSECONDS,..., got {item!r}")
        cls, value = item.split("=", 1)
        if not cls.strip():
            raise UsageError(f"{what} {item!r}: the link class before '=' is empty (e.g. nvlink=0.5)")
        try:
            lat = parse_latency(value.strip(), what)
        except ForestCollError as exc:
            if "must be >= 0" in str(exc):
                raise UsageError(f"{what} {item!r}: must be >= 0") from None
            if "outside the numbers" in str(exc) or "limit of 1 s" in str(exc):
                raise UsageError(f"{what} {item!r}: {str(exc).split(': ', 1)[1]}") from None
            raise UsageError(f"{what} {item!r}: {value!r} is not a number") from None
        out[cls.strip()] = float(lat)
    return out


# ----- size --------------------------------------------------------------------------------------

_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
               "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def parse_size(text: str) -> int:
    """Bytes in "1GiB", "512MB", "4096", "1.5MiB" (binary and decimal units)."""
    found = split_quantity(str(text))
    if found is None or found[1].lower() not in _SIZE_UNITS:
        raise UsageError(f"bad size {text!r}: expected a number of bytes such as 1GiB, 256MB or 4096")
    try:
        value = parse_rational(found[0]) * _SIZE_UNITS[found[1].lower()]
    except ForestCollError:
        raise UsageError(f"bad size {text!r}: expected a number of bytes such as 1GiB, 256MB or 4096") from None
    if value < 1 or value.denominator != 1:
        raise UsageError(f"bad size {text!r}: must be a whole number of bytes >= 1")
    if value > MAX_SIZE:
        raise UsageError(f"bad size {text!r}: above forestcoll's limit of 2^50 bytes (1024 TiB; see docs/limits.md)")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """"1MiB..1GiB" (every power of two times the first, up to the last), or a comma list."""
    if ".." in text:
        lo_text, hi_text = text.split("..", 1)
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if hi < lo:
            raise UsageError(f"bad size range {text!r}: the end is below the start")
        sizes = []
        s = lo
        if hi // lo >= 2**MAX_SIZES:
            raise UsageError(f"bad size range {text!r}: more than {MAX_SIZES} sizes")
        while s <= hi:
            sizes.append(s)
            s *= 2
        return sizes
    sizes = sorted({parse_size(t) for t in text.split(",") if t.strip()})
    if not sizes:
        raise UsageError("no sizes given")
    if len(sizes) > MAX_SIZES:
        raise UsageError(f"{len(sizes)} sizes given; at most {MAX_SIZES}")
    return sizes


def format_size(n: int) -> str:
    """1073741824 -> "1GiB"; non-round sizes in bytes."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"
