"""AppTest: a round's research evidence and the citations of its output, as a reviewer sees
them on the Review page and in the Runs timeline. Each piece of evidence shows its number,
its title (a link only for an http(s) or file URL), the URL itself, its source and query and
the distilled claims or the snippet; failed queries show with their reasons and a degraded
search says so; each ``[n]`` of the output links, through the output's own reference line for
n, to the evidence whose URL that line gives (a mismatch with evidence n shows beside it), and
an invalid one is marked with its problem. A hostile title, URL or snippet renders as inert
text. Runs recorded before research existed show none of it."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from console.evidence import safe_href
from tests.ui.fakes import FakeClient, run_detail, run_summary
from tests.ui.test_app import all_text, assert_clean, make_app, shown
from tests.ui.test_untrusted import visible

HOSTILE_TITLE = "<img src=x onerror=alert(1)> [click](javascript:alert(2)) **bold** :red[x]"
HOSTILE_SNIPPET = "<script>alert(3)</script> ![p](http://evil.example/p.png)"
OUTPUT = (
    "The Golden Gate Bridge opened in 1937 [1]. It is painted orange [2].\n"
    "Its main span is 1,280 metres [7]. A local note agrees [3].\n\n"
    "References\n[1] https://example.org/golden-gate\n[2] javascript:alert(1)\n"
    "[3] file:///srv/docs/notes.md"
)
NO_URL = "[2] has no reference line with a web or file URL"  # javascript: is none


def research(status: str = "degraded") -> dict[str, Any]:
    return {
        "status": status,
        "queries": ["golden gate opening", "bridge colour", "main span"],
        "evidence": [
            {
                "n": 1,
                "url": "https://example.org/golden-gate",
                "title": "Golden Gate Bridge",
                "snippet": "The Golden Gate Bridge opened to traffic on May 27, 1937.",
                "distilled": "Opened to traffic on May 27, 1937.",
                "retrieved_at": "2026-11-30T10:00:00+00:00",
                "source": "corpus",
                "query": "golden gate opening",
                "span": [0, 57],
            },
            {
                "n": 2,
                "url": "javascript:alert(1)",
                "title": HOSTILE_TITLE,
                "snippet": HOSTILE_SNIPPET,
                "distilled": None,
                "retrieved_at": "2026-11-30T10:00:00+00:00",
                "source": "tavily",
                "query": "bridge colour <b>now</b>",
                "span": None,
            },
            {
                "n": 3,
                "url": "file:///srv/docs/notes.md",
                "title": "Local notes",
                "snippet": "The span is 1,280 metres.",
                "distilled": None,
                "retrieved_at": "2026-11-30T10:00:00+00:00",
                "source": "corpus",
                "query": "main span",
                "span": [10, 35],
            },
        ],
        "failed_queries": [{"query": "bridge height", "reason": "tavily is unreachable"}],
    }


def citations() -> dict[str, Any]:
    return {
        "ok": False,
        "cited": [1, 2, 3, 7],
        "problems": [
            {
                "kind": "unknown_number",
                "message": "[7] has no reference line",
                "number": 7,
                "url": None,
                "sentence": None,
            },
            {
                "kind": "uncited_claim",
                "message": "a new factual sentence cites nothing",
                "number": None,
                "url": None,
                "sentence": "It was the longest bridge of its time.",
            },
        ],
    }


class EvidenceFake(FakeClient):
    """Review rev-1 is round 2 of run-1; the run records research and citations for round 2
    (``None`` for either: the keys absent, as in a run from before research)."""

    def __init__(self, research: dict | None, citations: dict | None, output: str = OUTPUT) -> None:
        super().__init__(runs=[run_summary("run-1")])
        self.research, self.citations, self.output = research, citations, output

    def get_review(self, review_id: str) -> dict:
        detail = super().get_review(review_id)
        detail["context"]["output"] = self.output
        return detail

    def get_run(self, run_id: str) -> dict:
        run = super().get_run(run_id)
        second: dict[str, Any] = {"number": 2, "output": self.output, "usage": {}}
        if self.research is not None:
            second["research"] = self.research
        if self.citations is not None:
            second["citations"] = self.citations
        run["rounds"].append(second)
        return run


class Html(HTMLParser):
    """What a browser builds from the page's HTML: its tags with their attributes, and the
    text a reader sees (entities read, style sheets left out)."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.texts: list[str] = []
        self._in_style = False
        self.feed(source)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if not self._in_style:
            self.texts.append(data)

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def with_class(self, name: str) -> list[dict[str, str | None]]:
        return [a for _, a in self.tags if name in (a.get("class") or "").split()]


