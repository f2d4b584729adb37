"""Citations bound to their evidence: ``[n]`` must list evidence n's own URL, every listed
reference must be cited, and (with require_citations) a new factual sentence must cite
something whatever its case. Each clause of what makes a sentence factual has its test."""

from __future__ import annotations

import pytest

from shared.citations import (
    ProblemKind,
    factual_reason,
    known_names,
    looks_factual,
    validate_citations,
)

GATE = "https://example.org/golden-gate"
EIFFEL = "file:///srv/corpus/eiffel.md"
EVIDENCE = {1: GATE, 2: EIFFEL}
TASK = "When did the Golden Gate Bridge open, and how tall is the Eiffel Tower?"
BODY = "The Golden Gate Bridge opened in 1937 [1]. The Eiffel Tower is 330 metres tall [2]."
GOOD = f"{BODY}\n\nReferences\n[1] {GATE}\n[2] {EIFFEL}\n"


def kinds(report) -> list[tuple[str, int | None]]:
    return [(p.kind.value, p.number) for p in report.problems]


def test_correct_citations_pass_with_every_rule_on():
    report = validate_citations(
        GOOD, EVIDENCE, require_citations=True, task=TASK, flagged=["opened in 1957"]
    )
    assert report.ok, report.problems
    assert report.references == {1: [GATE], 2: [EIFFEL]}
    # evidence given as a list is numbered from 1, in order
    assert validate_citations(GOOD, [GATE, EIFFEL], require_citations=True).ok


class TestWrongSource:
    def test_a_number_listing_another_evidences_url_is_a_wrong_source(self):
        swapped = f"{BODY}\n\nReferences\n[1] {EIFFEL}\n[2] {GATE}\n"
        report = validate_citations(swapped, EVIDENCE)
        assert kinds(report) == [("wrong_source", 1), ("wrong_source", 2)]
        first = report.problems[0]
        assert first.url == EIFFEL
        assert first.message.startswith(f"[1] lists evidence [2]'s URL {EIFFEL}, but evidence")
        assert GATE in first.message  # what [1] should have listed
        assert "[1] lists evidence [2]'s URL" in report.reflection()

    def test_a_number_with_no_evidence_of_its_own_is_told_the_right_number(self):
        text = f"It opened in 1937 [3].\n\n[3] {GATE}\n"
        report = validate_citations(text, EVIDENCE)
        assert kinds(report) == [("wrong_source", 3)]
        assert "there is no evidence [3]: cite that source as [1]" in report.problems[0].message

    def test_a_url_outside_the_evidence_stays_url_not_in_evidence(self):
        text = "It opened in 1937 [1].\n\n[1] https://made.up/\n"
        assert kinds(validate_citations(text, EVIDENCE)) == [("url_not_in_evidence", 1)]


class TestUncitedReference:
    def test_a_listed_reference_the_text_never_cites_is_flagged(self):
        text = f"The Golden Gate Bridge opened in 1937 [1].\n\n[1] {GATE}\n[2] {EIFFEL}\n"
        report = validate_citations(text, EVIDENCE)
        assert kinds(report) == [("uncited_reference", 2)]
        assert report.problems[0].url == EIFFEL
        assert "never cites [2]" in report.problems[0].message

    def test_a_marker_only_in_the_reference_list_is_no_citation(self):
        text = f"The bridge is lovely.\n\nReferences\n[1] {GATE}\n"
        assert kinds(validate_citations(text, EVIDENCE)) == [("uncited_reference", 1)]


class TestUncitedClaim:
    def test_a_lower_case_claim_without_a_citation_is_flagged(self):
        previous = "The Golden Gate Bridge opened in 1937."
        text = f"{previous} [1]\nthe golden gate bridge is painted orange.\n\n[1] {GATE}\n"
        report = validate_citations(
            text, EVIDENCE, previous=previous, require_citations=True, task=TASK
        )
        assert [(p.kind, p.sentence) for p in report.problems] == [
            (ProblemKind.uncited_claim, "the golden gate bridge is painted orange.")
        ]
        assert "(a name known from the task or the evidence)" in report.problems[0].message
        # the flag off: the same text is not judged for claims
        assert validate_citations(text, EVIDENCE, previous=previous, task=TASK).ok

    def test_a_name_known_only_from_the_evidence_counts(self):
        text = f"It opened in 1937 [1]. strauss designed it.\n\n[1] {GATE}\n"
        snippet = "The bridge was designed by Joseph Strauss and opened in 1937."
        loose = validate_citations(text, EVIDENCE, require_citations=True)
        assert loose.ok  # nothing marks "strauss" a name without the evidence
        strict = validate_citations(text, EVIDENCE, require_citations=True, sources=[snippet])
        assert [p.sentence for p in strict.problems] == ["strauss designed it."]

    def test_a_sentence_kept_from_the_previous_version_is_not_new(self):
        previous = "the golden gate bridge is painted orange."
        text = f"{previous}\nIt opened in 1937 [1].\n\n[1] {GATE}\n"
        assert validate_citations(
            text, EVIDENCE, previous=previous, require_citations=True, task=TASK
        ).ok


@pytest.mark.parametrize(
    ("sentence", "why"),
    [
        ("it opened in 1937.", "a number"),
        ("the span is 1,280 metres.", "a number"),
        ("it took four years to build.", "a number"),
        ("thousands crossed it that day.", "a number"),
        ("it opened on a thursday.", "a date"),
        ("it opened in january.", "a date"),
        ("it opened in May.", "a date"),
        ("the bridge was designed by Strauss.", "a name"),
        ("the engineers at NASA agree.", "a name"),
        ('locals call it "the bridge".', "a quotation"),
        ("locals call it “the bridge”.", "a quotation"),
        ("locals call it 'the bridge'.", "a quotation"),
        ("it is the tallest of its kind.", "a span the critic flagged"),
    ],
)
def test_each_clause_makes_a_sentence_factual(sentence, why):
    flagged = ["the tallest of its kind"]
    assert factual_reason(sentence, flagged=flagged) == why


@pytest.mark.parametrize(
    "sentence",
    [
        "It is nice.",  # the first word's capital is the sentence's, not a name's
        "it may rain.",  # "may" lower case is a verb
        "no one knows why.",  # "one" is a pronoun here
        "it's the dog's bowl.",  # apostrophes are not quotes
        "Note: The result holds.",  # a capitalised common word is not a name
        "# Golden Gate Bridge",  # a heading states nothing
        "",
    ],
)
def test_sentences_without_any_clause_are_not_factual(sentence):
    assert not looks_factual(sentence, flagged=["the tallest of its kind"])


def test_a_flagged_quote_spanning_sentences_marks_each_of_them():
    quote = "It is made of cheese. The cheese is green."
    assert factual_reason("the cheese is green.", flagged=[quote]) == "a span the critic flagged"
    assert factual_reason("it is.", flagged=[quote]) is None  # too short to be the claim


def test_known_names_are_the_words_a_text_writes_capitalised_and_never_lower_case():
    task = "Explain how the Moon drives the tides."
    heading = "# How The Tides Work\nThe tides work because the Moon pulls the sea."
    assert known_names(task) == {"moon"}
    assert known_names(heading) == {"moon"}  # "Tides", "Work" are written lower case too
    assert factual_reason("the moon pulls.", names=known_names(task)) == (
        "a name known from the task or the evidence"
    )
    assert known_names("", "i think so.") == frozenset()
