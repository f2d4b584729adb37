"""Prompt templates live in files; untrusted text enters them only as delimited data.

Authority is structural: only the reviewer section (``reviewer_section.j2``, rendered from
decision records) speaks for a person. Everything else is data, escaped by
:func:`escape_data` so that it can neither open nor close any section of any prompt, nor
write the reviewer marker, whatever its case, spacing or lookalike characters.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

import jinja2

# Every tag name any prompt of the repository uses (templates and code-built prompts);
# tests/shared/test_prompting.py fails when a template uses one that is missing here.
PROMPT_TAGS = (
    "task",
    "kind",
    "entry_point",
    "previous_output",
    "reviewer_instructions",
    "binding_points",
    "reflections",
    "critic_issues",
    "candidate_output",
    "evaluation",
    "lessons",
    "knowledge",
    "evidence",
    "declined",
    "counterfactual_review",
    "query",
    "passage",
    "repair",
    "uncertainties",
    "unverified",
)
# The tags of the one section that speaks for a person.
REVIEWER_TAGS = ("reviewer_instructions", "binding_points")

_LT = "<\uff1c\ufe64"  # '<' and its fullwidth and small-form lookalikes
_GT = ">\uff1e\ufe65"
_OPEN_BRACKET = "\\[\uff3b"  # '[' and its fullwidth form
# White space and the invisible characters a model reads straight through
_GAP_CHARS = r"\s\u200b-\u200d\u2060\ufeff"
_GAP = f"[{_GAP_CHARS}]*"


def _letters(word: str) -> str:
    """A pattern for ``word`` that also matches its fullwidth spelling (any case)."""
    parts = []
    for char in word:
        cases = "".join(dict.fromkeys((char.lower(), char.upper())))
        wide = "".join(chr(ord(c) + 0xFEE0) for c in cases)
        parts.append(f"[{re.escape(cases)}{wide}]")
    return "".join(parts)


_NAMES = "|".join(_letters(tag) for tag in sorted(PROMPT_TAGS, key=len, reverse=True))
# The bracket of a tag-like `<name`, `< / name`, `＜NAME ...`: followed by a tag name that
# ends there (space, `/`, `>`, the end), so `<tasks>` or `List<int>` are not touched.
_TAG = re.compile(
    f"[{_LT}](?={_GAP}(?:[/\uff0f]{_GAP})?(?:{_NAMES})(?:[{_GAP_CHARS}/\uff0f{_GT}]|\\Z))"
)
# The bracket of the reviewer marker: `[BINDING`, `[ binding`, `[human reviewer`, `［Binding`
_MARKER = re.compile(
    f"[{_OPEN_BRACKET}](?={_GAP}(?:{_letters('binding')}"
    f"|{_letters('human')}[{_GAP_CHARS}_\\-\uff3f]*{_letters('reviewer')}))"
)


def escape_data(text: str) -> str:
    """Defuse every prompt tag and the reviewer marker in ``text``: a backslash goes right
    after the opening bracket (``<\\/task>``, ``[\\BINDING``). Visible and deterministic
    (replayed calls send the same bytes); every other bracket passes through untouched."""
    text = _TAG.sub(lambda m: m.group(0) + "\\", text)
    return _MARKER.sub(lambda m: m.group(0) + "\\", text)


class PromptBook:
    """Jinja templates shipped inside a package's ``prompts/`` folder, plus the shared ones
    (``reviewer_section.j2``)."""

    def __init__(self, package: str, folder: str = "prompts") -> None:
        self.env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(
                [jinja2.PackageLoader(package, folder), jinja2.PackageLoader("shared", "prompts")]
            ),
            undefined=jinja2.StrictUndefined,
            autoescape=False,  # plain-text prompts; data is escaped by the `data` filter
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
        )
        self.env.filters["data"] = escape_data
        self._constant: dict[tuple[str, tuple[tuple[str, Hashable], ...]], str] = {}

    def render(self, name: str, **context: Any) -> str:
        return self.env.get_template(name).render(**context).strip()

    def render_constant(self, name: str, **context: Hashable) -> str:
        """``render`` for a prompt that depends only on a few settings-like values (a
        system prompt): rendered once per distinct context, then reused."""
        key = (name, tuple(sorted(context.items())))
        text = self._constant.get(key)
        if text is None:
            if len(self._constant) >= 256:  # bounded: a context may carry a caller's value
                self._constant.clear()
            text = self._constant[key] = self.render(name, **context)
        return text
