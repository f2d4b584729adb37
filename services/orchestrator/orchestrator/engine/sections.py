"""Split a long output into sections and put it back together, byte for byte.

Text splits at Markdown headings (``#`` to ``######`` at the start of a line, outside
fenced code blocks); whatever comes before the first heading is a section of its own.
Code splits at top-level ``def``/``class`` blocks (their decorators included), by the line
numbers :mod:`ast` reports; the module header before the first block is its own section,
and top-level statements between blocks stay with the block before them. Code that does not
parse is one section. Pure functions: ``join(split(x)) == x`` for every input.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

MAX_SECTIONS = 16  # more than this are packed into neighbours (one critic call each)
_HEADING = re.compile(r"^#{1,6}(?:[ \t]|$)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_TITLE_CHARS = 120


@dataclass(frozen=True)
class Section:
    index: int
    title: str
    text: str

    @property
    def chars(self) -> int:
        return len(self.text)


def split(text: str, kind: str = "text", *, max_sections: int = MAX_SECTIONS) -> list[Section]:
    """The sections of ``text`` in order (``kind``: ``text`` or ``code``)."""
    lines = text.splitlines(keepends=True)
    starts = _code_starts(text) if kind == "code" else _heading_starts(lines)
    starts = sorted({s for s in starts if 0 < s < len(lines)} | {0})
    ends = [*starts[1:], len(lines)]
    parts = ["".join(lines[start:end]) for start, end in zip(starts, ends, strict=True)]
    parts = _pack([p for p in parts if p] or [text], max_sections)
    return [Section(i, _title(part, kind, i), part) for i, part in enumerate(parts)]


def join(sections: list[Section] | list[str]) -> str:
    return "".join(s if isinstance(s, str) else s.text for s in sections)


def replace(sections: list[Section], revised: dict[int, str]) -> str:
    """The document with the sections in ``revised`` replaced, the others byte-identical.

    A replacement keeps its section's trailing line break, so it cannot run into the next
    section's heading or ``def``."""
    out = []
    for section in sections:
        text = revised.get(section.index, section.text)
        if section.index in revised and section.text.endswith("\n") and not text.endswith("\n"):
            text += "\n"
        out.append(text)
    return "".join(out)


def _heading_starts(lines: list[str]) -> list[int]:
    starts, fenced = [], False
    for number, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and _HEADING.match(line):
            starts.append(number)
    return starts


def _code_starts(text: str) -> list[int]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    starts = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            starts.append(first - 1)  # ast counts from 1
    return starts


def _pack(parts: list[str], limit: int) -> list[str]:
    """At most ``limit`` parts: neighbours are merged, each chunk filled to about an equal
    share of the whole."""
    if len(parts) <= limit:
        return parts
    share = -(-sum(len(p) for p in parts) // limit)
    packed: list[str] = []
    for part in parts:
        if packed and (len(packed[-1]) < share or len(packed) >= limit):
            packed[-1] += part
        else:
            packed.append(part)
    return packed


def _title(text: str, kind: str, index: int) -> str:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if kind == "code":
        match = re.search(r"^(?:async\s+def|def|class)\s+(\w+)", text, re.MULTILINE)
        if match and first.startswith(("def", "class", "async", "@")):
            return match.group(1)
        return "module header" if index == 0 else first[:_TITLE_CHARS]
    if _HEADING.match(first):
        return first.lstrip("#").strip()[:_TITLE_CHARS]
    return "(before the first heading)" if index == 0 else first[:_TITLE_CHARS]
