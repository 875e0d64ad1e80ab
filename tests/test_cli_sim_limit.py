"""audit18: a simulation too large to hold is refused in user terms (docs/limits.md)."""

from __future__ import annotations

from conftest import cli


def test_a_simulation_too_large_to_hold_is_refused_in_user_terms(tmp_path, monkeypatch):
    """audit18: `simulate --size 1024TiB` (a size the limits take) or `--slice 1` grew without bound (GBs in
    seconds); the builder now stops at limits.MAX_SIM_TRANSFERS with one line (the limit made small here)."""
    from forestcoll import limits

    assert cli("generate", "ring:n=4", "-o", tmp_path / "s.json")[0] == 0
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 1000)
    for flags in (["--size", "1GiB"], ["--slice", "1KiB", "--size", "1MiB"]):
        code, out, err = cli("simulate", tmp_path / "s.json", *flags)
        assert code == 2 and err.count("\n") == 1 and "more than 1,000 transfers" in err and "--size" in err, err
    monkeypatch.setattr(limits, "MAX_SIM_TRANSFERS", 1 << 22)
    assert cli("simulate", tmp_path / "s.json", "--size", "1GiB")[0] == 0
