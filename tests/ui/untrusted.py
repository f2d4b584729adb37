"""What Streamlit would make of a Markdown source: CommonMark's reading (markdown-it-py) plus
the rewrites Streamlit's frontend applies to the text afterwards (its bundle, 1.67: bare URLs
and e-mail addresses become links, ``:name:`` an emoji, ``:material/name:`` an icon font)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt

# text from a model, a reviewer or a user that must show as itself
HOSTILE = (
    "![x](http://evil.example/pixel.png)",
    "[click](http://evil.example/) **bold** _it_ ~~gone~~ `code`",
    "# Heading\n- item\n1. one\n> quoted",
    "<img src=http://evil.example/a.png> &amp; &lt;b&gt;",
    ":red[styled] :blue-badge[badge] :material/home: :smile: $x^2$",
    "http://evil.example/bare www.evil.example mail@evil.example",
    "\\*already escaped\\* and a trailing backslash \\",
)

_MD = MarkdownIt("commonmark").enable(["strikethrough", "table"])
_STYLED = {
    "link_open",
    "image",
    "em_open",
    "strong_open",
    "s_open",
    "code_inline",
    "html_inline",
}
_BLOCKS = {"paragraph_open", "paragraph_close", "inline"}
# Streamlit's rewrites of text nodes (after the escapes are read)
_REWRITES = (
    re.compile(r"https?://", re.IGNORECASE),  # a bare URL
    re.compile(r"www(?=\.)", re.IGNORECASE),  # www.host
    re.compile(r"[-.\w+]+@[-\w]+(?:\.[-\w]+)+"),  # an e-mail address
    re.compile(r":[\w+-][\w_+-]*:"),  # :emoji: (and :material_icon: after its rewrite)
)


@dataclass
class Reading:
    """A Markdown source as a reader gets it."""

    text: str = ""  # the characters shown, word joiners dropped
    styled: list[str] = field(default_factory=list)  # styled inline tokens
    blocks: list[str] = field(default_factory=list)  # block tokens other than a paragraph
    rewritten: list[str] = field(default_factory=list)  # what Streamlit would rewrite


def read(source: str) -> Reading:
    reading = Reading()
    if ":material/" in source:  # rewritten on the source, before parsing
        reading.rewritten.append(":material/")
    shown: list[str] = []
    for token in _MD.parse(source):
        if token.type not in _BLOCKS:
            reading.blocks.append(token.type)
        for child in token.children or []:
            if child.type in _STYLED:
                reading.styled.append(child.type)
            if child.type == "text":
                shown.append(child.content)
                reading.rewritten.extend(
                    m.group(0) for rx in _REWRITES for m in rx.finditer(child.content)
                )
            elif child.type in ("softbreak", "hardbreak"):
                shown.append("\n")
        if token.type == "paragraph_close":
            shown.append("\n")
    reading.text = "".join(shown).strip("\n").replace("\u2060", "")
    return reading
