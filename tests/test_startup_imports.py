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
    code = ("import sys, io, contextlib\nfrom forestcoll.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), "
            "contextlib.suppress(SystemExit):\n    main(['--help'])\n    main(['bound', 'ring:n=4', '--bogus'])\n"
            "    main(['generate', '--help'])\n"
            "print(sorted(m for m in ('forestcoll.cli.commands', 'forestcoll.cli.render') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
