"""The README is the front door, and every relative link in it and in the docs leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.conftest import DOCS, GENERATED, REPO

README = REPO / "README.md"
# [text](target) and ![alt](target), outside code
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    return [
        target
        for target in LINK.findall(text)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")
    ]


def broken(page: Path) -> list[str]:
    missing = []
    for target in relative_links(page):
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists() and path not in GENERATED:
            missing.append(target)
    return missing


class TestReadme:
    def test_is_the_front_door_of_at_most_200_lines(self) -> None:
        lines = README.read_text(encoding="utf-8").splitlines()
        assert len(lines) <= 200, f"README.md has {len(lines)} lines"

    def test_names_the_two_commands_and_the_docs(self) -> None:
        text = README.read_text(encoding="utf-8")
        assert "make run" in text
        assert "make test" in text
        assert "(docs/getting-started.md)" in text
        assert "research" in text.split("```mermaid", 1)[1].split("```", 1)[0]

    def test_every_relative_link_resolves(self) -> None:
        assert relative_links(README), "the README links into the docs"
        assert broken(README) == []


class TestDocsLinks:
    @pytest.mark.parametrize(
        "page", sorted(DOCS.rglob("*.md")), ids=lambda p: str(p.relative_to(DOCS))
    )
    def test_every_relative_link_resolves(self, page: Path) -> None:
        assert broken(page) == []

    def test_a_broken_link_is_found(self, tmp_path: Path) -> None:
        page = tmp_path / "page.md"
        page.write_text(
            "[ok](page.md) [gone](nothere.md#x) `[code](nothere.md)` [web](https://x.org)\n"
        )
        assert broken(page) == ["nothere.md#x"]
