"""Every fenced block of README.md and docs/*.md, classified, and the rules that run and compare them.

A block's kind is its fence's language; an unlabelled fence is an error (``tests/test_docs.py`` fails on
it), so a new block must say what it is:

* ``console``  -- a shell session: ``$ command`` lines, each followed by the output it prints (stdout and
  stderr together).  Run one by one with ``bash -c`` and compared after masking (below).  A command whose
  shown output has a ``forestcoll: error:`` line must exit non-zero; any other must exit 0.
* ``bash`` / ``sh`` / ``shell`` -- a script: run with ``bash -e``; it must exit 0 (output not compared).
* ``python``   -- a ``>>>`` session (doctest, ELLIPSIS and NORMALIZE_WHITESPACE; the sessions of one file
  share their names, in order) or else a script, run with the venv's python; it must exit 0.
* ``text`` / ``yaml`` / ``json`` / ``xml`` -- shown, not run (outputs, diagrams, synopses, formats);
  ``yaml`` and ``json`` must parse.  A ``text`` block marked ``output`` is the stdout of the ``python``
  script block right before it, compared like a console output.

Markers: an HTML comment on the line right before the fence, visible in the markdown source::

    <!-- doc-test: needs shared-data -->       run only when ../shared/data exists (else skip, saying so)
    <!-- doc-test: skip: REASON -->            not run; REASON is the skip message (e.g. needs a GPU)
    <!-- doc-test: output -->                  (text) what the python block above prints
    <!-- doc-test: make-demo -->               (text) `make demo`'s transcript: lines starting with
                                               `.venv/bin/` are the commands, run and compared as console

Every block runs from a temporary copy of the repository root (the top-level entries symlinked, so
relative paths such as docs/examples/... and examples/... resolve and files a command writes land in the
copy, never in the checkout), with ``.venv/bin`` first on PATH and ``../shared`` next to the copy when
the real one exists.  The blocks of one section (a ``## `` heading of one file) run in order in the same
copy, as a reader pastes them; sections are independent of each other (and may run in parallel).

Masking rule (applied to shown and real output alike, nothing else is masked):
  1. a wall-clock duration -- a decimal number followed by `` s`` (``0.64 s``, ``time  0.009 s``) and the
     JSON field ``"wall_s": N`` -- becomes ``<s>``: it depends on the machine and its load;
  2. the temporary copy's absolute path becomes ``.``;
  3. a shown line ``...`` stands for any number of lines, and ``...`` inside a shown line for any text.
Everything else is compared exactly: bounds, simulated GB/s and times, counts, names, messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

RUN_KINDS = {"console", "bash", "sh", "shell", "python"}
SHOWN_KINDS = {"text", "yaml", "json", "xml"}
MARKERS = ("needs shared-data", "skip:", "output", "make-demo")

_FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
_HEADING = re.compile(r"^## (.+)$", re.M)
_MARK = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    kind: str  # the fence's language ("" when unlabelled)
    text: str
    markers: tuple[str, ...] = field(default=())
    section: str = ""  # the '## ' heading the block is under ("" before the first)

    @property
    def id(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        for m in self.markers:
            if m.startswith("skip:"):
                return m[len("skip:") :].strip()
        return None

    @property
    def needs_shared(self) -> bool:
        return "needs shared-data" in self.markers

    @property
    def runs(self) -> bool:
        return self.kind in RUN_KINDS or "make-demo" in self.markers or "output" in self.markers


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one markdown file, in order, with the doc-test markers on the line before each."""
    text = path.read_text()
    fences = list(_FENCE.finditer(text))
    heads = [h for h in _HEADING.finditer(text) if not any(f.start() < h.start() < f.end() for f in fences)]
    out = []
    for m in fences:
        section = ([""] + [h.group(1).strip() for h in heads if h.start() < m.start()])[-1]
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        markers = _split_markers(mark.group(1)) if mark else ()
        out.append(Block(path, text.count("\n", 0, m.start()) + 1, m.group(1).lower(), m.group(2), markers, section))
    return out


def _split_markers(text: str) -> tuple[str, ...]:
    """Markers are separated by ';'; a 'skip:' marker takes the rest of the comment as its reason."""
    head, sep, reason = text.partition("skip:")
    found = [m.strip() for m in head.split(";") if m.strip()]
    return (*found, f"skip: {reason.strip()}") if sep else tuple(found)


def problems(block: Block) -> list[str]:
    """What is wrong with a block's label or markers (empty when it can be checked)."""
    errs = []
    if block.kind not in RUN_KINDS | SHOWN_KINDS:
        errs.append(f"fence language {block.kind!r}: label it " + ", ".join(sorted(RUN_KINDS | SHOWN_KINDS)))
    for m in block.markers:
        if not m.startswith(MARKERS):
            errs.append(f"unknown doc-test marker {m!r} (known: {', '.join(MARKERS)})")
        if m.startswith("skip:") and not m[5:].strip():
            errs.append("a skip marker must give its reason")
    if block.kind == "console" and block.text.strip() and not block.text.startswith("$ "):
        errs.append("a console block starts with a '$ ' command line")
    return errs


# ----- sessions and comparison ----------------------------------------------------------------


def console_steps(text: str, prompt: str = "$ ") -> list[tuple[str, list[str]]]:
    """(command, shown output lines) for each prompt line; with prompt '.venv/bin/' the line is the command."""
    steps: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(prompt):
            steps.append((line[2:] if prompt == "$ " else line, []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"output before the first command: {line!r}")
    for _, shown in steps:
        while shown and not shown[-1].strip():
            shown.pop()  # the blank line between two commands
    return steps


_DURATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)? s\b")
_WALL = re.compile(r'("wall_s":\s*)[0-9.eE+-]+')


def mask(line: str, tmp: str | None = None) -> str:
    """The masking rule of this module's docstring, on one line."""
    if tmp:
        line = line.replace(tmp, ".")
    line = _WALL.sub(r"\1<s>", line)
    return _DURATION.sub("<s>", line).rstrip()


def _line_matches(shown: str, real: str) -> bool:
    if "..." not in shown:
        return shown == real
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, real) is not None


def matches(shown: list[str], real: list[str]) -> bool:
    """True when the real lines fit the shown ones (masked already): '...' lines take any number of lines."""
    n, m = len(shown), len(real)
    # ok[i][j]: shown[i:] matches real[j:]
    ok = [[False] * (m + 1) for _ in range(n + 1)]
    ok[n][m] = True
    for i in range(n - 1, -1, -1):
        for j in range(m, -1, -1):
            if shown[i].strip() == "...":
                ok[i][j] = ok[i + 1][j] or (j < m and ok[i][j + 1])
            else:
                ok[i][j] = j < m and ok[i + 1][j + 1] and _line_matches(shown[i], real[j])
    return ok[0][0]


def shows_error(shown: list[str]) -> bool:
    return any("forestcoll: error:" in line or line.startswith("Traceback") for line in shown)
