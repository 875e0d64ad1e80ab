"""io19: start-up imports only what the command needs (docs/design.md "Start-up")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def _loaded(argv: list[str], modules: tuple[str, ...]) -> list[str]:
    """The ``modules`` in sys.modules after ``forestcoll ARGV`` ran in a fresh interpreter."""
    code = ("import sys, io, contextlib\nfrom forestcoll.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main({argv!r}) == 0\n"
            f"print(sorted(m for m in {modules!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return eval(proc.stdout.strip().splitlines()[-1])


def _modules_after(calls: list[list[str]]) -> set[str]:
    """sys.modules after ``main(argv)`` for each argv of ``calls`` in a fresh interpreter (their output, errors and
    exits swallowed: ``--help`` and flag errors included)."""
    code = ("import sys, io, contextlib\nfrom forestcoll.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    for argv in {calls!r}:\n        with contextlib.suppress(SystemExit):\n            main(argv)\n"
            "print(sorted(sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(eval(proc.stdout.strip().splitlines()[-1]))


def test_a_json_topology_does_not_import_yaml():
    """yaml (~8 ms) was imported by every topology file; a plain JSON one needs only json."""
    ring = str(Path(ROOT) / "docs" / "examples" / "ring-of-four.json")
    assert _loaded(["bound", ring], ("yaml",)) == []


def test_a_yaml_topology_still_reads_with_line_numbers(tmp_path):
    from forestcoll.errors import TopologyError
    from forestcoll.topology.declarative import read_topology_document

    bad = tmp_path / "t.yaml"
    bad.write_text("boxes:\n  - use: dgx-a100\n    count: 2\n    options: {nic_bw: 12.5.5}\n")
    try:
        read_topology_document(str(bad))
    except TopologyError as exc:
        assert str(exc).startswith(f"{bad}:4"), exc
    else:
        raise AssertionError("a bad bandwidth was taken")


def test_a_built_in_cluster_bound_does_not_import_ortools():
    """`bound dgx-a100:nodes=2` answers from the cluster model (bound/cluster.py) without a max-flow: the package
    forestcoll.bound and report.py / fixed_k.py imported the max-flow stack (ortools, ~40 ms) regardless."""
    assert _loaded(["bound", "dgx-a100:nodes=2"], ("ortools",)) == []
    assert _loaded(["bound", "ring:n=4"], ("ortools",)) == ["ortools"]  # a fabric that needs the max-flow still gets it


def test_help_and_flag_errors_do_not_import_the_commands():
    """The parser named every command function, so `--help` imported cli.commands and cli.render (~20 ms)."""
    after = _modules_after([["--help"], ["bound", "ring:n=4", "--bogus"], ["generate", "--help"]])
    assert "forestcoll.cli.parser" in after
    assert not after & {"forestcoll.cli.commands", "forestcoll.cli.render"}


def test_a_built_in_cluster_bound_does_not_import_numpy():
    """polish20: the orbits of a built-in's declared symmetries (bound/cluster.py's targets) are found in plain Python
    (graph/orbits.py); numpy (~0.08 s CPU) was imported for them alone."""
    assert _loaded(["bound", "dgx-a100:nodes=2"], ("numpy",)) == []
    assert _loaded(["bound", "ring:n=4"], ("numpy",)) == ["numpy"]  # the max-flow stack still loads it


def test_a_cluster_whose_declared_orbits_need_refinement_does_not_import_numpy():
    """tidy21: mi250's declared generators leave four GCD positions, so ``bound`` asks bound/automorphisms.py for the
    whole group's orbits; colour refinement answers (plain Python) and bliss is never run, yet the module imported
    numpy and graph/symmetry.py (numpy, igraph) for its other functions."""
    after = _modules_after([["bound", "mi250:nodes=2"]])
    assert "forestcoll.bound.automorphisms" in after  # the path this guards is taken
    assert not after & {"numpy", "igraph", "forestcoll.graph.symmetry"}


def test_orbit_cycles_is_the_numpy_one():
    """graph/orbits.py's plain-Python orbit_cycles gives the permutation graph/symmetry.py computed in numpy."""
    import random

    import numpy as np

    from forestcoll.graph.orbits import orbit_cycles, orbits
    from forestcoll.graph.symmetry import orbit_cycles as exported

    def reference(orbit):  # graph/symmetry.py's numpy version at bdadcd0
        label = np.asarray(orbit, dtype=np.int64)
        order = np.lexsort((np.arange(len(label)), label))
        perm = np.empty(len(label), dtype=np.int64)
        nxt = np.roll(order, -1)
        first = np.r_[True, label[order][1:] != label[order][:-1]]
        nxt[np.r_[first[1:], True]] = order[first]
        perm[order] = nxt
        return tuple(perm.tolist())

    assert exported is orbit_cycles
    rng = random.Random(21)
    for _ in range(300):
        n = rng.randint(1, 50)
        label = [rng.randrange(max(1, n // rng.randint(1, 5))) for _ in range(n)]
        got = orbit_cycles(label)
        assert got == reference(label) and all(type(x) is int for x in got)
        assert got == orbit_cycles(np.asarray(label, dtype=np.int64))
        smallest = orbits(n, [got])
        assert len(set(smallest)) == len(set(label)) and all(smallest[i] == smallest[label.index(label[i])] for i in range(n))


def test_help_does_not_import_the_topology_model():
    """polish20: --fabric's choices come from topology/fabrics.py, which imports nothing: --help loaded
    topology/cluster.py and with it the model, device, units, fractions and dataclasses (~10 ms)."""
    after = _modules_after([["--help"], ["generate", "--help"]])
    assert {m for m in after if m.startswith("forestcoll.topology.") or m == "fractions"} == {"forestcoll.topology.fabrics"}


def test_orbits_in_python_and_in_numpy_agree():
    """graph/orbits.py: the union-find (small) and the label propagation (large) give the same labels."""
    import random

    import numpy as np

    from forestcoll.graph import orbits as mod
    from forestcoll.topology.cluster import FABRICS
    from forestcoll.topology.fabrics import FABRICS as NAMES

    assert FABRICS is NAMES
    rng = random.Random(20)
    for _ in range(200):
        n = rng.randint(1, 60)
        gens = []
        for _ in range(rng.randint(0, 4)):
            perm = list(range(n))
            for _ in range(rng.randint(0, 3)):  # a few cycles on random points
                pts = rng.sample(range(n), rng.randint(1, n))
                for a, b in zip(pts, pts[1:] + pts[:1]):
                    perm[a] = b
            gens.append(tuple(perm))
        small = mod.orbits(n, gens)
        assert small == (mod._orbits_numpy(n, gens) if gens else list(range(n)))
        assert all(type(x) is int for x in small) and all(small[i] <= i and small[small[i]] == small[i] for i in range(n))
        if gens:
            assert mod.orbits(n, np.asarray(gens, dtype=np.int64)) == small  # numpy rows as generators
    n = mod.PYTHON_POINTS + 1  # past the cut: numpy, same answer as plain Python would give
    shift = tuple((i + 2) % n for i in range(n))
    assert mod.orbits(n, [shift]) == [i % 2 if n % 2 == 0 else 0 for i in range(n)]


def test_the_startup_benchmark_prints_its_table():
    """benchmarks/startup.py (one run, no baseline): the yardstick row and one row per command."""
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "startup.py"), "--repeat", "1", "--command=--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == ['python -c "import numpy"', "forestcoll --help"], proc.stdout
