"""Start a point that quotes the output (console.quoting): what the browser picks becomes a
quote taken from the output itself, the keyboard's line picker does the same, and the point
sent carries its quote. The output's HTML in the selection component is escaped."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from console.view import marked_output, picked_quote, quoted_point
from tests.ui.fakes import FakeClient
from tests.ui.test_app import assert_clean, has_key, make_app, shown
from tests.ui.test_review import CODE, CodeFake, claimed, open_review

HAIKU = "Rivers run to sea\nstones <b>remember</b> water\nsilence of the banks"


class TestPickedQuote:
    def test_the_selected_text_in_its_line_is_the_quote(self) -> None:
        assert picked_quote(CODE, 3, 3, "day < 0") == {"quote": "day < 0", "first": 3, "last": 3}

    def test_a_line_number_alone_quotes_the_line_without_its_indentation(self) -> None:
        assert picked_quote(CODE, 3, 3) == {"quote": "if day < 0:", "first": 3, "last": 3}

    def test_a_selection_over_two_lines_keeps_them(self) -> None:
        picked = picked_quote(CODE, 3, 4, "if day < 0:\n        return  -1\n")
        assert picked == {"quote": "if day < 0:\n        return  -1", "first": 3, "last": 4}

    def test_a_selection_ending_at_the_next_line_start_names_its_own_lines(self) -> None:
        picked = picked_quote(CODE, 2, 3, '"""Two a day."""\n')
        assert picked == {"quote": '"""Two a day."""', "first": 2, "last": 2}

    def test_text_the_output_does_not_have_there_quotes_the_lines_instead(self) -> None:
        # the browser's word is checked: a quote is always the output's own text
        picked = picked_quote(CODE, 3, 3, "import os; os.system('rm -rf /')")
        assert picked == {"quote": "if day < 0:", "first": 3, "last": 3}

    def test_no_line_of_the_output_is_no_quote(self) -> None:
        assert picked_quote(CODE, 0, 0) is None
        assert picked_quote(CODE, 99, 99) is None
        assert picked_quote(CODE, "three", 3) is None
        assert picked_quote(CODE, 5, 5) is None  # an empty line


class TestQuotedPoint:
    def test_one_line(self) -> None:
        picked = {"quote": "if day < 0:", "first": 3, "last": 3}
        point = quoted_point(picked, " Raise ValueError. ")
        assert point == "On line 3, \u201cif day < 0:\u201d: Raise ValueError."

    def test_several_lines_stay_on_the_points_one_line(self) -> None:
        picked = {"quote": "if day < 0:\n        return  -1", "first": 3, "last": 4}
        point = quoted_point(picked, "Raise ValueError.")
        assert point == "On lines 3-4, \u201cif day < 0: \u23ce return  -1\u201d: Raise ValueError."

    def test_a_long_quote_is_cut(self) -> None:
        point = quoted_point({"quote": "x" * 1000, "first": 1, "last": 1}, "Shorter.")
        assert len(point) < 450
        assert "x\u2026\u201d: Shorter." in point


def test_lines_are_wrapped_for_the_selection_and_still_escaped() -> None:
    html = marked_output(HAIKU, [(1, "remember")], code=False, lines=True)
    assert '<span class="cc-l" data-line="2">stones &lt;b&gt;<mark data-issue="1">' in html
    assert "<b>" not in html


def bidi_html(at: AppTest) -> str:
    [component] = at.get("bidi_component")
    return str(json.loads(component.proto.json)["html"])


def test_the_holder_gets_the_output_as_a_selection_and_a_line_picker() -> None:
    at = open_review(claimed(FakeClient()))
    html = bidi_html(at)
    # the model's text is escaped before the page's script puts it in the page
    assert '<span class="cc-l" data-line="2"><mark data-issue="1">' in html
    assert "stones &lt;b&gt;remember&lt;/b&gt; water</mark>" in html
    assert "<b>" not in html
    assert at.selectbox(key="quote-line").options == [
        "1: Rivers run to sea",
        "2: stones <b>remember</b> water",
        "3: silence of the banks",
    ]


def test_a_reader_gets_neither() -> None:
    at = open_review(claimed(FakeClient(), by="bob"))
    assert not at.get("bidi_component")
    assert not has_key(at, "quote-line")
    assert '<pre class="cc-out cc-text">' in "\n".join(h.value for h in at.html)


def test_a_line_chosen_by_its_number_starts_a_point_that_quotes_it() -> None:
    fake = claimed(CodeFake())
    at = open_review(fake)
    at.radio(key="decision-action").set_value("approve").run()
    at.selectbox(key="quote-line").set_value(3).run()
    assert_clean(at)
    # the comment form, with the point quoting the line, shown as text
    assert at.radio(key="decision-action").value == "comment"
    quoted = at.text_input(key="decision-quoted-0")
    assert shown(quoted.label) == "Line 3: \u201cif day < 0:\u201d"
    assert shown(quoted.help) == "if day < 0:"
    assert at.selectbox(key="quote-line").value is None  # ready for the next line
    at.text_area(key="decision-comment").input("Say why two tides.")
    quoted.input("Raise ValueError for negative days.")
    at.button(key="decision-submit").click().run()
    assert_clean(at)
    ((_, kwargs),) = fake.called("decide")
    assert kwargs["points"] == [
        "Say why two tides.",
        "On line 3, \u201cif day < 0:\u201d: Raise ValueError for negative days.",
    ]
    assert kwargs["comment"] == "\n".join(kwargs["points"])


def test_a_quote_needs_what_should_change() -> None:
    fake = claimed(CodeFake())
    at = open_review(fake)
    at.selectbox(key="quote-line").set_value(6).run()
    at.button(key="decision-submit").click().run()
    assert "Say what should change where you quoted the output (quote 1)" in at.error[0].value
    assert not fake.called("decide")


def test_an_untrusted_quote_labels_its_box_as_text() -> None:
    at = open_review(claimed(FakeClient()))
    at.selectbox(key="quote-line").set_value(2).run()
    box = at.text_input(key="decision-quoted-0")
    assert shown(box.label) == "Line 2: \u201cstones <b>remember</b> \u2026\u201d"
    assert shown(box.help) == "stones <b>remember</b> water"
    assert "\\<b\\>" in box.label  # escaped for the Markdown labels and help read
    assert "\\<b\\>" in box.help


def test_a_long_or_multi_line_quote_is_cut_in_the_label_and_whole_in_the_point() -> None:
    fake = claimed(CodeFake())
    picked = picked_quote(CODE, 1, 4)
    assert picked is not None
    at = make_app(fake, review_id="rev-1")
    at.session_state["quotes-rev-1"] = [picked]  # picked in the browser before this run
    at.run()
    at.switch_page("views/review.py").run()
    label = shown(at.text_input(key="decision-quoted-0").label)
    assert label == 'Lines 1-4: \u201cdef tides(day): \u23ce """Tw\u2026\u201d'
    at.text_input(key="decision-quoted-0").input("Simpler.")
    at.button(key="decision-submit").click().run()
    ((_, kwargs),) = fake.called("decide")
    assert kwargs["points"] == [
        'On lines 1-4, \u201cdef tides(day): \u23ce """Two a day.""" \u23ce if day < 0: '
        "\u23ce return  -1\u201d: Simpler."
    ]


def test_quoted_lines_can_be_dropped() -> None:
    fake = claimed(CodeFake())
    at = open_review(fake)
    at.selectbox(key="quote-line").set_value(6).run()
    assert has_key(at, "quoted-point-0")
    at.button(key="decision-drop-quotes").click().run()
    assert_clean(at)
    assert not has_key(at, "quoted-point-0")
    assert not fake.called("decide")
