"""polish20: ``simulate`` and ``compare`` with a topology file read it once: the command line imports it (to print the
importer's notes, which the library drops) and hands the library the Imported, not the path to read again."""

from __future__ import annotations

import os

import pytest
from conftest import ROOT, cli

from forestcoll import fileio

BOX = ROOT / "examples" / "four-gpu-box.xml"
NOTE = "one box (nodes=1): the fabric 'rail' joins boxes and changes nothing here"


@pytest.fixture
def reads(monkeypatch):
    """The base names of the files read through fileio.read_bytes (every reader's one way in)."""
    seen: list[str] = []
    real = fileio.read_bytes

    def counted(path, what="file"):
        seen.append(os.path.basename(str(path)))
        return real(path, what)

    monkeypatch.setattr(fileio, "read_bytes", counted)
    return seen


@pytest.mark.parametrize("argv", [
    ["simulate", "ring", "-t", BOX, "--fabric", "rail", "--size", "1MiB"],
    ["compare", f"{BOX}:fabric=rail", "--sizes", "1MiB", "--algorithms", "ring"],
])
def test_the_topology_file_is_read_once_and_its_note_printed_once(argv, reads):
    code, out, err = cli(*argv)
    assert code == 0, err
    assert reads.count(BOX.name) == 1, reads
    assert err.count(NOTE) == 1 and "4 ranks" in out, err


def test_a_schedule_on_another_fabric_names_the_file_given(tmp_path, monkeypatch, reads):
    """The fingerprint refusal still names the spec the user gave (the Imported keeps it)."""
    monkeypatch.chdir(tmp_path)
    assert cli("generate", "ring:n=4", "-o", "s.json")[0] == 0
    code, out, err = cli("simulate", "s.json", "-t", f"{BOX}:fabric=rail", "--size", "1MiB")
    assert code == 2 and f"error: {BOX}:fabric=rail is not the fabric this schedule was made for (ring:n=4)" in err, err
    assert reads.count(BOX.name) == 1


def test_an_imported_topology_is_loaded_as_it_is():
    from forestcoll.errors import TopologyError
    from forestcoll.topology import import_topology, load_topology

    imported = import_topology(f"{BOX}:fabric=rail")
    assert imported.spec == f"{BOX}:fabric=rail" and import_topology(imported) is imported
    assert load_topology(imported) is imported.topology
    with pytest.raises(TopologyError):
        import_topology(imported, {"nodes": "2"})
