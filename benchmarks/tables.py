"""Printing benchmark tables: rich in a terminal, or markdown to paste into the README (shared by the scripts here)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table


def show(console: Console, title: str, columns: Sequence[str], rows: list[list[str]], markdown: bool, left: int) -> None:
    """One table; the first ``left`` columns are left-aligned, the rest right-aligned.  No title line when empty."""
    if markdown:
        if title:
            print(f"\n{title}\n")
        print("| " + " | ".join(columns) + " |")
        print("|" + "|".join("---" if i < left else "---:" for i in range(len(columns))) + "|")
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    table = Table(title=title or None)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i < left else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
