"""A small, safe XML tree reader for the file formats forestcoll imports (NCCL topology, MSCCL).

expat (from the standard library) with line numbers on every element, parent
links, the comments at document level (outside the top element), and
DOCTYPE / ENTITY declarations refused (no entity expansion).  Errors are raised
as the caller's own one-line error class.
"""

from __future__ import annotations

import xml.parsers.expat
from dataclasses import dataclass, field

from forestcoll.errors import ForestCollError
from forestcoll.limits import MAX_XML_ATTRIBUTE, MAX_XML_DEPTH

__all__ = ["Elem", "parse_tree"]


@dataclass
class Elem:
    """A parsed XML element with its line number."""

    tag: str
    attrs: dict[str, str]
    line: int
    children: list[Elem] = field(default_factory=list)
    parent: Elem | None = field(default=None, repr=False, compare=False)


def parse_tree(text: str, source: str, error: type[ForestCollError], top: str,
               doctype_note: str = "") -> tuple[Elem, list[str]]:
    """The single top element ``<top>`` of ``text`` and the comments at document level.

    Malformed XML, DTDs, entities or not exactly one top element raise ``error`` naming ``source``
    (and the line)."""
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise error(f"{source}: DOCTYPE / ENTITY declarations are not allowed{doctype_note}")
    parser = xml.parsers.expat.ParserCreate()
    root = Elem("#document", {}, 0)
    stack = [root]
    comments: list[str] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        if len(stack) > MAX_XML_DEPTH:
            raise error(f"{source}:{parser.CurrentLineNumber}: elements nested more than {MAX_XML_DEPTH} deep "
                        "(forestcoll's limit; see docs/limits.md)")
        long = next((k for k, v in attrs.items() if len(v) > MAX_XML_ATTRIBUTE), None)
        if long is not None:
            raise error(f"{source}:{parser.CurrentLineNumber}: <{tag}> attribute {long} holds {len(attrs[long]):,} "
                        f"characters, above forestcoll's limit of {MAX_XML_ATTRIBUTE:,} (see docs/limits.md)")
        elem = Elem(tag, dict(attrs), parser.CurrentLineNumber, parent=stack[-1])
        stack[-1].children.append(elem)
        stack.append(elem)

    def end(tag: str) -> None:
        stack.pop()

    def comment(data: str) -> None:
        if len(stack) == 1:
            comments.append(data.strip())

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CommentHandler = comment
    try:
        parser.Parse(text, True)
    except xml.parsers.expat.ExpatError as exc:
        raise error(f"{source}:{exc.lineno}: malformed XML ({xml.parsers.expat.ErrorString(exc.code)})") from None
    if len(root.children) != 1:
        raise error(f"{source}: expected one <{top}> element")
    return root.children[0], comments