def page_html(at: AppTest) -> Html:
    return Html("\n".join(str(h.proto.body) for h in at.get("html")))


def open_review(fake: FakeClient) -> AppTest:
    at = make_app(fake, review_id="rev-1").run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    return at


def test_each_piece_of_evidence_shows_its_title_link_source_query_and_claims():
    at = open_review(EvidenceFake(research(), citations()))
    assert "Evidence and citations" in [s.value for s in at.subheader]
    page = page_html(at)
    cards = page.with_class("cc-ev")
    assert [c["id"] for c in cards] == ["cc-ev-2-1", "cc-ev-2-2", "cc-ev-2-3"]
    links = [a for tag, a in page.tags if tag == "a" and not (a.get("href") or "").startswith("#")]
    assert [a["href"] for a in links] == [
        "https://example.org/golden-gate",
        "file:///srv/docs/notes.md",
    ]
    assert all(a["rel"] == "noopener noreferrer nofollow" for a in links)
    text = page.text
    for seen in (
        "[1]Golden Gate Bridge",
        "source corpus · query “golden gate opening”",
        "Distilled: Opened to traffic on May 27, 1937.",
        "Snippet: The span is 1,280 metres.",  # no distilled claims: the snippet
        "characters 0–57",
        "https://example.org/golden-gate",
    ):
        assert seen in text, seen


def test_a_degraded_search_says_so_and_lists_each_failed_query_with_its_reason():
    at = open_review(EvidenceFake(research(), citations()))
    assert [shown(w.value) for w in at.warning] == [
        "Research degraded: 1 query failed, so the evidence may be incomplete."
    ]
    assert "“bridge height”: tavily is unreachable" in page_html(at).text
    calm = open_review(EvidenceFake(research(status="ok") | {"failed_queries": []}, None))
    assert not calm.warning
    assert "Failed queries" not in all_text(calm)


def test_citations_in_the_output_link_to_their_evidence_and_invalid_ones_are_marked():
    at = open_review(EvidenceFake(research(), citations()))
    page = page_html(at)
    cites = {(a["data-cite"], a["href"], a["title"]) for a in page.with_class("cc-cite")}
    assert cites == {
        ("1", "#cc-ev-2-1", "Golden Gate Bridge"),
        ("3", "#cc-ev-2-3", "Local notes"),
    }
    anchors = {a["id"] for a in page.with_class("cc-ev")}
    assert {str(href).lstrip("#") for _, href, _ in cites} <= anchors  # each link has its target
    bad = {(a["data-cite"], a["title"]) for a in page.with_class("cc-cite-bad")}
    assert bad == {("2", NO_URL), ("7", "[7] has no reference line")}
    assert [shown(e.value) for e in at.error] == [
        "Citation problems: 2. Each is marked in the output."
    ]
    text = page.text
    assert "no reference for this number [7]: [7] has no reference line" in text
    assert "claim without a citation: a new factual sentence cites nothing" in text
    assert "“It was the longest bridge of its time.”" in text
    assert "The Golden Gate Bridge opened in 1937 [1]." in text  # the output reads as it ships


def test_a_clean_citation_check_is_a_success_line_and_cited_evidence_is_marked():
    clean = {"ok": True, "cited": [1, 3], "problems": []}
    at = open_review(EvidenceFake(research(status="ok"), clean))
    assert [shown(s.value) for s in at.success] == [
        "Citations checked: 2 cited, each matches its evidence."
    ]
    page = page_html(at)
    assert len(page.with_class("cc-ev-cited")) == 2
    # [7] has no reference line: marked although the check did not flag it
    # (the output shows twice: with the quotes marked, and beside the previous round)
    assert {(a["data-cite"], a["title"]) for a in page.with_class("cc-cite-bad")} == {
        ("2", NO_URL),
        ("7", "[7] has no reference line with a web or file URL"),
    }


SWAPPED = (
    "The Golden Gate Bridge opened in 1937 [1]. A local note gives the span [3].\n"
    "It crosses the strait [4]. It is painted orange [5].\n\n"
    "References\n[1] file:///srv/docs/notes.md\n[3] https://example.org/golden-gate\n"
    "[4] https://example.org/golden-gate\n[5] https://made.up/orange"
)


