"""The console's rendering helpers: what a reviewer sees is escaped and marks what changed."""

from console.view import claimer, highlight, side_by_side, unified_diff


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
