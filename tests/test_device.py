"""The fabric's GPU: recorded by builtins, the dump importer, JSON and clusters; the MSCCL runtime and resident
blocks it implies; an explicit --runtime winning; files written for AMD fabrics fitting RCCL's limits."""

from __future__ import annotations

import json

import pytest
from conftest import benchmark, cli, shared_file
from test_topology_nccl_xml import MINIMAL

from forestcoll.errors import TopologyError
from forestcoll.msccl.export import ExportOptions, export_msccl
from forestcoll.msccl.fabric import fabric_options, for_gpu
from forestcoll.msccl.lint import lint_file
from forestcoll.mscclpp.export import ExportOptions as PlanOptions
from forestcoll.topology import build_builtin, import_nccl_xml, load_topology, topology_from_dict, topology_to_dict
from forestcoll.topology.device import GPUS, Gpu, default_runtime, gpu_of_dump, resident_blocks


@pytest.mark.parametrize("spec, name, vendor, units", [
    ("dgx-a100", "A100", "nvidia", 108),
    ("dgx-a100:nodes=2", "A100", "nvidia", 108),
    ("dgx-h100:nodes=2", "H100", "nvidia", 132),
    ("hgx-h100", "H100", "nvidia", 132),
    ("dgx-1", "V100", "nvidia", 80),
    ("mi250", "MI250 GCD", "amd", 104),
    ("mi250:nodes=2", "MI250 GCD", "amd", 104),
    ("mi300x:nodes=2,fabric=leaf-spine", "MI300X", "amd", 304),
    ("hetero:dgx-a100=2", "A100", "nvidia", 108),
])
def test_box_families_record_their_gpu(spec, name, vendor, units):
    name_, _, opts = spec.partition(":")
    gpu = build_builtin(name_, dict(kv.split("=") for kv in opts.split(",")) if opts else {}).gpu
    assert gpu is not None and (gpu.name, gpu.vendor, gpu.units) == (name, vendor, units)


@pytest.mark.parametrize("spec", ["hetero", "ring", "torus", "switch:n=4"])
def test_mixed_or_generic_fabrics_say_no_gpu(spec):
    assert load_topology(spec).gpu is None  # hetero: A100 and H100 boxes; generic graphs: no GPU at all


def test_the_gpu_survives_reversal_renaming_and_json(tmp_path):
    topo = load_topology("mi250:nodes=2")
    assert topo.reversed().gpu == topo.renamed("x").gpu == GPUS["MI250 GCD"]
    data = json.loads(json.dumps(topology_to_dict(topo)))
    assert data["gpu"] == {"name": "MI250 GCD", "vendor": "amd", "units": 104, "arch": "gfx90a"}
    assert topology_from_dict(data).gpu == GPUS["MI250 GCD"]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    assert load_topology(str(path)).gpu == GPUS["MI250 GCD"]
    assert "gpu" not in topology_to_dict(load_topology("ring"))  # nothing said, nothing written


@pytest.mark.parametrize("gpu, message", [
    ({"name": "X", "vendor": "intel"}, "gpu 'vendor' must be one of nvidia, amd"),
    ({"name": "X", "vendor": "amd", "units": 0}, "gpu 'units'"),
    ({"name": "", "vendor": "amd"}, "gpu 'name'"),
    ("MI300X", "'gpu' must be an object"),
])
def test_a_bad_gpu_in_json_is_one_line(tmp_path, gpu, message):
    data = topology_to_dict(load_topology("ring:n=4"))
    data["gpu"] = gpu
    with pytest.raises(TopologyError, match=message):
        topology_from_dict(data, "t.json")
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    code, out, err = cli("bound", str(path), "-c", "allgather")
    assert code == 2 and out == "" and err.count("\n") == 1 and message.split("'")[0] in err


def test_importer_reads_vendor_and_units(tmp_path):
    path = tmp_path / "t.xml"
    path.write_text(MINIMAL)
    assert import_nccl_xml(str(path)).topology.gpu == GPUS["A100"]  # sm80: the A100's 108 SMs
    amd = MINIMAL.replace('sm="80"', 'sm="304" gcn="gfx942"').replace("<nvlink", "<xgmi")
    path.write_text(amd)
    assert import_nccl_xml(str(path)).topology.gpu == Gpu("MI300X", "amd", 304, "gfx942")  # RCCL: sm = CUs
    path.write_text(amd.replace('sm="304" gcn="gfx942" rank="1"', 'sm="104" gcn="910" rank="1"', 1))
    assert import_nccl_xml(str(path)).topology.gpu is None  # two kinds of GPU: none said


