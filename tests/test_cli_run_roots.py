"""audit18: `mscclpp run --root` outside the plan was an internal error (IndexError; -1 checked the last GPU), and
with an unrooted plan it was ignored; `msccl run --show -1` was taken.  Now one line, exit 2, as `msccl run`."""

from __future__ import annotations

import pytest
from conftest import cli


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    d = tmp_path_factory.mktemp("roots")
    for coll in ("broadcast", "allreduce"):
        assert cli("generate", "ring:n=4", "-c", coll, "-o", d / f"{coll}.json")[0] == 0
        assert cli("export", d / f"{coll}.json", "-o", d / f"{coll}.plan.json", "--no-check")[0] == 0
        assert cli("export", d / f"{coll}.json", "-o", d / f"{coll}.xml", "--no-check")[0] == 0
    return d


@pytest.mark.parametrize("plan, root, words", [
    ("broadcast", "99", "root 99 is not a GPU of this 4-GPU plan"),
    ("broadcast", "-1", "root -1 is not a GPU"),
    ("allreduce", "0", "--root is for broadcast and reduce plans"),
])
def test_mscclpp_run_checks_the_root(plans, plan, root, words):
    code, out, err = cli("mscclpp", "run", plans / f"{plan}.plan.json", "--root", root)
    assert code == 2 and err.count("\n") == 1 and words in err and "internal error" not in err, err


def test_mscclpp_run_with_the_right_root_passes(plans):
    code, out, err = cli("mscclpp", "run", plans / "broadcast.plan.json", "--root", "0")
    assert code == 0, err


def test_msccl_run_refuses_a_negative_show(plans):
    code, out, err = cli("msccl", "run", plans / "allreduce.xml", "--show", "-1")
    assert code == 2 and "--show must be >= 0" in err, err


@pytest.mark.parametrize("count", ["0", "-5"])
def test_msccl_run_refuses_a_count_below_one(plans, count):
    code, out, err = cli("msccl", "run", plans / "allreduce.xml", "--count", count)
    assert code == 2 and f"--count must be >= 1, got {count}" in err, err
