"""The built-in scripted behaviour, as pure functions."""

import ast
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakemodel.scenarios import (
    PromptSections,
    actor_output,
    critique,
    detect_scenario,
    detect_stage,
    estimate_tokens,
    extract_tag,
    function_name,
    parse_sections,
    primes_sieve,
    primes_trial_division,
    role_from_schema,
    split_reflections,
    split_sentences,
    structured_output,
    summarise_task,
    trial_division_line,
)

PRIMES_TO_30 = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]


def run(code: str, name: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(code, "<scripted>", "exec"), namespace)
    return namespace[name]


def test_parse_sections_reads_every_tag():
    text = (
        "Some preamble.\n<task>\n  Sum a list.\n</task>\n<kind>code</kind>\n"
        "<entry_point> total </entry_point>\n<previous_output>\ndef total(xs):\n    return 0\n"
        "</previous_output>\n<reflections>\n- use sum()\n</reflections>"
    )
    sections = parse_sections(text)
    assert sections.task == "Sum a list."
    assert sections.kind == "code"
    assert sections.is_code
    assert sections.entry_point == "total"
    assert sections.previous_output == "def total(xs):\n    return 0"
    assert sections.reflections == "- use sum()"
    assert sections.candidate_output is None


def test_absent_tags_are_empty_or_none():
    sections = parse_sections("just words")
    assert sections == PromptSections()
    assert sections.task == ""
    assert sections.kind == "text"
    assert sections.previous_output is None


def test_present_but_empty_previous_output_still_means_revise():
    sections = parse_sections("<task>t</task><previous_output></previous_output>")
    assert sections.previous_output == ""
    assert detect_stage("actor", sections) == "revise"


def test_first_tag_wins_and_unclosed_tag_is_absent():
    assert extract_tag("<a>1</a><a>2</a>", "a") == "1"
    assert extract_tag("<a>never closed", "a") is None


def test_kind_defaults_to_code_when_an_entry_point_is_given():
    assert parse_sections("<task>t</task><entry_point>f</entry_point>").kind == "code"
    assert (
        parse_sections("<task>t</task><kind>TEXT</kind><entry_point>f</entry_point>").kind == "text"
    )


@pytest.mark.parametrize(
    ("name", "schema", "role"),
    [
        ("actor_output", None, "actor"),
        ("ActorOutput", None, "actor"),
        ("critique", None, "critic"),
        ("Critique", None, "critic"),
        (None, {"properties": {"verdict": {}, "issues": {}}}, "critic"),
        (None, {"properties": {"output": {}}}, "actor"),
        ("something_else", {"properties": {"x": {}}}, None),
        (None, None, None),
    ],
)
def test_role_from_schema(name, schema, role):
    assert role_from_schema(name, schema) == role


def test_detect_stage():
    plain = PromptSections(task="t")
    revising = PromptSections(task="t", previous_output="old")
    judging = PromptSections(task="t", candidate_output="x")
    assert detect_stage("actor", plain) == "draft"
    assert detect_stage("actor", revising) == "revise"
    assert detect_stage("critic", plain) == "critique"
    assert detect_stage(None, judging) == "critique"
    assert detect_stage(None, plain) == "draft"


def test_detect_scenario():
    assert detect_scenario(PromptSections(task="List PRIMES", kind="code")) == "primes"
    assert detect_scenario(PromptSections(task="What is a prime?", kind="text")) == "text"
    assert detect_scenario(PromptSections(task="Sort", kind="code")) == "code"


def test_estimate_tokens():
    assert estimate_tokens("") == 1
    assert estimate_tokens("abcd" * 10) == 11


@pytest.mark.parametrize("n", [0, 1, 2, 3, 30, 100])
def test_both_primes_implementations_are_correct(n):
    expected = [k for k in range(2, n + 1) if all(k % d for d in range(2, k))]
    assert run(primes_trial_division(), "primes_up_to")(n) == expected
    assert run(primes_sieve(), "primes_up_to")(n) == expected


