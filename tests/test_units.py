from fractions import Fraction

import pytest

from forestcoll.errors import ForestCollError
from forestcoll.units import format_size, parse_class_latencies, parse_latency, parse_size, parse_sizes
from forestcoll.units import parse_bandwidth as parse


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


def test_sizes():
    assert parse_size("1GiB") == 1 << 30 and parse_size("512MB") == 512 * 10**6 and parse_size("4096") == 4096
    assert parse_size("1.5MiB") == 3 << 19
    assert parse_sizes("1MiB..8MiB") == [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    assert parse_sizes("8MiB,1MiB") == [1 << 20, 8 << 20]
    assert format_size(1 << 30) == "1GiB" and format_size(1000) == "1000B"
    for bad in ("lots", "1.3B", "0", "-4MiB", "2XB"):
        with pytest.raises(Exception, match="bad size"):
            parse_size(bad)


def test_latencies():
    assert parse_latency("0.7") == Fraction(7, 10) and parse_latency(2) == 2 and parse_latency("500ns") == Fraction(1, 2)
    assert parse_latency("1 ms") == 1000 and parse_latency("0") == 0
    for bad, message in (("-1", "must be >= 0"), ("3 hours", "not a latency"), ("soon", "not a latency")):
        with pytest.raises(ForestCollError, match=message):
            parse_latency(bad)
    assert parse_class_latencies("net=3, nvlink=0.5") == {"net": 3.0, "nvlink": 0.5}
    assert parse_class_latencies(None) == {} and parse_class_latencies("ib=2us") == {"ib": 2.0}
    for bad, message in (("net", "expects CLASS=MICROSECONDS"), ("net=x", "'x' is not a number"), ("net=-2", "must be >= 0")):
        with pytest.raises(ForestCollError, match=message):
            parse_class_latencies(bad)


def test_spec_options_take_units_as_files_do():
    from forestcoll import load_topology

    assert load_topology("dgx-h100:nic_bw=400Gbps") == load_topology("dgx-h100:nic_bw=50")
    assert load_topology("ring:n=4,bw=1.6Tbps") == load_topology("ring:n=4,bw=200")

