"""The check of a hallucinated claim's `source` (pure): which forms name a real source, and
when a real source supports the claim (every number and name of the claim in its text)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.engine.discipline import (
    MIN_TASK_SPAN_WORDS,
    Sources,
    source_refusal,
    unsourced,
    unsourced_note,
)
from shared.contracts import Evidence, KnowledgeKind, KnowledgeNote

BRIDGE = Evidence(
    n=1,
    url="https://example.org/golden-gate",
    title="Golden Gate Bridge",
    snippet="The Golden Gate Bridge opened to traffic on May 27, 1937.",
    distilled="Its main span is 1,280 metres long.",
    retrieved_at=datetime(2026, 12, 1, tzinfo=UTC),
    source="corpus",
)
TIDES = KnowledgeNote(
    id="tides.moon",
    kind=KnowledgeKind.rule_anchor,
    title="Tides follow the Moon",
    body="Two tides a day: the Moon's gravity and the Earth's rotation.",
)
TASK = "Write about the Golden Gate Bridge, which opened in 1937 to great fanfare."
SOURCES = Sources(task=TASK, evidence=[BRIDGE], knowledge=[TIDES])
OPENED = "The Golden Gate Bridge opened in 1937 [1]."


@pytest.mark.parametrize(
    ("claim", "source"),
    [
        (OPENED, "[1]"),
        (OPENED, "evidence:[1]"),
        (OPENED, "Evidence 1"),
        (OPENED, "evidence: 1"),
        (OPENED, "https://example.org/golden-gate."),  # trailing punctuation is no part of it
        ("Its main span is 1280 metres.", "[1]"),  # "1,280" in the source is 1280
        ("The Moon raises 2 tides a day.", "knowledge:tides.moon"),
        ("The Moon raises two tides a day.", "see knowledge:tides.moon."),
        (OPENED, 'task: "the Golden Gate Bridge, which opened in 1937"'),
        (OPENED, "task: “the Golden Gate   Bridge, which opened in 1937”"),
        (OPENED, 'evidence [1] and task: "which opened in 1937"'),  # their texts together
    ],
)
def test_a_real_source_that_states_the_claim_is_accepted(claim, source):
    assert source_refusal(claim, source, SOURCES) is None


@pytest.mark.parametrize(
    ("claim", "source", "why"),
    [
        (OPENED, "", "the answer names no source"),
        (OPENED, "   ", "the answer names no source"),
        (OPENED, "Wikipedia, 2024", "names no source in an accepted form"),
        (OPENED, "https://made.up/x", "https://made.up/x is not a URL of the evidence"),
        (OPENED, "[3]", "evidence [3] was not given to this revision (given: [1])"),
        (OPENED, "evidence 2", "evidence [2] was not given"),
        (OPENED, "knowledge:nope", "knowledge:nope is no entry this revision's Actor received"),
        (OPENED, 'task: "opened in 1938 to great"', "does not occur in the task"),
        (OPENED, 'task: "in 1937"', f"under {MIN_TASK_SPAN_WORDS} words"),
        (OPENED, 'task: "OPENED IN 1937 TO"', "does not occur in the task"),  # exact words
        ("The bridge opened in 1957.", "[1]", "the named source does not state 1957"),
        ("The Moon raises 3 tides a day.", "knowledge:tides.moon", "does not state 3"),
        ("The bridge was designed by Strauss.", "[1]", "does not mention strauss"),
        (OPENED, 'task: "which opened in 1937"', "does not mention bridge, gate, golden"),
        # one made-up source among real ones refuses the answer
        (OPENED, "[1], https://made.up/x", "https://made.up/x is not a URL of the evidence"),
    ],
)
def test_a_source_naming_nothing_real_or_not_supporting_the_claim_is_refused(claim, source, why):
    reason = source_refusal(claim, source, SOURCES)
    assert reason is not None
    assert why in reason


def test_evidence_not_given_to_this_revision_is_refused_even_if_it_exists_elsewhere():
    reason = source_refusal(OPENED, "[1]", Sources(task=TASK))
    assert reason == "evidence [1] was not given to this revision (given: none)"


def test_the_loop_keeps_open_only_kept_claims_without_a_supporting_source():
    critique = {
        "error_class": "hallucination",
        "issues": [
            {"severity": "major", "dimension": "accuracy", "quote": OPENED, "suggestion": "x"},
            {"severity": "major", "dimension": "accuracy", "quote": "Gone.", "suggestion": "y"},
        ],
    }
    output = f"{OPENED} More text."
    answered = [{"issue": "i1", "action": "applied", "source": "[1]"}]
    assert unsourced(critique, answered, output, SOURCES) == []
    [left] = unsourced(critique, answered, output, Sources())  # no evidence given
    assert (left.id, left.reason) == (
        "i1",
        "evidence [1] was not given to this revision (given: none)",
    )
    note = unsourced_note(2, [left])
    assert "(source refused: evidence [1] was not given" in note
    assert "`knowledge:<id>`" in note
    assert 'task: "<exact words of the task>"' in note
