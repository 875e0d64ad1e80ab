"""Start-up: `import forestcoll`, the parser and the generate path load no heavy module they do not need.

Each check runs in a fresh interpreter and reads ``sys.modules`` (what was imported, not how long it took: the
timings are in benchmarks/generate.py).  igraph's own ``import`` pulls matplotlib.pyplot through its drawing
package; forestcoll imports igraph without it (forestcoll.graph.igraph_import).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# never on these paths: plotting, torch, and the libraries only some commands use
PLOTTING = ("matplotlib", "PIL", "cairo", "cairocffi", "plotly", "torch")
HEAVY = ("igraph", "numpy", "ortools", "scipy", "networkx", "yaml", "rich", "highspy")


def _loaded(code: str) -> set[str]:
    """Top-level names of the modules imported after running ``code`` in a fresh interpreter."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_import_forestcoll_loads_nothing_heavy():
    loaded = _loaded("import forestcoll")
    assert loaded.isdisjoint(PLOTTING + HEAVY), sorted(loaded & set(PLOTTING + HEAVY))


def test_public_names_still_resolve_lazily():
    loaded = _loaded("import forestcoll\nassert callable(forestcoll.generate) and callable(forestcoll.verify)\n"
                     "import forestcoll.generate\nassert callable(forestcoll.generate)\n"
                     "from forestcoll import load_topology, optimal_bound\n"
                     "assert optimal_bound(load_topology('ring:n=4')).algbw > 0")
    assert loaded.isdisjoint(PLOTTING), sorted(loaded & set(PLOTTING))


def test_parsing_every_command_loads_nothing_heavy():
    loaded = _loaded("from forestcoll.cli import build_parser\np = build_parser()\n"
                     "p.parse_args(['generate', 'dgx-a100:nodes=2', '-q'])\np.format_help()")
    assert loaded.isdisjoint(PLOTTING + HEAVY), sorted(loaded & set(PLOTTING + HEAVY))


def test_help_loads_nothing_heavy():
    loaded = _loaded("import contextlib, io\nfrom forestcoll.cli import main\n"
                     "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
                     "    main(['--help'])")
    assert loaded.isdisjoint(PLOTTING + HEAVY), sorted(loaded & set(PLOTTING + HEAVY))


@pytest.mark.parametrize("args", [
    ["generate", "dgx-a100:nodes=2", "-o", "{tmp}/s.json"],
    ["bound", "dgx-a100:nodes=2"],
])
def test_generate_and_bound_load_no_plotting_torch_or_rich(tmp_path, args):
    args = [a.format(tmp=tmp_path) for a in args]
    loaded = _loaded("import contextlib, io\nfrom forestcoll.cli import main\n"
                     f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main({args!r}) == 0")
    unwanted = set(PLOTTING) | {"scipy", "networkx", "rich", "highspy", "yaml"}  # stderr is no terminal: no bar
    assert loaded.isdisjoint(unwanted), sorted(loaded & unwanted)  # igraph may run (symmetry search), never matplotlib


def test_igraph_import_keeps_matplotlib_importable():
    loaded = _loaded("from forestcoll.graph.igraph_import import import_igraph\nig = import_igraph()\n"
                     "assert ig.Graph(n=3, edges=[(0, 1)]).connected_components().membership == [0, 0, 1]\n"
                     "import sys\nassert 'matplotlib' not in sys.modules\n"
                     "import importlib.util\nassert importlib.util.find_spec('matplotlib') is not None")
    assert "matplotlib" not in loaded


def test_cli_uses_one_blas_thread_unless_told(monkeypatch, capsys):
    from forestcoll.cli import main

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    assert main(["bound", "dgx-a100:nodes=1"]) == 0
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    assert main(["bound", "dgx-a100:nodes=1"]) == 0
    assert os.environ["OPENBLAS_NUM_THREADS"] == "3"
