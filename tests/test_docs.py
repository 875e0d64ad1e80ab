"""Every Python session pasted in README.md and docs/*.md runs as pasted and prints what it shows (doctest)."""

import doctest
import re

import pytest
from conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _sessions():
    for path in DOCS:
        text = path.read_text()
        blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if ">>>" in b]
        if blocks:
            yield pytest.param(path, "\n".join(blocks), id=path.name)


@pytest.mark.slow
@pytest.mark.parametrize(("path", "text"), list(_sessions()))
def test_pasted_sessions_run(path, text, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, path.name, str(path), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0, f"{result.failed} of {result.attempted} examples in {path.name} fail"


def _console_blocks():
    """```console blocks: "$ command" lines, each followed by the output it prints (stdout and stderr)."""
    for path in DOCS:
        for i, block in enumerate(re.findall(r"```console\n(.*?)```", path.read_text(), re.S)):
            yield pytest.param(path, block, id=f"{path.name}-{i}")


@pytest.mark.slow
@pytest.mark.parametrize(("path", "block"), list(_console_blocks()))
def test_pasted_console_sessions_run(path, block, tmp_path):
    """Each ```console block runs as pasted in a fresh directory and prints exactly what it shows."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}")
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    for command, shown in steps:
        proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert (proc.stdout + proc.stderr).splitlines() == shown, f"{path.name}: $ {command}"
