"""Exact rational numbers for bandwidths, rates and loads.

Numbers enter as ints, decimal strings (``"20.6"``), fractions (``"1040/3"``)
or JSON numbers; they are kept as :class:`fractions.Fraction` and never compared
as floats.  Floats are converted through their shortest decimal representation,
so ``20.6`` becomes exactly ``103/5``.  A number has at most
:data:`~forestcoll.limits.MAX_DIGITS` significant digits in its numerator and
denominator and a magnitude within 10^+-:data:`~forestcoll.limits.MAX_EXPONENT`
(or is 0); others are refused before any big integer is built.  Quantities with units (bandwidths,
sizes, latencies) are :mod:`forestcoll.units`' job.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import reduce

from forestcoll.errors import ForestCollError
from forestcoll.limits import MAX_DIGITS, MAX_EXPONENT

__all__ = ["format_rational", "lcm_of_denominators", "parse_rational"]

_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_FRACTION = re.compile(r"^\s*([+-]?\d+)\s*/\s*(\d+)\s*$")


_LIMIT_TEXT = f"at most {MAX_DIGITS} significant digits, magnitude 1e-{MAX_EXPONENT} to 1e{MAX_EXPONENT}"


def _too_big(what: str, value: object) -> ForestCollError:
    text = str(value)
    shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
    return ForestCollError(f"{what}: {shown} is outside the numbers forestcoll takes ({_LIMIT_TEXT})")


def _check_decimal(value: Decimal, what: str, original: object) -> None:
    """Refuse, from the digits and exponent alone, a Decimal outside the limits (no big integer is built)."""
    if not value.is_finite():
        raise ForestCollError(f"{what}: {original} is not a finite number")
    if value.is_zero():
        return
    digits = value.normalize().as_tuple().digits
    if len(digits) > MAX_DIGITS or not -MAX_EXPONENT <= value.adjusted() <= MAX_EXPONENT:
        raise _too_big(what, original)


def _check_fraction(x: Fraction, what: str, original: object) -> Fraction:
    if x and (len(str(abs(x.numerator))) > MAX_DIGITS or len(str(x.denominator)) > MAX_DIGITS
              or not Fraction(1, 10**MAX_EXPONENT) <= abs(x) < 10 ** (MAX_EXPONENT + 1)):
        raise _too_big(what, original)
    return x


def parse_rational(value: object, what: str = "value") -> Fraction:
    """Return ``value`` as an exact Fraction; raise ForestCollError naming ``what`` if it is not a finite number
    or lies outside the limits above."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * MAX_DIGITS:
        raise _too_big(what, f"an integer of {value.bit_length()} bits")
    if isinstance(value, str) and len(value) > 4 * MAX_DIGITS:
        raise _too_big(what, value)
    if isinstance(value, Decimal):
        _check_decimal(value, what, value)
    return _check_fraction(_parse(value, what), what, value)


def _parse(value: object, what: str) -> Fraction:
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
            if len(m.group(1).lstrip("+-0")) > MAX_DIGITS or len(m.group(2).lstrip("0")) > MAX_DIGITS:
                raise _too_big(what, value)
            num, den = int(m.group(1)), int(m.group(2))
            if den == 0:
                raise ForestCollError(f"{what}: {value!r} divides by zero")
            return Fraction(num, den)
        if _NUMBER.match(text):
            try:
                number = Decimal(text)
                _check_decimal(number, what, value)
                return Fraction(number)
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