def test_primes_draft_and_revision():
    sections = PromptSections(task="Return the primes up to n.", kind="code", entry_point="ps")
    draft = actor_output(sections, "draft")["output"]
    assert run(draft, "ps")(30) == PRIMES_TO_30
    assert "sieve" not in draft.lower()
    assert "```" not in draft
    revised = actor_output(sections, "revise")["output"]
    assert "sieve" in revised.lower()
    assert "```" not in revised
    assert run(revised, "ps")(2) == [2]


def test_primes_critique_quotes_the_inner_loop():
    candidate = primes_trial_division()
    result = critique(PromptSections(task="primes", kind="code", candidate_output=candidate))
    assert result["verdict"] == "revise"
    assert result["confidence"] == pytest.approx(0.85)
    (issue,) = result["issues"]
    assert issue["quote"] == "for d in range(2, k):"
    assert issue["quote"] in candidate
    assert result["error_class"] == "logic"


def test_primes_critique_passes_a_sieve():
    sections = PromptSections(task="primes", kind="code", candidate_output=primes_sieve())
    result = critique(sections)
    assert result == {
        "verdict": "pass",
        "confidence": pytest.approx(0.93),
        "issues": [],
        "reflection": result["reflection"],
        "error_class": "none",
    }


def test_trial_division_line_picks_the_innermost_loop():
    code = "def f(n):\n    for a in range(2, n):\n        for b in range(2, a):\n            pass\n"
    assert trial_division_line(code) == "for b in range(2, a):"
    assert trial_division_line("x = 1") is None


def test_function_name_falls_back_for_unusable_entry_points():
    assert function_name("my_fn", "default") == "my_fn"
    assert function_name("not valid", "default") == "default"
    assert function_name("class", "default") == "default"
    assert function_name(None, "default") == "default"


def test_text_draft_is_deterministic_and_never_marked_revised():
    sections = PromptSections(task="Explain (revised) tides.\nMore detail here.")
    first = actor_output(sections, "draft")
    assert first == actor_output(sections, "draft")
    assert "(revised)" not in first["output"]
    assert len(split_sentences(first["output"])) >= 3


def test_text_revision_ends_with_one_marker():
    previous = "An answer. It is short.\n(revised)"
    sections = PromptSections(task="t", previous_output=previous, reflections="- add an example")
    output = actor_output(sections, "revise")["output"]
    assert output.startswith("An answer. It is short.")
    assert output.splitlines()[-1] == "(revised)"
    assert output.count("(revised)") == 1
    assert "add an example" in output


def test_code_draft_and_revision_are_valid_python():
    sections = PromptSections(task='Parse "quoted" # things', kind="code")
    draft = actor_output(sections, "draft")["output"]
    ast.parse(draft)
    assert "def solution(" in draft
    assert "# revised" not in draft
    revised = actor_output(
        PromptSections(task=sections.task, kind="code", previous_output=draft, reflections="# x"),
        "revise",
    )["output"]
    ast.parse(revised)
    assert "# revised" in revised


def test_empty_candidate_is_revised_without_a_quote():
    result = critique(PromptSections(task="t", candidate_output="  "))
    assert result["verdict"] == "revise"
    assert result["issues"][0]["quote"] is None


def test_structured_output_dispatches_on_stage():
    sections = PromptSections(task="t", candidate_output="Some text.")
    assert "verdict" in structured_output(sections, "critique")
    assert "output" in structured_output(sections, "draft")


def test_helpers():
    assert split_reflections("- one\n* two\n3. three\n\n  ") == ["one", "two", "three"]
    assert split_reflections("[critic] Use a sieve.\n[BINDING: human ana] Be brief.") == [
        "Use a sieve.",
        "Be brief.",
    ]
    assert split_reflections(None) == []
    assert summarise_task("") == "the task"
    assert len(summarise_task("word " * 100)) <= 160


