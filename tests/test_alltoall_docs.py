"""Every python script block in docs/alltoall.md runs as pasted, in-process (fast tier; tests/test_docs.py
runs them again as scripts, with their shown output, in the slow tier).  Blocks with a doc-test skip marker
(a torch fragment) are left to that marker."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_blocks import blocks

DOC = Path(__file__).resolve().parents[1] / "docs" / "alltoall.md"
BLOCKS = [b for b in blocks(DOC) if b.kind == "python" and not b.skip_reason]


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block_runs(block):
    exec(compile(block.text, str(DOC), "exec"), {})
