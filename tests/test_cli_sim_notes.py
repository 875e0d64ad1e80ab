"""audit18: `simulate -t DUMP` and `compare DUMP` print the importer's warnings and notes, as bound and generate do
(they were dropped: the library builds the fabric there and keeps only the topology)."""

from __future__ import annotations

import re

import pytest
from conftest import SHARED, cli

H100 = SHARED / "data" / "nccl-topo" / "H100-topology.xml"
pytestmark = pytest.mark.skipif(not H100.is_file(), reason="needs ../shared/data/nccl-topo")


def test_simulate_and_compare_print_what_the_import_says(tmp_path):
    (tmp_path / "many.xml").write_text(re.sub(r'(<nvlink[^>]*count=")(\d+)"', lambda m: f'{m.group(1)}{int(m.group(2)) * 4}"',
                                              H100.read_text()))
    for args in (["simulate", "ring", "-t", tmp_path / "many.xml", "--size", "1MiB"],
                 ["compare", tmp_path / "many.xml", "--sizes", "1MiB", "--algorithms", "ring"]):
        code, _out, err = cli(*args)
        assert code == 0 and err.startswith("forestcoll: warning:") and "lists 72 NVLinks" in err, err
    code, _out, err = cli("simulate", "ring", "-t", H100, "--bond-nic-ports", "--size", "1MiB")
    assert code == 0 and err.startswith("forestcoll: note:") and "16 -> 8 network ports" in err, err
    code, _out, err = cli("simulate", "ring", "-t", H100, "--size", "1MiB")
    assert code == 0 and err == "", err
