"""The console's rendering helpers: what a reviewer sees is escaped and marks what changed."""

import pytest
from streamlit.testing.v1 import AppTest

from console.view import (
    WORD_JOINER,
    answer_words,
    check_words,
    claimer,
    highlight,
    md_literal,
    point_outcomes,
    round_points,
    side_by_side,
    unified_diff,
)
from tests.ui.test_app import SCRIPT_TIMEOUT_S
from tests.ui.untrusted import HOSTILE, read


def test_side_by_side_shows_both_rounds_and_marks_the_changed_line():
    previous = "def f(x):\n    return x*2\n"
    current = "def f(x):\n    return x * 3\n"
    table = side_by_side(previous, current)
    assert "previous round" in table
    assert "this round" in table
    assert table.count("def&nbsp;f(x):") == 2  # the unchanged line, once per side
    assert 'class="diff_chg"' in table  # the changed line is marked on both sides


def test_side_by_side_escapes_model_output():
    table = side_by_side("<b>old</b>", "<script>alert(1)</script>")
    assert "<script>" not in table
    assert "&lt;script&gt;" in table


def test_side_by_side_with_no_previous_round_shows_everything_as_added():
    table = side_by_side(None, "first line")
    assert 'class="diff_add"' in table


def test_unified_diff_names_the_rounds():
    diff = unified_diff("a\nb", "a\nc")
    assert diff.splitlines()[:2] == ["--- previous round", "+++ this round"]
    assert "-b" in diff
    assert "+c" in diff


def test_highlight_marks_quotes_and_escapes_the_rest():
    marked = highlight("x < y and z", ["and z"])
    assert "x &lt; y <mark>and z</mark>" in marked


def test_claimer_prefers_the_name():
    assert claimer({"claimed_by": "tok_1", "claimed_by_name": "rita"}) == "rita"
    assert claimer({"claimed_by": "tok_1"}) == "tok_1"
    assert claimer({}) == "—"


# ---------------------------------------------------------------- untrusted text
def _every_markdown_slot(texts: list[str]) -> None:
    """A page that puts each text, through md_literal, in every kind of Markdown slot."""
    import streamlit as st

    from console.view import md_literal

    for text in texts:
        safe = md_literal(text)
        st.markdown(f"**Issue 1** · {safe}")
        st.caption(safe)
        st.error(f"Could not load: {safe}")
        st.info(safe)
        st.warning(safe)
        st.success(safe)
        st.subheader(safe)
        with st.expander(f"Round 1 · {safe}"):
            st.text(text)


def _sources(at: AppTest) -> list[str]:
    out: list[str] = []
    for kind in ("markdown", "caption", "error", "info", "warning", "success", "subheader"):
        out.extend(str(e.value) for e in getattr(at, kind))
    out.extend(str(e.label) for e in at.expander)
    return out


@pytest.mark.parametrize("text", HOSTILE)
def test_untrusted_text_renders_nothing_in_any_markdown_slot(text):
    at = AppTest.from_function(
        _every_markdown_slot, args=([text],), default_timeout=SCRIPT_TIMEOUT_S
    ).run()
    assert not at.exception
    sources = _sources(at)
    assert len(sources) == 8
    for source in sources:
        reading = read(source)
        assert reading.blocks == [], source  # no heading, list, quote or code block
        assert reading.styled in ([], ["strong_open"]), source  # only the console's own bold
        assert reading.rewritten == [], source  # no bare link, e-mail, emoji or icon font
        shown = reading.text.replace("\u00a0", " ").replace("\n", " ")
        assert " ".join(text.split()) in " ".join(shown.split())  # every character, as typed


def test_escaped_text_reads_as_typed_and_ordinary_prose_is_unchanged():
    prose = "Raise ValueError for negative days."
    assert read(md_literal(prose)).text == prose
    assert WORD_JOINER not in md_literal(prose)  # joiners only where a rewrite would match
    indented = read(md_literal("    indented"))
    assert (indented.blocks, indented.text.strip()) == ([], "indented")  # not a code block
    assert read("    indented").blocks == ["code_block"]
    assert read(md_literal("a\nb")).text == "a\nb"
    assert md_literal(3) == "3"


def test_the_checker_sees_what_streamlit_would_render():
    """The checks above can fail: raw Markdown is caught by each of them."""
    assert read("![x](http://evil.example/p.png)").styled == ["image"]
    assert read("[a](b) _i_").styled == ["link_open", "em_open"]
    assert read("# h").blocks
    assert read("see http://evil.example").rewritten == ["http://"]
    assert read("\\:smile\\:").rewritten == [":smile:"]  # escapes alone do not stop it
    assert read(":material/home:").rewritten


class TestPointOutcomes:
    POINTS = ["Mention the Moon.", "Say why there are two tides."]

    def test_the_first_answer_and_the_latest_check_of_each_point(self):
        rounds = [
            {"number": 2, "responses": [{"point": "ignored: before the comment"}]},
            {
                "number": 3,
                "responses": [
                    {"point": "mention the  moon.", "action": "applied", "where": "the Moon"},
                    {"point": self.POINTS[1], "action": "declined", "reason": "off topic"},
                ],
                "critique": {"binding_checks": [{"point": self.POINTS[0], "satisfied": False}]},
            },
            {
                "number": 4,
                "critique": {
                    "binding_checks": [
                        {"point": self.POINTS[0], "satisfied": True, "quote": "the Moon"}
                    ]
                },
            },
        ]
        moon, tides = point_outcomes(self.POINTS, 2, rounds)
        assert answer_words(moon) == "The Actor applied it in round 3, at “the Moon”."
        assert check_words(moon) == "The Critic found it applied in round 4: “the Moon”."
        assert answer_words(tides) == "The Actor declined it in round 3: off topic."
        # the Critic's second check names the Moon point only: by position it is the first
        assert check_words(tides) == "The Critic has not checked it yet."

    def test_nothing_yet(self):
        [outcome] = point_outcomes(self.POINTS[:1], 2, [])
        assert answer_words(outcome) == "The Actor has not answered it yet."
        assert check_words(outcome) == "The Critic has not checked it yet."

    def test_a_rounds_own_points(self):
        rnd = {
            "number": 3,
            "responses": [{"point": "Be brief.", "action": "applied", "where": "Short."}],
            "critique": {"binding_checks": [{"point": "Be brief.", "satisfied": True}]},
        }
        [outcome] = round_points(rnd)
        assert (outcome["answered_in"], outcome["checked_in"], outcome["satisfied"]) == (3, 3, True)
