"""Prompt templates live in files; untrusted text enters them only as delimited data."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import jinja2

DATA_TAGS = (
    "task",
    "kind",
    "entry_point",
    "previous_output",
    "reflections",
    "candidate_output",
    "evaluation",
    "lessons",
    "knowledge",
    "repair",
    "uncertainties",
    "unverified",
)


def escape_data(text: str) -> str:
    """Stop data from closing (or opening) one of our delimiter tags."""
    for tag in DATA_TAGS:
        text = text.replace(f"</{tag}>", f"<\\/{tag}>").replace(f"<{tag}>", f"<\\{tag}>")
    return text


class PromptBook:
    """Jinja templates shipped inside a package's ``prompts/`` folder."""

    def __init__(self, package: str, folder: str = "prompts") -> None:
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader(package, folder),
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
