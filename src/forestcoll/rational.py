"""Exact rational numbers for bandwidths, rates and loads.

Numbers enter as ints, decimal strings (``"20.6"``), fractions (``"1040/3"``)
or JSON numbers; they are kept as :class:`fractions.Fraction` and never compared
as floats.  Floats are converted through their shortest decimal representation,
so ``20.6`` becomes exactly ``103/5``.  Quantities with units (bandwidths,
sizes, latencies) are :mod:`forestcoll.units`' job.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import reduce

from forestcoll.errors import ForestCollError

__all__ = ["format_rational", "lcm_of_denominators", "parse_rational"]

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_FRACTION = re.compile(r"^\s*([+-]?\d+)\s*/\s*(\d+)\s*$")


def parse_rational(value: object, what: str = "value") -> Fraction:
    """Return ``value`` as an exact Fraction; raise ForestCollError naming ``what`` if it is not a finite number."""
    if isinstance(value, bool):
        raise ForestCollError(f"{what}: expected a number, got {value!r}")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ForestCollError(f"{what}: {value} is not a finite number")
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ForestCollError(f"{what}: {value} is not a finite number")
        return Fraction(repr(value))
    if isinstance(value, str):
        text = value.strip()
        m = _FRACTION.match(text)
        if m:
            num, den = int(m.group(1)), int(m.group(2))
            if den == 0:
                raise ForestCollError(f"{what}: {value!r} divides by zero")
            return Fraction(num, den)
        if _NUMBER.match(text):
            try:
                return Fraction(Decimal(text))
            except (InvalidOperation, ValueError):  # pragma: no cover - regex guards this
                pass
        raise ForestCollError(f"{what}: {value!r} is not a number (use e.g. 300, \"20.6\" or \"1040/3\")")
    raise ForestCollError(f"{what}: expected a number, got {type(value).__name__}")


def format_rational(x: Fraction | int) -> str:
    """Write ``x`` as ``"p/q"`` (or ``"p"`` when it is an integer)."""
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


def lcm_of_denominators(values) -> int:
    """Least common multiple of the denominators of ``values`` (1 for none)."""
    return reduce(math.lcm, (Fraction(v).denominator for v in values), 1)

