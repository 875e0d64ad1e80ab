"""Issue 16, items 3-6: errors that name the mistake, dead ends opened, one default collective, gaps explained.

Every bad input is one line on stderr, exit 2, no traceback; each case checks the words a user needs (what
was given, what was expected, what to run instead)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT, cli, shared_file

from forestcoll.fileio import file_kind


def one_line(code: int, out: str, err: str, *texts: str) -> str:
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("forestcoll: error: ") and "Traceback" not in err, err
    for text in texts:
        assert text in err, (text, err)
    return err


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """One file of each kind forestcoll reads (small: a 4-rank ring)."""
    d = tmp_path_factory.mktemp("kinds")
    out = {"schedule": d / "sched.json", "msccl": d / "algo.xml", "mscclpp-plan": d / "plan.json",
           "topology": d / "topo.json", "alltoall-schedule": d / "a2a.json"}
    assert cli("generate", "ring:n=4", "-o", out["schedule"])[0] == 0
    assert cli("export", out["schedule"], "-o", out["msccl"], "--no-check")[0] == 0
    assert cli("export", out["schedule"], "-o", out["mscclpp-plan"], "--no-check")[0] == 0
    assert cli("topo", "export", "ring:n=4", "-o", out["topology"])[0] == 0
    assert cli("generate", "ring:n=4", "-c", "alltoall", "-o", out["alltoall-schedule"])[0] == 0
    out["topology-declarative"] = ROOT / "docs" / "examples" / "mixed-cluster.yaml"
    (d / "dump.xml").write_text('<system version="1">\n  <cpu numaid="0">\n  </cpu>\n</system>\n')
    out["nccl-topology"] = d / "dump.xml"
    (d / "other.json").write_text('{"hello": 1}')
    out["json"] = d / "other.json"
    return out


# ----- item 5: the kind of a file, told by content ----------------------------------------------------------


def test_file_kind_tells_every_kind_apart(files):
    for kind, path in files.items():
        assert file_kind(path).name == kind, path


def test_file_kind_ignores_the_name(files, tmp_path):
    disguised = tmp_path / "looks-like-a-plan.xml"
    disguised.write_text(files["schedule"].read_text())
    assert file_kind(disguised).name == "schedule"
    commented = tmp_path / "c.xml"
    commented.write_text("<!-- a comment <system> -->\n" + files["msccl"].read_text())
    assert file_kind(commented).name == "msccl"


def test_real_nccl_dump_is_a_topology():
    assert file_kind(shared_file("data", "nccl-topo", "H100-topology.xml")).name == "nccl-topology"


@pytest.mark.parametrize("args, kind, texts", [
    (("verify", "{msccl}"), "msccl", ("is an MSCCL algorithm XML, not a schedule JSON", "forestcoll msccl run",
                                      "forestcoll msccl lint")),
    (("verify", "{mscclpp-plan}"), "mscclpp-plan", ("is an MSCCL++ execution plan, not a schedule",
                                                    "forestcoll mscclpp run")),
    (("verify", "{topology}"), "topology", ("is a topology (nodes/links JSON), not a schedule", "forestcoll bound")),
    (("export", "{topology-declarative}", "-o", "{tmp}/x.json"), "topology-declarative",
     ("is a topology (boxes and fabric), not a schedule",)),
    (("verify", "{nccl-topology}"), "nccl-topology", ("is an NCCL/RCCL topology dump, not a schedule",
                                                      "forestcoll topo import")),
    (("generate", "{schedule}"), "schedule", ("is a forestcoll schedule, not a topology", "forestcoll verify")),
    (("bound", "{mscclpp-plan}"), "mscclpp-plan", ("is an MSCCL++ execution plan, not a topology",)),
    (("bound", "{msccl}"), "msccl", ("is an MSCCL algorithm XML, not an NCCL/RCCL topology dump",
                                     "forestcoll msccl run")),
    (("simulate", "ring", "-t", "{alltoall-schedule}"), "alltoall-schedule",
     ("is a forestcoll all-to-all schedule, not a topology",)),
    (("simulate", "{topology}"), "topology", ("not a schedule, plan or MSCCL file", "forestcoll simulate ring -t")),
    (("simulate", "{topology-declarative}"), "topology-declarative", ("not a schedule, plan or MSCCL file",)),
    (("msccl", "run", "{schedule}"), "schedule", ("is a forestcoll schedule, not an MSCCL algorithm XML",)),
    (("msccl", "lint", "{mscclpp-plan}"), "mscclpp-plan", ("is an MSCCL++ execution plan, not an MSCCL algorithm",)),
    (("mscclpp", "run", "{msccl}"), "msccl", ("is an MSCCL algorithm XML, not an MSCCL++ execution plan",)),
    (("mscclpp", "lint", "{schedule}"), "schedule", ("is a forestcoll schedule, not an MSCCL++ execution plan",)),
    (("topo", "import", "{msccl}"), "msccl", ("is an MSCCL algorithm XML, not an NCCL/RCCL topology dump",)),
    (("simulate", "{mscclpp-plan}", "-t", "ring:n=4", "--trees", "{msccl}"), "msccl",
     ("is an MSCCL algorithm XML, not a schedule JSON",)),
])
def test_a_file_of_another_kind_says_what_was_given_and_expected(files, tmp_path, args, kind, texts):
    names = {k: str(v) for k, v in files.items()} | {"tmp": str(tmp_path)}
    code, out, err = cli(*(a.format(**names) for a in args))
    one_line(code, out, err, str(files[kind]), *texts)
    assert not (tmp_path / "x.json").exists()


def test_simulate_a_misspelt_baseline_lists_the_baselines():
    err = one_line(*cli("simulate", "rng", "-t", "ring:n=4"), "did you mean ring?", "ring, double-binary-tree, "
                   "hierarchical, direct")
    assert "no such file" in err
    err = one_line(*cli("simulate", "zzzz", "-t", "ring:n=4"), "baselines: ring")
    assert "did you mean" not in err


def test_a_misspelt_builtin_gets_did_you_mean_not_the_whole_list():
    err = one_line(*cli("bound", "dgx-a10"), "did you mean dgx-a100?")
    assert "hypercube" not in err  # not the whole list
    one_line(*cli("generate", "dgx-h100:node=2"), "did you mean nodes?")
    one_line(*cli("bound", "zzzz"), "built-ins: ", "topo list")


def test_a_plain_node_without_kind_is_refused_by_name(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"nodes": [{"name": "g0", "kind": "compute"}, {"name": "g1"}],
                                "links": [{"src": "g0", "dst": "g1", "bandwidth": 1},
                                          {"src": "g1", "dst": "g0", "bandwidth": 1}]}))
    one_line(*cli("bound", path), "nodes[1] (g1): missing 'kind'", "'compute'", "'switch'")


# ----- item 3: dead ends -----------------------------------------------------------------------------------


def test_an_imported_box_replicates_like_its_dump(tmp_path):
    from forestcoll.topology import fingerprint, load_topology

    dump = shared_file("data", "nccl-topo", "H100-topology.xml")
    box = tmp_path / "h100.json"
    assert cli("topo", "import", dump, "-o", box)[0] == 0
    assert json.loads(box.read_text())["ports"][0] == {"node": "n0.nic0", "bandwidth": "45/2"}
    code, out, err = cli("bound", box, "--nodes", "4", "--fabric", "rail", "-c", "allgather")
    assert code == 0 and "67008/155 GB/s" in out, err  # the README's figure for the dump itself
    same = [load_topology(f"{p}:nodes=4,fabric=rail") for p in (box, dump)]
    assert fingerprint(same[0]) == fingerprint(same[1])
    mixed = tmp_path / "mixed.yaml"  # the JSON as a declarative file's box, beside the dump itself
    mixed.write_text(f"boxes:\n  - import: h100.json\n    count: 2\n  - import: {dump}\n    count: 2\nfabric: rail\n")
    assert fingerprint(load_topology(str(mixed))) == fingerprint(same[1])
    again = tmp_path / "again.json"
    assert cli("topo", "export", box, "-o", again)[0] == 0 and again.read_text() == box.read_text()


def test_a_box_written_out_replicates(tmp_path):
    """A hand-written plain file with ports: two GPUs on an NVLink, each with its NIC port."""
    path = tmp_path / "pair.json"
    path.write_text(json.dumps({
        "nodes": [{"name": "g0", "kind": "compute"}, {"name": "g1", "kind": "compute"}],
        "links": [{"src": "g0", "dst": "g1", "bandwidth": 100}, {"src": "g1", "dst": "g0", "bandwidth": 100}],
        "ports": [{"node": "g0", "bandwidth": 10}, {"node": "g1", "bandwidth": 10}]}))
    code, out, err = cli("topo", "show", path, "--nodes", "3", "--fabric", "rail", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["compute_nodes"], shown["switch_nodes"], shown["boxes"]) == (6, 2, 3)
    one_line(*cli("bound", path, "--nodes", "2", "--fabric", "ring"), "--fabric")  # argparse's choices
    one_line(*cli("bound", f"{path}:nodes=2,spine=3"), "unknown option 'spine'")


def test_replicating_a_file_without_ports_or_with_many_boxes_says_what_to_do(tmp_path):
    ring = tmp_path / "ring.json"
    assert cli("topo", "export", "ring:n=4", "-o", ring)[0] == 0
    one_line(*cli("bound", ring, "--nodes", "2"), "without 'ports' cannot be replicated", "forestcoll topo import")
    two = tmp_path / "two.json"
    assert cli("topo", "export", "dgx-h100:nodes=2", "-o", two)[0] == 0
    one_line(*cli("generate", two, "--nodes", "2"), "already holds 2 boxes")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**json.loads(ring.read_text()), "ports": [{"node": "nowhere", "bandwidth": 1}]}))
    one_line(*cli("bound", bad), "ports[0]", "'nowhere'")


@pytest.mark.parametrize("name", ["out.json", "plans.XML", "x.yaml"])
def test_sizes_refuses_a_file_name_as_its_directory(tmp_path, name):
    target = tmp_path / name
    one_line(*cli("generate", "ring:n=4", "--sizes", "1MiB..2MiB", "--format", "mscclpp", "-o", target),
             "looks like a file name", "give a directory")
    assert not target.exists()


# ----- item 4: one default collective, names in help and lists ---------------------------------------------


@pytest.mark.parametrize("command", [("bound",), ("generate",), ("simulate",), ("compare",), ("topo", "draw")])
def test_every_collective_flag_defaults_to_allreduce(command):
    from forestcoll.cli import build_parser

    parser = build_parser()
    args = {"bound": ["bound", "x"], "generate": ["generate", "x"], "simulate": ["simulate", "x"],
            "compare": ["compare", "x"], "topo": ["topo", "draw", "x", "-o", "x.png"]}[command[0]]
    assert parser.parse_args(args).collective == "allreduce"
    code, out, _ = cli(*command, "--help")
    assert code == 0 and "allreduce (default)" in " ".join(out.split())


def test_human_outputs_name_the_collective(tmp_path):
    code, out, _ = cli("bound", "ring:n=4")
    assert code == 0 and "collective      allreduce" in out
    code, out, _ = cli("generate", "ring:n=4")
    assert code == 0 and "collective allreduce" in out
    code, out, _ = cli("simulate", "ring", "-t", "ring:n=4", "--size", "1MiB")
    assert code == 0 and "ring: allreduce on" in out
    code, out, _ = cli("topo", "draw", "ring:n=4", "--cut", "-o", tmp_path / "r.svg")
    assert code == 0 and "allreduce bottleneck cut" in out


def test_compare_help_lists_the_baselines_simulate_takes():
    from forestcoll.simulate.alltoall import BASELINES as ALLTOALL
    from forestcoll.simulate.baselines import BASELINES

    for command in ("compare", "simulate"):
        text = "".join(cli(command, "--help")[1].split())  # argparse wraps lines, at hyphens too
        assert all(name in text for name in (*BASELINES, *ALLTOALL)), command
    assert "forestcoll-k1" in "".join(cli("compare", "--help")[1].split())


def test_topo_list_options_shows_the_real_fabric_defaults():
    code, out, _ = cli("topo", "list", "--options")
    assert code == 0 and "=None" not in out
    blocks = {}
    name = None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            name = line.split()[0]
        elif name:
            blocks.setdefault(name, []).append(line.strip())
    fabric = {n: next(x for x in lines if x.startswith("fabric=")) for n, lines in blocks.items()
              if any(x.startswith("fabric=") for x in lines)}
    assert fabric["dgx-a100"].startswith("fabric=rail") and "ib0, ib1" in fabric["dgx-a100"]
    assert fabric["dgx-h100"].startswith("fabric=rail")
    assert fabric["mi250"].startswith("fabric=switch") and "'ib'" in fabric["mi250"]
    assert fabric["hetero"].startswith("fabric=switch")
    assert "rails=2" in blocks["dgx-a100"][[x.startswith("rails=") for x in blocks["dgx-a100"]].index(True)]


def test_the_fabric_default_shown_is_the_one_built():
    """What topo list says for dgx-a100 (rail over ib0, ib1) is what nodes=2 builds, and fabric=rail names it."""
    from forestcoll.topology import fingerprint, load_topology

    built = load_topology("dgx-a100:nodes=2")
    assert {"ib0", "ib1"} <= {n.name for n in built.nodes}
    assert fingerprint(built) == fingerprint(load_topology("dgx-a100:nodes=2,fabric=rail"))


# ----- item 6: why an MSCCL file simulates slower than its trees --------------------------------------------


def test_size_notes_say_when_the_runtime_would_not_use_the_file():
    from forestcoll.msccl.ir import Algo
    from forestcoll.simulate.msccl import size_notes

    algo = Algo("a", "Simple", 1, 208, 16, "allreduce", 1, 1)
    (note,) = size_notes(algo, 1 << 30)
    assert "would not use this file for a 1GiB call" in note and "multiples of 832 bytes" in note
    assert "1073741760 and 1073742592" in note
    assert size_notes(algo, 832 * 1000) == []
    assert "range is" in size_notes(Algo("a", "Simple", 1, 16, 16, "allreduce", 1, 1, 0, 4096), 1 << 20)[0]


def test_serialisation_note_only_when_the_time_is_well_above_the_links():
    from forestcoll.msccl.ir import Algo
    from forestcoll.simulate.msccl import SLOWER, serialisation_notes

    algo = Algo("a", "Simple", 2, 8, 4, "allreduce", 1, 1)
    assert serialisation_notes(algo, 1.0, 1.0, 1 << 20, 1) == []
    assert serialisation_notes(algo, SLOWER * 0.99, 1.0, 1 << 20, 1) == []
    (note,) = serialisation_notes(algo, 2.0, 1.0, 1 << 20, 1)
    assert "2.0x" in note and "each thread block runs its steps in order" in note and "2 channel(s)" in note


def test_simulate_msccl_explains_its_gap(tmp_path):
    """dgx-1 allreduce (k with 1296 chunks per loop) at 1 MiB: the runtime would not take that size, and the file
    is well below its links; a 4-ring file at 64 MiB is near its links and gets no note."""
    sched, xml = tmp_path / "s.json", tmp_path / "s.xml"
    assert cli("generate", "dgx-1", "-o", sched)[0] == 0
    assert cli("export", sched, "-o", xml, "--no-check")[0] == 0
    code, out, err = cli("simulate", xml, "-t", "dgx-1", "--size", "1MiB")
    assert code == 0, err
    notes = [line for line in out.splitlines() if line.startswith("note")]
    assert len(notes) == 2 and "would not use this file for a 1MiB call" in notes[0]
    assert "each thread block runs its steps in order" in notes[1]
    data = json.loads(cli("simulate", xml, "-t", "dgx-1", "--size", "1MiB", "--json")[1])
    assert len(data["notes"]) == 2
    code, out, err = cli("simulate", xml, "-t", "dgx-1", "--size", "1MiB", "--trees", sched)
    assert code == 0 and "note       the schedule as trees (" in out and "of its trees" in out, err
    one_line(*cli("simulate", "ring", "-t", "dgx-1", "--trees", sched), "not a baseline")
    code, out, err = cli("msccl", "run", xml, "--bytes", "1048576", "--no-race-check")
    assert code == 0 and "note       the runtime would not use this file for a 1MiB call" in out, err
    code, out, err = cli("msccl", "run", xml, "--bytes", str(1296 * 4 * 100), "--no-race-check")
    assert code == 0 and "note" not in out, err
    assert cli("generate", "ring:n=4", "-o", sched)[0] == 0
    assert cli("export", sched, "-o", xml, "--no-check")[0] == 0
    code, out, _ = cli("simulate", xml, "-t", "ring:n=4", "--size", "64MiB")
    assert code == 0 and "note" not in out


def test_one_command_parser_is_that_command_of_the_whole_parser():
    # a run builds only its command's parser (start-up): the same names, help, defaults and errors as the whole one
    import argparse

    from forestcoll.cli import COMMANDS, _command, build_parser
    from forestcoll.errors import UsageError

    whole = build_parser()
    subs = next(a for a in whole._actions if isinstance(a, argparse._SubParsersAction))
    assert tuple(subs.choices) == COMMANDS
    for name in COMMANDS:
        alone = build_parser(name)
        mine = next(a for a in alone._actions if isinstance(a, argparse._SubParsersAction))
        assert list(mine.choices) == [name]
        assert mine.choices[name].format_help() == subs.choices[name].format_help()
    line = ["generate", "mi250:nodes=2", "-c", "allgather", "--k", "3", "-o", "x.json"]
    assert vars(build_parser("generate").parse_args(line)) == vars(whole.parse_args(line))
    for bad in (["generate"], ["generate", "x", "--k", "two"], ["topo", "nope"]):
        errors = []
        for parser in (whole, build_parser(_command(bad))):
            try:
                parser.parse_args(bad)
            except UsageError as exc:
                errors.append(str(exc))
        assert len(errors) == 2 and errors[0] == errors[1]
    assert _command(["-q", "topo", "list"]) == "topo" and _command(["--help"]) is None and _command(["gen"]) is None
    assert _command(["-h", "generate"]) is None and _command(["generate", "-h"]) == "generate"
