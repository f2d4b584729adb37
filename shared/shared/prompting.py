"""Prompt templates live in files; untrusted text enters them only as delimited data."""

from __future__ import annotations

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

    def render(self, name: str, **context: Any) -> str:
        return self.env.get_template(name).render(**context).strip()