def test_each_citation_follows_the_outputs_own_reference_line_not_its_number():
    swapped = {
        "ok": False,
        "cited": [1, 3, 4, 5],
        "problems": [
            {
                "kind": "wrong_source",
                "message": "[1] lists evidence [3]'s URL file:///srv/docs/notes.md",
                "number": 1,
                "url": "file:///srv/docs/notes.md",
                "sentence": None,
            }
        ],
    }
    at = open_review(EvidenceFake(research(status="ok"), swapped, output=SWAPPED))
    page = page_html(at)
    assert not page.with_class("cc-cite")  # no marker leads to the evidence of its number
    mismatched = {
        (a["data-cite"], a["data-evidence"], a["href"], a["title"])
        for a in page.with_class("cc-cite-mismatch")
    }
    assert mismatched == {
        ("1", "3", "#cc-ev-2-3", "[1] lists evidence [3]'s URL, not evidence [1]'s: Local notes"),
        (
            "3",
            "1",
            "#cc-ev-2-1",
            "[3] lists evidence [1]'s URL, not evidence [3]'s: Golden Gate Bridge",
        ),
        (
            "4",
            "1",
            "#cc-ev-2-1",
            "[4] lists evidence [1]'s URL, not evidence [4]'s: Golden Gate Bridge",
        ),
    }
    text = page.text
    assert "opened in 1937 [1] (lists evidence [3])." in text  # the mismatch, in plain sight
    assert "[3] (lists evidence [1]) https://example.org/golden-gate" in text
    [bad] = {(a["data-cite"], a["title"]) for a in page.with_class("cc-cite-bad")}
    assert bad == (
        "5",
        "reference [5] lists https://made.up/orange, which is none of this round's evidence",
    )
    assert "reference lists another source's URL [1]" in text  # the problem, named


def test_hostile_titles_urls_and_snippets_render_inert():
    at = open_review(EvidenceFake(research(), citations()))
    page = page_html(at)
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"img", "script", "iframe", "object", "embed", "svg"}
    hrefs = [a.get("href") or "" for tag, a in page.tags if tag == "a"]
    assert not [h for h in hrefs if not h.startswith(("#", "https://", "file://"))]
    assert not [a for _, a in page.tags if any(k.startswith("on") for k in a)]
    text = page.text
    assert HOSTILE_TITLE in text  # shown as the characters it is
    assert HOSTILE_SNIPPET in text
    assert "javascript:alert(1) (not a web or file address: not linked)" in text
    assert "query “bridge colour <b>now</b>”" in text
    visible(at)  # and no Markdown slot of the page renders anything from the run


def test_a_round_without_research_shows_its_output_as_before():
    at = open_review(EvidenceFake(None, None))
    assert "Evidence and citations" not in [s.value for s in at.subheader]
    page = page_html(at)
    assert not page.with_class("cc-cite")
    assert not page.with_class("cc-cite-bad")
    assert "opened in 1937 [1]. It is painted orange [2]." in page.text


def test_the_runs_timeline_shows_each_rounds_evidence_and_links_its_citations():
    fake = EvidenceFake(research(), citations())
    fake.runs["run-1"] = run_detail("run-1")
    at = make_app(fake).run()
    at.switch_page("views/runs.py").run()
    at.query_params["run"] = "run-1"
    at.run()
    assert_clean(at)
    last = at.expander[-1]
    assert last.label.startswith("Round 2")
    inside = Html("\n".join(str(h.proto.body) for h in last.get("html")))
    assert [c["id"] for c in inside.with_class("cc-ev")] == ["cc-ev-2-1", "cc-ev-2-2", "cc-ev-2-3"]
    assert {a["href"] for a in inside.with_class("cc-cite")} == {"#cc-ev-2-1", "#cc-ev-2-3"}
    assert [a["data-cite"] for a in inside.with_class("cc-cite-bad")] == ["2", "7", "2"]
    assert [shown(w.value) for w in last.warning] == [
        "Research degraded: 1 query failed, so the evidence may be incomplete."
    ]
    first = Html("\n".join(str(h.proto.body) for h in at.expander[0].get("html")))
    assert not first.with_class("cc-ev")  # round 1 has no research
    visible(at)


@pytest.mark.parametrize(
    ("url", "link"),
    [
        ("https://example.org/a?b=1#c", True),
        ("http://example.org", True),
        ("file:///srv/docs/a.md", True),
        ("HTTPS://EXAMPLE.ORG/", True),
        ("javascript:alert(1)", False),
        ("JaVaScRiPt:alert(1)", False),
        ("java\tscript:alert(1)", False),
        (" javascript:alert(1)", False),
        ("data:text/html,<script>alert(1)</script>", False),
        ("vbscript:msgbox", False),
        ("https://example.org/a b", False),  # a blank would end the attribute in some readers
        ('https://example.org/"onmouseover=x', False),
        ("https:///no-host", False),
        ("//example.org/relative", False),
        ("/local/path", False),
        ("", False),
        (None, False),
    ],
)
def test_only_web_and_file_urls_become_links(url, link):
    assert (safe_href(url) is not None) == link
