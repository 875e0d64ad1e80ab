"""Hardening (issue 14): each class of bad input an adversarial pass found gets one clear line and exit 2."""

from __future__ import annotations

import os

import pytest
from conftest import ROOT, cli


def refused(code: int, out: str, err: str, *words: str) -> None:
    """Exit 2, exactly one line on stderr naming ``words``, no traceback, no internal error."""
    assert code == 2, (code, out, err)
    assert err.count("\n") == 1 and err.startswith("forestcoll: error: "), err
    assert "Traceback" not in err and "internal error" not in err, err
    for w in words:
        assert w in err, (w, err)


# ----- writers ---------------------------------------------------------------------------------------


@pytest.fixture
def schedule(tmp_path):
    path = tmp_path / "s.json"
    assert cli("generate", "ring:n=4", "-o", path)[0] == 0
    return path


def test_every_writer_refuses_a_bad_output_and_leaves_files_alone(tmp_path, schedule):
    """-o onto a directory, under a file, into a missing directory, onto its own input: one line, nothing
    written, an existing file untouched."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "afile").write_text("keep\n")
    topo = tmp_path / "t.json"
    assert cli("topo", "export", "ring:n=4", "-o", topo)[0] == 0
    before = topo.read_bytes(), schedule.read_bytes()
    writers = [
        ("generate", "ring:n=4", "-o"), ("generate", "ring:n=4", "--format", "msccl", "-o"),
        ("export", schedule, "-o"), ("topo", "export", "ring:n=4", "-o"), ("topo", "import", "ring:n=4", "-o"),
        ("topo", "draw", "ring:n=4", "-o"), ("compare", "ring:n=4", "--sizes", "1MiB", "-o"),
    ]
    for cmd in writers:
        for bad, words in ((tmp_path / "dir", ("is a directory",)), (tmp_path / "afile" / "x.json", ("not a directory",)),
                           (tmp_path / "no" / "x.json", ("does not exist",))):
            refused(*cli(*cmd, bad), *words)
    refused(*cli("generate", topo, "-o", topo), "also an input")
    refused(*cli("export", schedule, "-o", schedule), "also an input")
    refused(*cli("generate", "ring:n=4", "--sizes", "1MiB", "-o", tmp_path / "afile"), "not a directory")
    assert (topo.read_bytes(), schedule.read_bytes()) == before
    assert (tmp_path / "afile").read_text() == "keep\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "dir", "s.json", "t.json"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        refused(*cli("generate", "ring:n=4", "-o", ro / "x.json"), "permission denied")
    finally:
        ro.chmod(0o755)


def test_atomic_writer_turns_os_errors_into_one_line(tmp_path, monkeypatch):
    """A write that fails half-way (disk full) leaves neither a partial nor a temporary file."""
    from forestcoll.errors import ForestCollError
    from forestcoll.fileio import atomic_write_text

    target = tmp_path / "x.txt"
    target.write_text("old")

    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(ForestCollError, match="No space left"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_usage_errors_have_one_prefix():
    code, out, err = cli("bound", "ring:n=4", "--bogus")
    refused(code, out, err, "unrecognized arguments")
    assert err.count("forestcoll:") == 1
    code, out, err = cli("msccl", "run")
    refused(code, out, err, "msccl run:")
    assert ROOT.is_dir()


# ----- numbers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("number", ["1e-300", "1" + "0" * 5000, "1e999999", "1/" + "3" * 50, "-1e400"])
def test_numbers_outside_the_limits_are_refused_in_user_terms(number):
    refused(*cli("bound", f"ring:n=4,bw={number}"), "outside the numbers forestcoll takes", "40 significant digits")


def test_number_parser_limits():
    from fractions import Fraction

    from forestcoll.errors import ForestCollError
    from forestcoll.rational import parse_rational

    assert parse_rational("1e30") == 10**30 and parse_rational("1e-30") == Fraction(1, 10**30)
    assert parse_rational("1." + "1" * 39) == Fraction(int("1" * 40), 10**39) and parse_rational(0) == 0
    for bad in ("1e31", "1e-31", "1." + "1" * 40, 10**41, 1e-300, float("nan")):
        with pytest.raises(ForestCollError):
            parse_rational(bad)


def test_many_digit_bandwidths_name_the_limit_not_int64():
    code, out, err = cli("bound", "ring:n=4,bw=3.1415926535897932384626433832795")
    refused(code, out, err, "2^62", "round them to fewer digits")
    assert "int64" not in err


@pytest.mark.parametrize(("flag", "words"), [("foo=1", "not a link class"), ("=5", "class before '=' is empty"),
                                             ("nvlink=1e400", "outside the numbers"), ("nvlink=-1", ">= 0")])
def test_latency_table_is_checked(flag, words):
    refused(*cli("simulate", "ring", "-t", "dgx-a100", "--size", "1MiB", "--latency", flag), words)


def test_yaml_nan_and_huge_numbers(tmp_path):
    base = "name: x\nbox:\n  compute: {count: 2, prefix: g}\n  links:\n    - {between: [g0, g1], bandwidth: %s}\n"
    for value, words in ((".nan", "not a finite number"), ("-.inf", "not a finite number"),
                         ("1e999999", "outside the numbers"), ("0x1p3", "not a")):
        path = tmp_path / "t.yaml"
        path.write_text(base % value)
        refused(*cli("topo", "show", path), words)


# ----- MSCCL files: gpu ids, sizes, flags ---------------------------------------------------------------


@pytest.fixture
def msccl_file(tmp_path, schedule):
    path = tmp_path / "a.xml"
    assert cli("export", schedule, "--mode", "out-of-place", "-o", path)[0] == 0
    return path


def _gpus(text: str) -> tuple[str, list[str], str]:
    import re

    blocks = re.findall(r"  <gpu id=.*?</gpu>\n", text, re.S)
    return text[: text.index("  <gpu")], blocks, text[text.rindex("</gpu>") + len("</gpu>\n"):]


def test_gpus_are_taken_by_id_not_by_element_order(tmp_path, msccl_file):
    """The runtime picks a rank's <gpu> by id: reordered elements with the right ids run and lint clean, in the
    interpreter and the simulator; swapped ids (each gpu now claims another's program) are refused by both."""
    head, blocks, tail = _gpus(msccl_file.read_text())
    shuffled = tmp_path / "shuffled.xml"
    shuffled.write_text(head + "".join(reversed(blocks)) + tail)
    for cmd in (("msccl", "run", shuffled), ("msccl", "lint", shuffled),
                ("simulate", shuffled, "-t", "ring:n=4", "--size", "1MiB")):
        code, out, err = cli(*cmd)
        assert code == 0, (cmd, err)
    swapped = tmp_path / "swapped.xml"
    a, b = blocks[0], blocks[2]
    swapped.write_text(head + b.replace('id="2"', 'id="0"', 1) + blocks[1] + a.replace('id="0"', 'id="2"', 1)
                       + "".join(blocks[3:]) + tail)
    code, out, err = cli("msccl", "run", swapped)  # rank 0 now runs rank 2's program: wrong data or a hang, not OK
    refused(code, out, err)
    assert "output chunk" in err or "deadlock" in err, err
    dup = tmp_path / "dup.xml"
    dup.write_text(head + blocks[0] + blocks[0] + "".join(blocks[2:]) + tail)
    refused(*cli("msccl", "run", dup), "a second <gpu id=\"0\">")
    assert "a second <gpu" in cli("msccl", "lint", dup)[1]


@pytest.mark.parametrize(("old", "new", "words"), [
    ('nchunksperloop="[0-9]+"', 'nchunksperloop="0"', "nchunksperloop=0 is outside"),
    ('nchunksperloop="[0-9]+"', 'nchunksperloop="4000000000"', "forestcoll's limit"),
    ('s_chunks="[0-9]+"', 's_chunks="2000000000"', "s_chunks=2000000000"),
    ('i_chunks="[0-9]+"', 'i_chunks="-1"', "i_chunks=-1"),
    ('proto="Simple"', 'proto="FOO"', "unknown proto 'FOO'"),
    ('nchannels="[0-9]+"', 'nchannels="999999999"', "nchannels=999999999"),
    ('send="1"', 'send="99999"', "send peer 99999"),
])
def test_msccl_sizes_and_attributes_are_checked_before_running(tmp_path, msccl_file, old, new, words):
    import re

    text = msccl_file.read_text()
    assert re.search(old, text), old
    bad = tmp_path / "bad.xml"
    bad.write_text(re.sub(old, new, text, count=1))
    refused(*cli("msccl", "run", bad), words)
    refused(*cli("simulate", bad, "-t", "ring:n=4", "--size", "1MiB"), words)


@pytest.mark.parametrize(("flags", "words"), [
    (("--seed", "-1"), "seed must be in 0..4294967295"), (("--root", "99"), "--root is for broadcast and reduce"),
    (("--mode", "in-place"), "does not declare in-place calls"), (("--count", "100000000000"), "pass a smaller --count"),
])
def test_msccl_run_flags(msccl_file, flags, words):
    refused(*cli("msccl", "run", msccl_file, *flags), words)


# ----- sizes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "words"), [
    (("bound", "dgx-a100", "--nodes", "1000000000"), "above forestcoll's limit of 1,048,576"),  # bound.cluster
    (("generate", "dgx-a100", "--nodes", "1000000000"), "above forestcoll's limit of 16,384"),
    (("bound", "dgx-a100:fabric=mesh", "--nodes", "5000"), "compute nodes of the cluster: 40,000"),
    (("generate", "dgx-a100", "--nodes", "5000"), "compute nodes of the cluster: 40,000"),
    (("bound", "ring:n=100000000"), "above forestcoll's limit"),
    (("bound", "torus:dims=1000x1000"), "product of the sizes"),
    (("bound", "ring:n=" + "9" * 5000), "expected an integer"),
])
def test_sizes_beyond_the_limits_are_refused_before_building(args, words):
    refused(*cli(*args), words)