def test_gpu_of_dump_names():
    assert gpu_of_dump("104", "910", "gfx90a") == GPUS["MI250 GCD"]
    assert gpu_of_dump("110", "gfx90a", "gfx90a") == Gpu("MI250X GCD", "amd", 110, "gfx90a")
    assert gpu_of_dump("90", None, None) == GPUS["H100"]
    assert gpu_of_dump("86", None, None) == Gpu("sm86", "nvidia", None, "sm86")  # units unknown: old default
    assert resident_blocks(gpu_of_dump("86", None, None)) == 108


@pytest.mark.parametrize("dump, name, units", [("topo_8p_940.xml", "MI300X", 304), ("H100-topology.xml", "H100", 132),
                                               ("topo_16p1h.xml", "MI250 GCD", 104)])
def test_real_dumps_record_their_gpu_alone_and_as_a_cluster(dump, name, units):
    path = str(shared_file("data", "nccl-topo", dump))
    for extra in (None, {"nodes": "4", "fabric": "rail"}):
        gpu = load_topology(path, extra).gpu
        assert gpu is not None and (gpu.name, gpu.units) == (name, units)


def test_default_runtime_per_vendor():
    assert default_runtime(GPUS["MI250 GCD"]) == default_runtime(GPUS["MI300X"]) == "rccl"
    assert default_runtime(GPUS["A100"]) == default_runtime(GPUS["H100"]) == "msccl-executor-nccl"
    assert default_runtime(None) == "msccl-executor-nccl"  # unknown: as before


def test_options_for_a_gpu_and_the_explicit_runtime_wins():
    amd = for_gpu(None, GPUS["MI300X"])
    assert (amd.runtime, amd.resident) == ("rccl", 304) and "for rccl, the MSCCL runtime of AMD GPUs" in amd.notes[0]
    given = for_gpu(ExportOptions(runtime="msccl-executor-nccl"), GPUS["MI300X"], "msccl-executor-nccl")
    assert given.runtime == "msccl-executor-nccl" and "whose users run rccl" in given.notes[0]
    assert for_gpu(None, None) == ExportOptions()  # no GPU said: today's options
    assert fabric_options(PlanOptions(), load_topology("dgx-h100")).max_threadblocks == 132
    assert fabric_options(PlanOptions(), load_topology("dgx-h100"), max_threadblocks=50).max_threadblocks == 104
    assert fabric_options(PlanOptions(), load_topology("ring")).max_threadblocks == 104


def test_the_resident_figure_gates_wider_bands():
    from forestcoll.generate import generate

    sched = generate(load_topology("dgx-a100"), "allgather", k=2)
    wide, narrow = export_msccl(sched), export_msccl(sched, ExportOptions(resident=8))
    assert narrow.tbs_per_gpu <= wide.tbs_per_gpu and narrow.channels < wide.channels
    assert any("more than the GPU keeps resident (8 SMs / CUs)" in n for n in narrow.notes) or narrow.tbs_per_gpu <= 8


@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_generate_writes_rccl_files_for_amd_fabrics(tmp_path, collective):
    out = tmp_path / "a.xml"
    code, text, err = cli("generate", "mi300x", "-c", collective, "--format", "msccl", "-o", out, "--json")
    assert code == 0, err
    result = json.loads(text[text.index("{"):])  # after the schedule line
    assert any("for rccl, the MSCCL runtime of AMD GPUs" in n for n in result["notes"])
    assert result["fits"]["rccl"] and result["tbs_per_gpu"] <= 64
    assert lint_file(str(out), "rccl").ok
    code, text, err = cli("generate", "mi300x", "-c", collective, "--format", "msccl", "-o", out, "--json",
                          "--runtime", "msccl-executor-nccl")
    assert code == 0, err
    assert any("for msccl-executor-nccl (given)" in n for n in json.loads(text[text.index("{"):])["notes"])


