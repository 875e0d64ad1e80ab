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