def test_yaml_counts_and_deep_xml(tmp_path):
    for text in ("name: x\nbox:\n  compute: {count: 100000000, prefix: g}\n",
                 "name: x\nnodes: 1000000000\nbox:\n  compute: {count: 4, prefix: g}\n"):
        (tmp_path / "t.yaml").write_text(text)
        refused(*cli("topo", "show", tmp_path / "t.yaml"), "above forestcoll's limit of 16,384")
    (tmp_path / "deep.xml").write_text('<system version="1">' + "<cpu>" * 5000 + "</cpu>" * 5000 + "</system>")
    refused(*cli("topo", "show", tmp_path / "deep.xml"), "nested more than 100 deep")
    (tmp_path / "deep_algo.xml").write_text('<algo proto="Simple">' + "<gpu>" * 5000 + "</gpu>" * 5000 + "</algo>")
    refused(*cli("msccl", "run", tmp_path / "deep_algo.xml"), "nested more than 100 deep")


# ----- self-contained schedules -----------------------------------------------------------------------


def test_schedules_carry_their_topology(tmp_path, monkeypatch):
    """A schedule made from a modified copy of a built-in (same name) is checked against that copy from any
    directory, and a topology with another fabric is refused; an old file (name only) still loads."""
    import json

    copy = tmp_path / "a.json"
    assert cli("topo", "export", "ring:n=4", "-o", copy)[0] == 0
    data = json.loads(copy.read_text())
    for link in data["links"]:
        link["bandwidth"] = 10  # the built-in has 100
    copy.write_text(json.dumps(data))
    sched = tmp_path / "s.json"
    assert cli("generate", copy, "-o", sched)[0] == 0
    record = json.loads(sched.read_text())["topology"]
    assert record["path"] == str(copy) and record["spec"] == str(copy) and record["fingerprint"].startswith("sha256:")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = cli("verify", sched)
    assert code == 0 and "OK, optimal" in out, err
    code, out, err = cli("simulate", sched, "--size", "1GiB", "--json")
    assert code == 0 and float(json.loads(out)["algbw_gbps"]) < 10 * 4, out
    refused(*cli("verify", sched, "-t", "ring:n=4"), "not the fabric this schedule was made for")
    refused(*cli("simulate", sched, "-t", "ring:n=4"), "not the fabric this schedule was made for")
    old = json.loads(sched.read_text())
    old["topology"] = "ring:n=4"
    (tmp_path / "old.json").write_text(json.dumps(old))
    code, out, _err = cli("verify", tmp_path / "old.json")
    assert "records no topology fingerprint" in out and "INVALID" in out and code == 2
    copy.rename(tmp_path / "moved.json")
    refused(*cli("verify", sched), "does not exist")


