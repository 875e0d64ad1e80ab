from fractions import Fraction

import pytest

from forestcoll.errors import ForestCollError
from forestcoll.topology.units import parse_bandwidth_with_unit as parse


@pytest.mark.parametrize(
    "text, gbps",
    [
        ("300GB/s", 300), ("300 GB/s", 300), ("25GBps", 25), ("400Gbps", 50), ("400 Gb/s", 50), ("200Gbit/s", 25),
        ("1.6Tbps", 200), ("1.6 Tb/s", 200), ("2TB/s", 2000), ("56000Mbps", 7), ("100 MB/s", Fraction(1, 10)),
        ("1GiB/s", Fraction(2**30, 10**9)), ("25", 25), ("20.6", Fraction(103, 5)), ("1040/3 GB/s", Fraction(1040, 3)),
        (900, 900), (Fraction(7, 2), Fraction(7, 2)),
    ],
)
def test_units_are_exact(text, gbps):
    assert parse(text) == gbps


@pytest.mark.parametrize(
    "text, message",
    [("10 GHz", "unknown unit 'GHz'"), ("300GBs", "unknown unit 'GBs'"), ("fast", "not a bandwidth"),
     ("-3GB/s", "must be > 0"), ("0Gbps", "must be > 0"), ("GB/s", "not a bandwidth"), ("nan", "not a bandwidth")],
)
def test_bad_bandwidths(text, message):
    with pytest.raises(ForestCollError, match=message):
        parse(text)
