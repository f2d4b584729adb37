"""The citations validator: unknown numbers, URLs not in the evidence, several URLs for one
number, and (with require_citations) new factual sentences that cite nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shared.citations import ProblemKind, split_references, validate_citations

EVIDENCE = ["https://example.org/golden-gate", "file:///srv/corpus/eiffel.md"]
GOOD = (
    "The Golden Gate Bridge opened in 1937 [1]. The Eiffel Tower is 330 metres tall [2].\n"
    "\n"
    "References\n"
    "[1] https://example.org/golden-gate\n"
    "[2]: Eiffel Tower, file:///srv/corpus/eiffel.md\n"
)


def kinds(report) -> list[tuple[str, int | None]]:
    return [(p.kind.value, p.number) for p in report.problems]


def test_a_well_cited_output_passes():
    report = validate_citations(GOOD, EVIDENCE, require_citations=True)
    assert report.ok, report.problems
    assert report.cited == [1, 2]
    assert report.references == {1: [EVIDENCE[0]], 2: [EVIDENCE[1]]}
    assert report.reflection() == ""


def test_a_number_without_a_reference_is_unknown():
    report = validate_citations(GOOD.replace("tall [2]", "tall [3]"), EVIDENCE)
    # and [2], listed, is now cited nowhere
    assert kinds(report) == [("unknown_number", 3), ("uncited_reference", 2)]
    assert "[3] is cited" in report.reflection()


def test_a_fabricated_url_is_caught():
    report = validate_citations(GOOD.replace(EVIDENCE[0], "https://made.up/source"), EVIDENCE)
    assert kinds(report) == [("url_not_in_evidence", 1)]
    assert report.problems[0].url == "https://made.up/source"


def test_one_number_with_two_urls_is_caught_on_one_line_or_two():
    one_line = GOOD.replace(
        "[1] https://example.org/golden-gate",
        "[1] https://example.org/golden-gate https://example.org/other",
    )
    two_lines = GOOD + "[1] https://example.org/other\n"
    for text in (one_line, two_lines):
        found = kinds(validate_citations(text, [*EVIDENCE, "https://example.org/other"]))
        assert found == [("several_urls", 1)]


def test_a_reference_without_a_url_is_caught():
    report = validate_citations(
        GOOD.replace(
            "[2]: Eiffel Tower, file:///srv/corpus/eiffel.md", "[2] the Eiffel Tower page"
        ),
        EVIDENCE,
    )
    assert kinds(report) == [("missing_url", 2)]


def test_trailing_punctuation_is_not_part_of_a_url():
    text = "It opened in 1937 [1].\n\n[1] https://example.org/golden-gate.\n"
    assert validate_citations(text, EVIDENCE).ok


def test_new_uncited_facts_are_flagged_only_when_asked_and_only_if_new():
    previous = "The bridge is orange. It spans 1,280 metres."
    text = (
        "The bridge is orange. It spans 1,280 metres. It opened in 1937. "
        "It was designed by Joseph Strauss [1]. It is nice.\n\n[1] https://example.org/golden-gate\n"
    )
    assert validate_citations(text, EVIDENCE, previous=previous).ok  # the flag is off
    report = validate_citations(text, EVIDENCE, previous=previous, require_citations=True)
    assert [(p.kind, p.sentence) for p in report.problems] == [
        (ProblemKind.uncited_claim, "It opened in 1937.")
    ]


def test_a_marker_in_the_body_is_not_taken_for_the_reference_list():
    body, refs, _ = split_references("See [1] and [2].\nMore text.\n\n[1] https://a.example/x\n")
    assert body.startswith("See [1] and [2].")
    assert refs == {1: ["https://a.example/x"]}


# ------------------------------------------------------------------ properties

urls = st.lists(
    st.from_regex(r"https://[a-z]{1,8}\.example/[a-z0-9]{1,8}", fullmatch=True),
    min_size=1,
    max_size=6,
    unique=True,
)
sentence = st.from_regex(r"[A-Z][a-z]{2,10}( [a-z]{2,10}){1,6}", fullmatch=True)


@given(urls, st.data())
def test_citing_only_the_evidence_always_passes(evidence, data):
    cited = data.draw(st.lists(st.sampled_from(range(len(evidence))), min_size=1, unique=True))
    body = " ".join(f"{data.draw(sentence)} [{i + 1}]." for i in cited)
    refs = "\n".join(f"[{i + 1}] {evidence[i]}" for i in cited)
    report = validate_citations(f"{body}\n\nReferences\n{refs}\n", evidence)
    assert report.ok, report.problems
    assert report.cited == sorted(i + 1 for i in cited)


@given(urls, st.integers(min_value=7, max_value=999), st.data())
def test_an_unlisted_number_is_always_reported(evidence, extra, data):
    body = f"{data.draw(sentence)} [1]. {data.draw(sentence)} [{extra}]."
    report = validate_citations(f"{body}\n\n[1] {evidence[0]}\n", evidence)
    assert ("unknown_number", extra) in kinds(report)


@given(urls, st.from_regex(r"https://[a-z]{1,8}\.fake/[a-z0-9]{1,8}", fullmatch=True))
def test_a_url_outside_the_evidence_is_always_reported(evidence, foreign):
    report = validate_citations(f"Claim [1].\n\n[1] {foreign}\n", evidence)
    assert kinds(report) == [("url_not_in_evidence", 1)]


@given(st.text(max_size=400), st.lists(st.text(max_size=40), max_size=3), st.booleans())
def test_any_text_gives_a_report_and_never_an_exception(text, evidence, strict):
    report = validate_citations(text, evidence, previous=text[:50], require_citations=strict)
    assert report.ok == (not report.problems)