@settings(max_examples=100, deadline=None)
@given(
    candidate=st.text(min_size=0, max_size=300),
    task=st.sampled_from(["List primes", "Explain", "Sort numbers"]),
    kind=st.sampled_from(["text", "code"]),
)
def test_every_quote_is_an_exact_substring(candidate, task, kind):
    result = critique(PromptSections(task=task, kind=kind, candidate_output=candidate))
    for issue in result["issues"]:
        assert issue["quote"] is None or (issue["quote"] and issue["quote"] in candidate)


class TestBenchScenario:
    def test_takes_exactly_the_rounds_the_task_names(self):
        from fakemodel.scenarios import PromptSections, actor_output, critique

        task = "Summarise the report. [bench:3]"
        output = actor_output(PromptSections(task=task), "draft")["output"]
        verdicts = []
        for _ in range(5):
            verdict = critique(PromptSections(task=task, candidate_output=output))
            verdicts.append(verdict["verdict"])
            if verdict["verdict"] == "pass":
                break
            assert verdict["issues"][0]["quote"] in output
            output = actor_output(PromptSections(task=task, previous_output=output), "revise")[
                "output"
            ]
        assert verdicts == ["revise", "revise", "pass"]

    def test_a_size_pads_every_version_and_keeps_the_rounds(self):
        from fakemodel.scenarios import PromptSections, actor_output, critique

        task = "Summarise the report. [bench:2:20000]"
        draft = actor_output(PromptSections(task=task), "draft")["output"]
        verdict = critique(PromptSections(task=task, candidate_output=draft))
        revision = actor_output(PromptSections(task=task, previous_output=draft), "revise")
        assert len(draft) >= 20000
        assert len(revision["output"]) >= 20000
        assert verdict["verdict"] == "revise"
        assert verdict["issues"][0]["quote"] in draft
        passed = critique(PromptSections(task=task, candidate_output=revision["output"]))
        assert passed["verdict"] == "pass"


def test_the_text_draft_proposes_a_query_and_a_revision_cites_its_evidence() -> None:
    from fakemodel.scenarios import actor_output, parse_evidence
    from shared.citations import validate_citations

    evidence = parse_evidence(
        "Sources found by research for this task, numbered:\n"
        "[1] Tides explained file:///docs/tides.md\n"
        "The Moon pulls the oceans. Two bulges form.\n"
    )
    task = "Explain the tides to a ten-year-old."
    draft = actor_output(PromptSections(task=task), "draft")
    assert draft["search_queries"] == ["Explain the tides to a ten-year-old"]

    revise = PromptSections(
        task=task,
        previous_output=draft["output"],
        reflections="- Say why there are two tides.",
        evidence=evidence,
        binding_points=("Mention the Moon",),
    )
    output = actor_output(revise, "revise")["output"]
    assert "According to Tides explained: The Moon pulls the oceans [1]." in output
    assert output.rstrip().endswith("[1] file:///docs/tides.md")  # the list stays last
    assert "Reviewer point applied: Mention the Moon" in output
    assert validate_citations(output, ["file:///docs/tides.md"]).ok

    again = actor_output(
        PromptSections(task=task, previous_output=output, reflections="- more", evidence=evidence),
        "revise",
    )["output"]
    assert again.count("[1] file:///docs/tides.md") == 1  # one reference list, still at the end
    assert again.count("According to Tides explained") == 1
    assert validate_citations(again, ["file:///docs/tides.md"]).ok


def test_a_passage_opening_with_its_heading_is_cited_without_it() -> None:
    from fakemodel.scenarios import actor_output, parse_evidence

    evidence = parse_evidence(
        "[1] Golden Gate Bridge file:///docs/gg.md\n"
        "# Golden Gate Bridge The bridge opened on May 27, 1937. It is red.\n"
    )
    revise = PromptSections(
        task="When did it open?", previous_output="It opened.", evidence=evidence
    )
    output = actor_output(revise, "revise")["output"]
    assert "According to Golden Gate Bridge: The bridge opened on May 27, 1937 [1]." in output
