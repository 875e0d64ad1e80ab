"""Every command and code block in README.md and docs/*.md runs as pasted and prints what it shows.

The extractor, the block kinds, the markers and the masking rule are in ``tests/doc_blocks.py``.  The
label check is fast; running the blocks spawns processes and is marked slow (``make test`` runs it,
``make check`` does not).
"""

from __future__ import annotations

import doctest
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SHARED
from doc_blocks import Block, blocks, console_steps, mask, matches, problems, shows_error

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ALL = [b for path in DOCS for b in blocks(path)]
VENV_BIN = Path(sys.executable).parent
# the checkout's own entries a command may read; what it writes lands in the copy
SKIP_ENTRIES = {".git", "out", ".pytest_cache", ".hypothesis", "__pycache__"}


@pytest.mark.parametrize("block", ALL, ids=[b.id for b in ALL])
def test_block_is_labelled(block: Block):
    """Every fence says what it is (so nothing runnable hides as 'text'), markers are known, data parses."""
    assert not problems(block), f"{block.id}: " + "; ".join(problems(block))
    if block.kind == "yaml":
        yaml.safe_load(block.text)
    if block.kind == "json":
        json.loads(block.text)


def test_every_doc_has_blocks_and_the_run_list_is_not_empty():
    runnable = [b for b in ALL if b.runs and not b.skip_reason]
    assert len(runnable) >= 30, len(runnable)


def test_output_markers_follow_a_python_script():
    for prev, block in zip(ALL, ALL[1:]):
        if "output" in block.markers:
            assert (prev.path, prev.section) == (block.path, block.section) and prev.kind == "python" and ">>>" not in prev.text, block.id


# ----- running the blocks -----------------------------------------------------------------------


class DocRun:
    """One temporary copy of the repository root per section of a markdown file; its blocks run there in order."""

    def __init__(self, base: Path):
        self.base = base
        self.copies: dict[tuple, Path] = {}
        self.globs: dict[tuple, dict] = {}
        self.stdout: dict[tuple, str] = {}  # the last python script's stdout, per section

    def copy(self, doc: tuple) -> Path:
        if doc not in self.copies:
            top = self.base / f"{doc[0].stem}-{len(self.copies)}"
            repo = top / "repo"
            repo.mkdir(parents=True)
            for entry in ROOT.iterdir():
                if entry.name not in SKIP_ENTRIES:
                    (repo / entry.name).symlink_to(entry)
            if SHARED.is_dir():
                (top / "shared").symlink_to(SHARED)
            self.copies[doc] = repo
        return self.copies[doc]

    def env(self) -> dict:
        path = f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
        return dict(os.environ, PATH=path, COLUMNS="200", FORESTCOLL_SHARED=str(SHARED), PYTHONHASHSEED="0")


@pytest.fixture(scope="session")
def docrun(tmp_path_factory) -> DocRun:
    return DocRun(tmp_path_factory.mktemp("docs"))


def _check_console(block: Block, steps, cwd: Path, env: dict):
    failures = []
    for command, shown in steps:
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        real = [mask(line, str(cwd)) for line in (proc.stdout + proc.stderr).splitlines()]
        want = [mask(line) for line in shown]
        if shows_error(shown) != (proc.returncode != 0):
            failures.append(f"$ {command}\n  exit status {proc.returncode}\n" + "\n".join(real))
        elif shown and not matches(want, real):
            diff = "\n".join(f"  shown: {w}" for w in want) + "\n" + "\n".join(f"  real:  {r}" for r in real)
            failures.append(f"$ {command}\n{diff}")
    assert not failures, f"{block.id}: " + "\n".join(failures)


def _sections():
    """The runnable blocks grouped by (file, '## ' section), in order: a section is pasted top to bottom."""
    groups: dict[tuple, list[Block]] = {}
    for b in ALL:
        if b.runs:
            groups.setdefault((b.path, b.section), []).append(b)
    for (path, section), group in groups.items():
        slug = "-".join(re.findall(r"[a-z0-9+]+", section.lower())[:4]) or "top"
        yield pytest.param(group, id=f"{path.name}#{slug}")