def test_fingerprint_is_the_fabric_only():
    from forestcoll.topology import fingerprint, load_topology

    a, b = load_topology("ring:n=4"), load_topology("ring:n=4,bw=100")
    assert fingerprint(a) == fingerprint(b) != fingerprint(load_topology("ring:n=4,bw=101"))


# ----- bound --k agrees with generate --k ----------------------------------------------------------------

STAR = {"name": "star", "nodes": [{"name": f"g{i}", "kind": "compute"} for i in range(4)] + [{"name": "sw", "kind": "switch"}],
        "links": [lk for i in range(4) for lk in ({"src": f"g{i}", "dst": "sw", "bandwidth": 20},
                                                 {"src": "sw", "dst": f"g{i}", "bandwidth": 70})]}


def test_bound_k_says_when_trees_cannot_reach_it(tmp_path):
    """A star whose switch can send 280 GB/s but receives 80: the k=1 cut bound (80) is not reachable by trees;
    bound says so, with what generate --k 1 reaches (80/3), in text and JSON."""
    import json

    star = tmp_path / "star.json"
    star.write_text(json.dumps(STAR))
    code, out, err = cli("bound", star, "-c", "allgather", "--k", "1", "--json")
    data = json.loads(out)
    assert code == 0 and data["fixed_k_achievable"] is False and data["fixed_k_reached_gbps"] == "80/3"
    assert "switch 'sw'" in data["fixed_k_warning"] and data["unbalanced_switches"] == ["sw"]
    code, out, err = cli("generate", star, "-c", "allgather", "--k", "1", "--json")
    assert json.loads(out)["algbw_gbps"] == "80/3"
    code, out, err = cli("bound", star, "-c", "allgather", "--k", "1")
    assert "not achievable with trees" in out
    for spec in ("ring:n=4", "dgx-a100", str(ROOT / "docs" / "examples" / "ring-of-four.json")):
        code, out, err = cli("bound", spec, "-c", "allgather", "--k", "2", "--json")
        bound = json.loads(out)
        gen = json.loads(cli("generate", spec, "-c", "allgather", "--k", "2", "--json")[1])
        assert bound["fixed_k_achievable"] and bound["fixed_k_algbw_gbps"] == gen["algbw_gbps"], spec


