from decimal import Decimal
from fractions import Fraction

import pytest

from forestcoll.errors import ForestCollError
from forestcoll.rational import format_rational, lcm_of_denominators, parse_rational
from forestcoll.units import parse_bandwidth


@pytest.mark.parametrize(
    "raw, expected",
    [
        (300, Fraction(300)),
        ("20.6", Fraction(103, 5)),
        (20.6, Fraction(103, 5)),
        ("1040/3", Fraction(1040, 3)),
        (" 7 / 2 ", Fraction(7, 2)),
        ("1e3", Fraction(1000)),
        (Decimal("0.1"), Fraction(1, 10)),
        (Fraction(5, 7), Fraction(5, 7)),
        (".5", Fraction(1, 2)),
    ],
)
def test_parse_accepts_exact_forms(raw, expected):
    assert parse_bandwidth(raw) == expected


@pytest.mark.parametrize(
    "raw, message",
    [
        ("nan", "not a bandwidth"),
        (float("nan"), "not a finite number"),
        (float("inf"), "not a finite number"),
        ("inf", "not a bandwidth"),
        (0, "must be > 0"),
        ("-3", "must be > 0"),
        ("0/5", "must be > 0"),
        ("3/0", "divides by zero"),
        ("fast", "not a bandwidth"),
        (True, "expected a number"),
        (None, "expected a number"),
        ([1], "expected a number"),
    ],
)
def test_parse_rejects_bad_bandwidths(raw, message):
    with pytest.raises(ForestCollError, match=message):
        parse_bandwidth(raw, "bw")


def test_negative_rationals_are_numbers_but_not_bandwidths():
    assert parse_rational("-3/4") == Fraction(-3, 4)


def test_format_and_lcm():
    assert format_rational(Fraction(1040, 3)) == "1040/3"
    assert format_rational(Fraction(6, 2)) == "3"
    assert lcm_of_denominators([Fraction(1, 4), Fraction(5, 6), 3]) == 12