def test_generate_for_nvidia_and_unknown_fabrics(tmp_path):
    out = tmp_path / "a.xml"
    code, text, _ = cli("generate", "dgx-a100", "-c", "allgather", "--format", "msccl", "-o", out)
    assert code == 0 and "note       for msccl-executor-nccl, the MSCCL runtime of NVIDIA GPUs" in text
    code, text, _ = cli("generate", "ring:n=4", "-c", "allgather", "--format", "msccl", "-o", out)
    assert code == 0 and "the MSCCL runtime of" not in text  # nothing said: today's behaviour


@pytest.mark.slow
@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_mi250_cluster_files_fit_rccl(tmp_path, collective):
    out = tmp_path / "a.xml"
    code, text, err = cli("generate", "mi250:nodes=2", "-c", collective, "--format", "msccl", "-o", out, "--no-check")
    assert code == 0, err
    assert lint_file(str(out), "rccl").ok and "rccl: fits" in text


@pytest.mark.slow
def test_delivered_measures_the_file_for_the_fabrics_runtime(tmp_path):
    from forestcoll.generate import generate
    from forestcoll.msccl.ir import parse_algo, write_algo

    delivered = benchmark("delivered")
    topo = load_topology("mi250")
    assert delivered.fabric_runtime(topo)[1] == "rccl" and delivered.fabric_runtime(load_topology("ring"))[1] == (
        "msccl-executor-nccl")
    xml = tmp_path / "a.xml"
    code, _out, err = cli("generate", "mi250", "-c", "allgather", "--format", "msccl", "-o", str(xml), "--no-check")
    assert code == 0, err
    _sched, algo, why = delivered.written_by_generate(topo, generate(topo, "allgather"))
    assert why == "" and write_algo(algo) == write_algo(parse_algo(xml.read_text()))


def test_block_advice_follows_the_gpus_vendor():
    """An AMD user cannot run msccl-executor-nccl: the advice there names RCCL's knobs and MSCCL++ instead."""
    from forestcoll.msccl.advice import block_advice, other_runtime

    amd = block_advice("rccl", "amd", channels_given=True, channels=4, instances=2, k=8)
    assert amd[:3] == ["fewer --channels", "fewer --instances", "a smaller --k (fewer steps, so fewer channels)"]
    assert not any("msccl-executor-nccl" in a for a in amd) and "--format mscclpp" in amd[-1]
    nvidia = block_advice("rccl", "nvidia", channels_given=False, channels=1, instances=1, k=1)
    assert nvidia == ["--runtime msccl-executor-nccl (up to 1024)"]
    unknown = block_advice("rccl", None, channels_given=False, channels=1, instances=1, k=1)
    assert unknown[0] == "--runtime msccl-executor-nccl (up to 1024) on NVIDIA GPUs" and "mscclpp" in unknown[1]
    assert block_advice("msccl-executor-nccl", None, channels_given=False, channels=1, instances=1, k=1) == []
    assert other_runtime("rccl", "amd") is None and other_runtime("msccl-executor-nccl", "nvidia") is None


def test_an_amd_fabric_over_rccls_blocks_is_told_what_rccl_takes(tmp_path):
    """mi300x with 8 instances needs 113 blocks per GPU; the error (one line, exit 2, no file) says what works under
    RCCL, not msccl-executor-nccl; the same export on an NVIDIA fabric names msccl-executor-nccl."""
    out = tmp_path / "a.xml"
    code, text, err = cli("generate", "mi300x", "-c", "allgather", "--format", "msccl", "-o", out, "--instances", "8")
    assert code == 2 and not out.exists() and "Traceback" not in err
    assert err.strip().splitlines() == [
        "forestcoll: error: the schedule needs 113 thread blocks on one GPU with 1 channel(s); rccl allows 64: use fewer "
        "--instances or an MSCCL++ plan instead (--format mscclpp; its own limits apply)"]
    code, text, err = cli("generate", "dgx-a100", "-c", "allgather", "--format", "msccl", "-o", out, "--instances", "20",
                          "--runtime", "rccl")
    assert code == 2 and err.strip().endswith("use fewer --instances or --runtime msccl-executor-nccl (up to 1024)")