# ----- wrong or silent acceptance --------------------------------------------------------------------------


def test_schedules_without_trees_and_files_that_move_nothing(tmp_path, schedule, msccl_file):
    import json
    import re

    data = json.loads(schedule.read_text())
    data["trees"] = []
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(data))
    refused(*cli("export", empty, "-o", tmp_path / "e.xml"), "no trees rooted at")
    assert not (tmp_path / "e.xml").exists()
    nosteps = tmp_path / "nosteps.xml"
    nosteps.write_text(re.sub(r"\s*<step [^>]*/>", "", msccl_file.read_text()))
    refused(*cli("simulate", nosteps, "-t", "ring:n=4", "--size", "1MiB"), "moves no data")


def test_names_with_double_dashes_export(tmp_path):
    import json

    topo = json.loads((ROOT / "docs" / "examples" / "ring-of-four.json").read_text().replace('"a"', '"a--x"'))
    path = tmp_path / "dash.json"
    path.write_text(json.dumps(topo))
    code, out, err = cli("generate", path, "--format", "msccl", "-o", tmp_path / "dash.xml")
    assert code == 0, err
    assert cli("msccl", "lint", tmp_path / "dash.xml")[0] == 0


def test_yaml_self_loops_are_refused_like_json_ones(tmp_path):
    base = "name: x\nbox:\n  compute: {count: 2, prefix: gpu}\n  links:\n    - {between: [gpu0, gpu1], bandwidth: 10}\n"
    for extra, words in (("    - {between: [gpu0, gpu0], bandwidth: 10}\n", "links 'gpu0' to itself"),
                         ("    - {from: gpu1, to: gpu1, bandwidth: 10}\n", "links 'gpu1' to itself"),
                         ("    - {between: [gpu0, 'gpu0*'], bandwidth: 10}\n", "match only the same node")):
        (tmp_path / "t.yaml").write_text(base + extra)
        refused(*cli("topo", "show", tmp_path / "t.yaml"), words)