@pytest.mark.slow
@pytest.mark.parametrize("group", list(_sections()))
def test_blocks_run_as_pasted(group: list[Block], docrun: DocRun):
    """Each section's blocks, in order, in one copy; every failing block is reported (by file:line), not just the first."""
    failures, skipped, ran = [], [], 0
    for block in group:
        if block.skip_reason:
            skipped.append(f"{block.id}: {block.skip_reason}")
            continue
        if block.needs_shared and not (SHARED / "data").is_dir():
            skipped.append(f"{block.id}: needs {SHARED / 'data'}")
            continue
        try:
            _run_block(block, docrun)
            ran += 1
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, "\n\n".join(failures)
    if not ran:
        pytest.skip("; ".join(skipped))


def _run_block(block: Block, docrun: DocRun) -> None:
    key = (block.path, block.section)
    cwd, env = docrun.copy(key), docrun.env()
    if block.kind == "console":
        _check_console(block, console_steps(block.text), cwd, env)
    elif "make-demo" in block.markers:
        steps = console_steps(block.text, prompt=".venv/bin/")
        recipe = _make_demo_recipe()
        (cwd / "out").mkdir(exist_ok=True)  # the recipe's silent `@mkdir -p $(OUT)`
        assert [c for c, _ in steps] == recipe, f"{block.id}: the transcript's commands are not the Makefile's demo recipe"
        _check_console(block, steps, cwd, env)
    elif "output" in block.markers:
        real = [mask(line, str(cwd)) for line in docrun.stdout.get(key, "").splitlines()]
        want = [mask(line) for line in block.text.splitlines()]
        assert matches(want, real), f"{block.id}: shown\n{block.text}\nreal\n" + "\n".join(real)
    elif block.kind == "python" and ">>>" in block.text:
        globs = docrun.globs.setdefault(key, {})
        test = doctest.DocTestParser().get_doctest(block.text, globs, block.id, str(block.path), block.line)
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
        here, report = os.getcwd(), []
        os.chdir(cwd)
        try:
            runner.run(test, out=report.append, clear_globs=False)
            globs.update(test.globs)  # DocTest works on a copy: the next session of this file sees these names
        finally:
            os.chdir(here)
        result = runner.summarize(verbose=False)
        assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {block.id} fail\n" + "".join(report)
    elif block.kind == "python":
        script = cwd / f"_doc_{block.path.stem}_{block.line}.py"  # a file: multiprocessing's spawn re-imports it
        script.write_text(block.text)
        proc = subprocess.run([sys.executable, script.name], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        docrun.stdout[key] = proc.stdout
        assert proc.returncode == 0, f"{block.id}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    else:  # bash, sh, shell
        proc = subprocess.run(["bash", "-e", "-c", block.text], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{block.id}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def _make_demo_recipe() -> list[str]:
    """The demo target's commands as make echoes them ($(BIN) -> .venv/bin, $(OUT) -> out)."""
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\ndemo:", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    cmds = [line.strip().replace("$(BIN)", ".venv/bin").replace("$(OUT)", "out") for line in recipe]
    return [c for c in cmds if c.startswith(".venv/bin/")]


def test_masking_rule():
    assert mask("time       0.009 s") == "time       <s>"
    assert mask("(13468 operations, 0.64 s)") == "(13468 operations, <s>)"
    assert mask(' "wall_s": 4.706,') == ' "wall_s": <s>,'
    assert mask("time       6.3395 ms") == "time       6.3395 ms"  # simulated time: compared
    assert mask("algbw      172.02 GB/s") == "algbw      172.02 GB/s"
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "...", "d"], ["a", "b"]) and matches(["x ... z"], ["x y z"])
