"""Bandwidths with units, kept exact: ``"300GB/s"``, ``"400Gbps"``, ``"1.6 Tb/s"``, ``"25"`` (GB/s).

GB/s means 10^9 bytes per second, the unit of every bandwidth inside forestcoll.
Bits are converted at 8 per byte, decimal prefixes at powers of ten, binary
prefixes (GiB/s) at powers of two, all as exact fractions.
"""

from __future__ import annotations

import re
from fractions import Fraction

from forestcoll.errors import ForestCollError
from forestcoll.rational import parse_bandwidth

_DECIMAL = {"k": Fraction(1, 10**6), "m": Fraction(1, 10**3), "g": Fraction(1), "t": Fraction(10**3)}
_BINARY = {"ki": Fraction(2**10, 10**9), "mi": Fraction(2**20, 10**9), "gi": Fraction(2**30, 10**9), "ti": Fraction(2**40, 10**9)}

UNITS_HELP = "GB/s, GBps, GiB/s, MB/s, TB/s, Gb/s, Gbps, Gbit/s, Mb/s, Mbps, Tb/s, Tbps (a bare number is GB/s)"

_PATTERN = re.compile(
    r"^\s*(?P<num>[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?\d+\s*/\s*\d+)\s*"
    r"(?P<unit>[A-Za-z/]*)\s*$"
)
# prefix (k, M, G, T, optionally binary "i"), then B (bytes) or b (bits), then /s or ps (or bit/s)
_UNIT = re.compile(r"^(?P<prefix>[kKmMgGtT]i?)(?:(?P<bytes>B/s|Bps)|(?P<bits>b/s|bps|bit/s|bits/s))$")


def _unit_factor(unit: str) -> Fraction | None:
    """GB/s per one of ``unit`` (None when the unit is not known); an empty unit is GB/s."""
    if unit == "":
        return Fraction(1)
    m = _UNIT.match(unit)
    if not m:
        return None
    prefix = m.group("prefix").lower()
    scale = _BINARY[prefix] if prefix.endswith("i") else _DECIMAL[prefix]
    return scale / 8 if m.group("bits") else scale


def parse_bandwidth_with_unit(value: object, what: str = "bandwidth") -> Fraction:
    """A positive exact bandwidth in GB/s from a number (GB/s) or a string with a unit."""
    if isinstance(value, str):
        m = _PATTERN.match(value)
        if not m:
            raise ForestCollError(f"{what}: {value!r} is not a bandwidth (use e.g. \"300GB/s\", \"400Gbps\" or 25)")
        factor = _unit_factor(m.group("unit"))
        if factor is None:
            raise ForestCollError(f"{what}: unknown unit {m.group('unit')!r} in {value!r}; use {UNITS_HELP}")
        return parse_bandwidth(m.group("num").replace(" ", ""), what) * factor
    return parse_bandwidth(value, what)