@pytest.mark.parametrize(("args", "words"), [
    (("compare", "ring:n=4", "--jobs", "0"), "--jobs must be >= 1"),
    (("compare", "ring:n=4", "--jobs", "100000"), "--jobs: 100,000 is above"),
    (("generate", "ring:n=4", "--max-k", "0"), "--max-k must be >= 1"),
    (("bound", "ring:n=4", "--k", "0"), "--k must be >= 1"),
    (("simulate", "ring", "-t", "ring:n=4", "--size", "1e30"), "2^50 bytes"),
    (("compare", "ring:n=4", "--sizes", "1B,2B,3B," + ",".join(f"{i}B" for i in range(4, 80))), "at most 64"),
])
def test_flags_out_of_range(args, words):
    refused(*cli(*args), words)


def test_msccl_run_iterations(msccl_file):
    refused(*cli("msccl", "run", msccl_file, "--iterations", "100000000"), "iterations must be in 1..1024")


# ----- implausible imports ---------------------------------------------------------------------------------

H100 = ROOT.parent / "shared" / "data" / "nccl-topo" / "H100-topology.xml"


@pytest.mark.skipif(not H100.is_file(), reason="needs ../shared/data")
def test_implausible_dumps_warn(tmp_path):
    """An sm90 dump without <nvlink> imports as PCIe-only with a warning saying how to get a full dump; NVLink
    counts beyond the generation's warn with the numbers; the real dump imports without a warning."""
    import re

    text = H100.read_text()
    code, _out, err = cli("topo", "import", H100)
    assert code == 0 and err == ""
    (tmp_path / "nonv.xml").write_text(re.sub(r"\s*<nvlink[^>]*/>", "", text))
    code, _out, err = cli("topo", "import", tmp_path / "nonv.xml")
    assert code == 0 and err.startswith("forestcoll: warning:") and "no <nvlink>" in err and "NCCL_TOPO_DUMP_FILE" in err
    (tmp_path / "many.xml").write_text(re.sub(r'(<nvlink[^>]*count=")(\d+)"', lambda m: f'{m.group(1)}{int(m.group(2)) * 4}"', text))
    code, _out, err = cli("bound", tmp_path / "many.xml")
    assert code == 0 and "lists 72 NVLinks but an sm90 GPU has 18" in err


def test_numbers_beyond_pythons_digit_limit_in_files(tmp_path, schedule):
    """JSON / YAML integers of thousands of digits (past Python's int conversion limit) and huge XML attribute
    values are one line, not a ValueError."""
    big = "9" * 5001
    (tmp_path / "t.json").write_text('{"nodes": [{"name": "a", "kind": "compute"}, {"name": "b", "kind": "compute"}], "links": [{"src": "a", "dst": "b", '
                                     f'"bandwidth": {big}}}]}}')
    refused(*cli("topo", "show", tmp_path / "t.json"), "too many digits")
    (tmp_path / "t.yaml").write_text(f"name: x\nbox:\n  compute: {{count: {big}, prefix: g}}\n")
    refused(*cli("topo", "show", tmp_path / "t.yaml"), "too many digits")
    (tmp_path / "s.json").write_text(schedule.read_text().replace('"k": 2', f'"k": {big}', 1))
    refused(*cli("verify", tmp_path / "s.json"), "too many digits")
    (tmp_path / "a.xml").write_text(f'<algo name="a" proto="Simple" nchannels="{big}"/>')
    refused(*cli("msccl", "run", tmp_path / "a.xml"), "above forestcoll's limit of 4,096")


def test_schedule_fields_of_the_wrong_type(tmp_path, schedule):
    import json

    data = json.loads(schedule.read_text())
    data["trees"][0]["phase"] = {"a": {"b": []}}
    (tmp_path / "w.json").write_text(json.dumps(data))
    refused(*cli("export", tmp_path / "w.json", "-o", tmp_path / "w.xml"), "unknown phase")


def test_simulator_refuses_bandwidth_spans_it_cannot_run(tmp_path):
    """Bandwidths 10^8 apart hung the float simulator; it refuses them, the exact commands still take them."""
    import json

    data = json.loads((ROOT / "docs" / "examples" / "ring-of-four.json").read_text())
    data["links"][0]["bandwidth"] = "0.000001"
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(data))
    refused(*cli("simulate", "ring", "-t", path, "--size", "1MiB"), "10^6 ratio")
    assert cli("bound", path)[0] == 0
