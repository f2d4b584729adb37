"""Long outputs in sections: the pure split/join, and the loop through the API (only the
flagged section goes to the Actor; the others come back byte-identical)."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.engine.sections import MAX_SECTIONS, join, replace, split
from tests.orchestrator.conftest import start, wait_for
from tests.orchestrator.test_loop import actor_reply, critique
from tests.support.fakemodel import user_text

DOC = (
    "Intro line.\n\n# Alpha\nalpha body\n\n## Beta\nbeta body\n"
    "```\n# not a heading\n```\n# Gamma\ng"
)

CODE = '''"""Module doc."""
import os

CONSTANT = 1


@decorator
def first(x):
    return x


class Second:
    def method(self):
        return 2

VALUE = first(2)


async def third():
    return 3
'''


class TestSplit:
    def test_text_splits_at_headings_outside_fences(self):
        parts = split(DOC)
        assert [p.title for p in parts] == ["(before the first heading)", "Alpha", "Beta", "Gamma"]
        assert "# not a heading" in parts[2].text
        assert join(parts) == DOC

    def test_code_splits_at_top_level_def_and_class_with_decorators(self):
        parts = split(CODE, "code")
        assert [p.title for p in parts] == ["module header", "first", "Second", "third"]
        assert parts[1].text.startswith("@decorator\n")
        assert "VALUE = first(2)" in parts[2].text  # a statement stays with the block before it
        assert join(parts) == CODE

    def test_code_that_does_not_parse_is_one_section(self):
        broken = "def f(:\n    pass\n\ndef g():\n    pass\n"
        assert [p.text for p in split(broken, "code")] == [broken]

    def test_text_without_headings_is_one_section(self):
        assert len(split("no headings here\nat all\n")) == 1

    def test_many_headings_are_packed_into_at_most_max_sections(self):
        text = "".join(f"# H{i}\nbody {i}\n" for i in range(100))
        parts = split(text)
        assert len(parts) <= MAX_SECTIONS
        assert join(parts) == text

    def test_replace_keeps_the_other_sections_byte_identical(self):
        parts = split(DOC)
        new = replace(parts, {2: "## Beta\nbetter body"})
        assert new == parts[0].text + parts[1].text + "## Beta\nbetter body\n" + parts[3].text

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(
            st.sampled_from(
                ["# H\n", "## H2\n", "text\n", "```\n", "\n", "#\n", "x", "\r\n", "def f():\n"]
            )
            | st.text(max_size=20),
            max_size=40,
        ),
        st.sampled_from(["text", "code"]),
    )
    def test_split_then_join_is_the_original(self, pieces, kind):
        text = "".join(pieces)
        parts = split(text, kind)
        assert join(parts) == text
        assert [p.index for p in parts] == list(range(len(parts)))
        assert all(p.text for p in parts) or text == ""

    @settings(max_examples=100, deadline=None)
    @given(
        st.lists(
            st.sampled_from(
                [
                    "import os\n",
                    "def f():\n    return 1\n",
                    "@dec\ndef g():\n    pass\n",
                    "class C:\n    x = 1\n",
                    "Y = 2\n",
                    "\n",
                    "# comment\n",
                ]
            ),
            max_size=30,
        )
    )
    def test_code_split_then_join_is_the_original(self, pieces):
        text = "".join(pieces)
        assert join(split(text, "code")) == text


# ----------------------------------------------------------------------------- the loop

SECTION = "Filler sentence about the topic that keeps this section long enough. " * 6


def document() -> str:
    return (
        f"# Alpha\n{SECTION}alpha-marker\n\n"
        f"# Beta\n{SECTION}beta-marker\n\n"
        f"# Gamma\n{SECTION}gamma-marker\n"
    )


ISSUE = {
    "dimension": "accuracy",
    "severity": "major",
    "quote": "beta-marker",
    "suggestion": "State the beta claim precisely.",
}


def calls_of(fake_model, stage):
    return [c for c in fake_model.requests() if c["stage"] == stage]


class TestReassembleReferences:
    """A section revised with evidence ends with its own reference list: the reassembled
    document must carry one list, at its end, where the citation check reads it."""

    DOC = "# One\nAlpha.\n# Two\nBeta.\n# Three\nGamma.\n"

    @staticmethod
    def revised(*pairs: tuple[int, str]) -> list:
        from shared.contracts import ActorResult, Usage

        usage = Usage(provider="openai", model="m")
        return [(i, f"k{i}", ActorResult(output=text, usage=usage)) for i, text in pairs]

    def test_a_middle_sections_list_moves_to_the_end(self):
        from orchestrator.engine.sectioned import reassemble
        from shared.citations import validate_citations

        parts = split(self.DOC)
        out = reassemble(parts, self.revised((1, "# Two\nBeta is 1937 [1].\n\n[1] file:///a.md\n")))
        assert out.output == (
            "# One\nAlpha.\n# Two\nBeta is 1937 [1].\n# Three\nGamma.\n\n[1] file:///a.md\n"
        )
        assert validate_citations(out.output, ["file:///a.md"]).ok

    def test_lists_of_two_sections_and_the_documents_own_merge_by_number(self):
        from orchestrator.engine.sectioned import reassemble

        doc = "# One\nAlpha [1].\n# Two\nBeta.\n# Three\nGamma.\n\nReferences\n[1] file:///a.md\n"
        parts = split(doc)
        out = reassemble(
            parts,
            self.revised(
                (0, "# One\nAlpha [1] [2].\n\n[2] https://b.test/\n[1] file:///a.md\n"),
                (1, "# Two\nBeta [3].\n\n[3] https://c.test/\n"),
            ),
        )
        assert out.output.endswith(
            "Gamma.\n\nReferences\n[1] file:///a.md\n[2] https://b.test/\n[3] https://c.test/\n"
        )
        assert out.output.count("[1] file:///a.md") == 1

    def test_without_reference_lists_the_other_sections_stay_byte_identical(self):
        from orchestrator.engine.sectioned import reassemble

        parts = split(self.DOC)
        out = reassemble(parts, self.revised((1, "# Two\nBeta, revised [1].\n")))
        assert out.output == self.DOC.replace("Beta.", "Beta, revised [1].")


class TestSectionedLoop:
    async def test_only_the_flagged_section_is_revised(self, api, fake_model):
        doc = document()
        revised_beta = f"# Beta\n{SECTION}beta-marker, now stated precisely.\n\n"
        fake_model.script(
            {"stage": "draft", "response": actor_reply(doc)},
            {"stage": "critique", "match": "alpha-marker", "response": critique("pass")},
            {
                "stage": "critique",
                "match": "beta-marker",
                "response": critique(issues=[ISSUE], reflection="Beta is vague."),
            },
            {"stage": "critique", "match": "gamma-marker", "response": critique("pass")},
            {"stage": "revise", "response": actor_reply(revised_beta)},
            *[{"stage": "critique", "response": critique("pass")}] * 3,
        )
        run_id = await start(
            api,
            task="Write about three topics.",
            policy={"section_chars": 500, "convergence_threshold": 0},
        )
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", (run["stop_reason"], run["detail"])
        first, second = run["rounds"][:2]
        assert [(s["title"], s["flagged"], s["revised"]) for s in first["sections"]] == [
            ("Alpha", False, False),
            ("Beta", True, True),
            ("Gamma", False, False),
        ]
        assert [s["chars"] for s in first["sections"]] == [len(p.text) for p in split(doc)]
        assert first["critique"]["verdict"] == "revise"
        assert [i["section"] for i in first["critique"]["issues"]] == [1]
        # the Actor saw the Beta section alone
        revises = calls_of(fake_model, "revise")
        assert len(revises) == 1
        prompt = user_text(revises[0])
        assert "beta-marker" in prompt
        assert "alpha-marker" not in prompt
        assert "gamma-marker" not in prompt
        assert "section 2 of 3" in prompt
        # Alpha and Gamma are byte-identical in the next version, Beta is the revision
        parts = split(doc)
        assert second["output"] == parts[0].text + revised_beta + parts[2].text
        assert run["final_output"] == second["output"]
        # three critic calls per version, each billed
        trajectory = (await api.get(f"/v1/runs/{run_id}/trajectory")).json()
        critic_calls = [c for c in trajectory["calls"] if c["role"] == "critic"]
        assert len(critic_calls) == len(calls_of(fake_model, "critique")) == 6

    async def test_section_chars_zero_critiques_and_revises_the_whole(self, api, fake_model):
        doc = document()
        fake_model.script(
            {"stage": "draft", "response": actor_reply(doc)},
            {"stage": "critique", "response": critique(issues=[ISSUE])},
            {"stage": "revise", "response": actor_reply(doc + "\nBeta clarified.\n")},
            {"stage": "critique", "response": critique("pass")},
        )
        run_id = await start(
            api,
            task="Write about three topics.",
            # the appended line is outside the quoted span: the diff lock would put it back
            policy={"section_chars": 0, "convergence_threshold": 0, "diff_lock": False},
        )
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", run
        assert [r["sections"] for r in run["rounds"]] == [[], []]
        assert len(calls_of(fake_model, "critique")) == 2
        prompt = user_text(calls_of(fake_model, "revise")[0])
        assert "alpha-marker" in prompt
        assert "gamma-marker" in prompt

    async def test_an_output_at_the_threshold_is_not_sectioned(self, api, fake_model):
        doc = document()
        fake_model.script({"stage": "draft", "response": actor_reply(doc)})
        run_id = await start(
            api,
            task="Write about three topics.",
            policy={"section_chars": len(doc), "max_rounds": 1},
        )
        run = await wait_for(api, run_id)
        assert run["rounds"][0]["sections"] == []
        assert len(calls_of(fake_model, "critique")) == 1

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_section_chars_out_of_range_is_422(self, api):
        for bad in (-1, 100_001):
            response = await api.post(
                "/v1/runs", json={"task": "x", "policy": {"section_chars": bad}}
            )
            assert response.status_code == 422, response.text
            assert "section_chars" in response.text

    async def test_the_critic_sees_each_section_with_a_note(self, api, fake_model):
        doc = document()
        fake_model.script({"stage": "draft", "response": actor_reply(doc)})
        run_id = await start(api, task="Write about three topics.", policy={"section_chars": 500})
        await wait_for(api, run_id)
        first_three = calls_of(fake_model, "critique")[:3]
        prompts = sorted(user_text(c) for c in first_three)
        assert all("of 3 of a longer document" in p for p in prompts)
        assert sum("alpha-marker" in p for p in prompts) == 1
        assert json.dumps(prompts).count("gamma-marker") == 1
