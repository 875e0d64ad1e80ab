"""The interpreter's race detector holds what signals, releases and barriers carry frozen and shared (mem19):
equal knowledge once, in the narrowest unsigned type, read-only; results unchanged.  Its clocks above
``limits.MAX_RACE_CLOCK_BYTES``: ``mscclpp run`` refuses (exit 2), the export's self-check runs without it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import cli

from forestcoll.errors import UsageError
from forestcoll.generate import generate
from forestcoll.mscclpp import interpreter as interp_mod
from forestcoll.mscclpp import machine as machine_mod
from forestcoll.mscclpp.export import ALIGN, ExportOptions, export_mscclpp, self_check
from forestcoll.mscclpp.interpreter import run_plan
from forestcoll.mscclpp.plan import write_plan
from forestcoll.mscclpp.state import Interner
from forestcoll.topology import load_topology


def test_interner_keeps_values_narrows_and_shares():
    kn = Interner()
    a = np.array([0, 3, 255, 7], np.int32)
    b = a.copy()
    fa, fb = kn.freeze(a), kn.freeze(b)
    assert fa is fb and fa.dtype == np.uint8 and not fa.flags.writeable
    assert np.array_equal(fa, a) and a.flags.writeable and a.dtype == np.int32  # the input is left as it was
    assert kn.freeze(fa) is fa
    wide = kn.freeze(np.array([0, 256, 65535], np.int32))
    assert wide.dtype == np.uint16 and wide.tolist() == [0, 256, 65535]
    big = kn.freeze(np.array([1, 1 << 20], np.int32))
    assert big.dtype == np.int32 and big.tolist() == [1, 1 << 20]
    neg = kn.freeze(np.array([-1, 2], np.int32))
    assert neg.tolist() == [-1, 2] and not neg.flags.writeable
    assert kn.freeze(None) is None
    # an int32 vector merged with a frozen one: the values decide, not the type
    live = np.zeros(4, np.int32)
    np.maximum(live, fa, out=live)
    assert live.dtype == np.int32 and live.tolist() == [0, 3, 255, 7]
    with pytest.raises(ValueError):
        fa[0] = 1


def test_retained_knowledge_is_shared_per_content(monkeypatch):
    topo = load_topology("dgx-a100:nodes=2")
    sched = generate(topo, "allreduce", k=1)
    plan = export_mscclpp(sched, topo, ExportOptions(check=False)).plan
    seen = {}
    run = machine_mod.Machine.run

    def keep(self, *args, **kwargs):
        seen["m"] = self
        return run(self, *args, **kwargs)

    monkeypatch.setattr(machine_mod.Machine, "run", keep)
    # the dense clocks (the reference representation, clk20) freeze through the Interner
    r = run_plan(plan, size=2 * ALIGN * plan.gpus[0].input_chunks, launches=2, clocks="dense")
    assert r.ok, r.message
    m = seen["m"]
    held = [x.v for tok in m.last_cum.values() for x in tok if x is not None]
    held += [x.v for rel in m.sem_releases.values() for pair in rel for x in pair if x is not None]
    assert held
    distinct = {(x.dtype.str, x.tobytes()) for x in held}
    ids = {id(x) for x in held}
    # before mem19 every signal and release held copies of its own (dgx-a100:nodes=2: 3.8x the contents)
    assert len(ids) == len(distinct)
    assert all(not x.flags.writeable and x.dtype.itemsize <= 2 for x in held)
    assert sum(x.nbytes for x in {id(x): x for x in held}.values()) <= len(distinct) * m.nagents * 2


@pytest.fixture(scope="module")
def small_plan():
    topo = load_topology("ring:n=4")
    return export_mscclpp(generate(topo, "allreduce", k=1), topo, ExportOptions(check=False)).plan


def test_race_clocks_counts_blocks_proxies_and_agents(small_plan):
    need, what = interp_mod.race_clocks(small_plan)
    tbs = sum(len(g.threadblocks) for g in small_plan.gpus)
    assert need >= tbs * (tbs + len(small_plan.gpus)) * 4 and f"{tbs:,} thread blocks" in what
    assert interp_mod.race_clocks_refused(small_plan) is None


def test_race_detector_over_the_limit_is_refused_before_running(small_plan, monkeypatch, tmp_path):
    monkeypatch.setattr(interp_mod, "MAX_RACE_CLOCK_BYTES", 1000)
    with pytest.raises(UsageError, match=r"vector clocks .* above forestcoll's limit .* pass --no-race-check"):
        run_plan(small_plan)
    assert run_plan(small_plan, race_check=False).ok
    path = tmp_path / "p.json"
    path.write_text(write_plan(small_plan))
    code, out, err = cli("mscclpp", "run", path)
    assert code == 2 and out == "" and err.count("\n") == 1 and "--no-race-check" in err and "Traceback" not in err
    code, out, _err = cli("mscclpp", "run", path, "--no-race-check")
    assert code == 0 and "OK" in out


def test_export_self_check_runs_without_race_detection_above_the_limit(small_plan, monkeypatch):
    assert not any("no race detection" in line for line in self_check(small_plan))
    monkeypatch.setattr(interp_mod, "MAX_RACE_CLOCK_BYTES", 1000)
    lines = self_check(small_plan)
    assert lines[-1].startswith("no race detection: its data-race detector would hold")
    assert all("OK" in line and "no data race" not in line for line in lines[:-1])
