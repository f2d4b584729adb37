"""AppTest: the Review page's reflection panels. The depth the Critic was asked for and the one
it used, a degraded critique as a warning, each issue's reflection record, a justified "no
error", the knowledge entries the call received (by title, linking to the Knowledge page),
and, when the run records them, the Actor's answer to each point, the hunks put back, an
over-correction and best-of-N drafts. Absent fields show nothing."""

from __future__ import annotations

from typing import Any

from streamlit.testing.v1 import AppTest

from tests.ui.fakes import FakeClient, knowledge_entry
from tests.ui.test_app import all_text, assert_clean, make_app, shown
from tests.ui.test_untrusted import evil, visible
from tests.ui.untrusted import read

PANELS = ("Knowledge received", "The Actor's answers", "Changes put back")


class ReflectionFake(FakeClient):
    """Round 2 of a legal draft: an L2 critique that degraded to L1, with two knowledge
    entries received (one no longer readable) and a revision that answered, was put back in
    part, and was chosen from three drafts."""

    def __init__(self, **critique: Any) -> None:
        super().__init__(knowledge=[knowledge_entry("kn_rule1")])
        self.critique = critique
        self.round: dict[str, Any] = {}

    def get_review(self, review_id: str) -> dict:
        detail = super().get_review(review_id)
        [critique] = detail["context"]["critiques"]
        critique.update(
            profile="legal",
            risk="high",
            requested_depth="L2",
            depth="L1",
            degraded=True,
            degraded_reason="L2 timed out after 20 s",
            knowledge_used=["kn_rule1", "kn_gone"],
        )
        critique["issues"][0].update(
            error_type="wrong_jurisdiction",
            corrected_text="stones remember the water",
            evidence_source="knowledge:kn_rule1",
        )
        critique.update(self.critique)
        return detail

    def get_run(self, run_id: str) -> dict:
        run = super().get_run(run_id)
        run["rounds"].append({"number": 2, "output": "x", "usage": {}, **self.round})
        return run


def open_review(fake: FakeClient) -> AppTest:
    at = make_app(fake, review_id="rev-1").run()
    at.switch_page("views/review.py").run()
    assert_clean(at)
    return at


def subheaders(at: AppTest) -> list[str]:
    return [s.value for s in at.subheader]


def page_links(at: AppTest) -> list[tuple[str, str, str]]:
    """Each link to a knowledge entry: its label as read, target page and query string."""
    return [
        (shown(p.proto.label), p.proto.page, p.proto.query_string)
        for p in at.get("page_link")
        if p.proto.query_string
    ]


def test_the_depth_asked_and_done_and_a_degraded_critique_is_a_warning_with_its_reason():
    at = open_review(ReflectionFake())
    text = all_text(at)
    depth = "depth asked **L2 evidence**, done **L1 consistency**"
    assert f"Profile **legal** (risk high) · {depth}" in text
    [warning] = at.warning
    assert shown(warning.value) == (
        "Degraded critique: the depth asked for timed out or failed, so this is an L1 "
        "consistency check only. Reason: L2 timed out after 20 s"
    )


def test_a_critique_that_did_not_degrade_has_no_warning():
    at = open_review(ReflectionFake(degraded=False, degraded_reason=None, depth="L2"))
    assert not at.warning
    assert "depth asked **L2 evidence**, done **L2 evidence**" in all_text(at)


def test_each_issue_shows_its_reflection_record():
    at = open_review(ReflectionFake())
    text = all_text(at)
    assert "“stones <b>remember</b> water”" in text  # the original text, as quoted
    assert "Corrected text: stones remember the water" in text
    assert "error type wrong_jurisdiction · evidence knowledge:kn_rule1" in text


def test_no_error_found_shows_the_justification():
    why = "Checked every date against the task; each statute names its jurisdiction. " * 2
    at = open_review(ReflectionFake(issues=[], no_error_found=True, justification=why))
    text = all_text(at)
    assert "The Critic quoted nothing in this version." in text
    assert "**No error found.** The Critic's justification:" in text
    assert why.strip() in [t.value for t in at.text]


def test_the_knowledge_the_call_received_is_listed_by_title_with_a_link():
    fake = ReflectionFake()
    at = open_review(fake)
    assert "Knowledge received" in subheaders(at)
    assert "The Critic received 2 entries:" in all_text(at)
    assert page_links(at) == [
        ("Statutes: cite the jurisdiction", "knowledge", "entry=kn_rule1"),
    ]
    assert "kn_gone (no longer readable)" in all_text(at)
    assert [a for a, _ in fake.called("get_knowledge")] == [("kn_rule1",), ("kn_gone",)]


def test_the_entries_the_actor_received_are_listed_apart_from_the_critics():
    fake = ReflectionFake(knowledge_used=["kn_rule1"])
    fake.round = {"actor_knowledge": ["kn_gone"]}
    at = open_review(fake)
    text = all_text(at)
    assert "The Critic received 1 entry:" in text
    assert "The Actor received 1 entry:" in text
    assert "kn_gone (no longer readable)" in text


def test_a_retired_entry_is_still_named_and_marked():
    fake = ReflectionFake(knowledge_used=["kn_rule1"])
    fake.knowledge["kn_rule1"]["retired"] = True
    at = open_review(fake)
    assert page_links(at)[0][0] == "Statutes: cite the jurisdiction (retired since)"


def test_the_actors_answers_to_each_point():
    fake = ReflectionFake()
    fake.round = {
        "responses": [
            {
                "issue": "stones <b>remember</b> water",
                "action": "applied",
                "reason": "",
                "where": "line 2",
            },
            {
                "issue": "silence of the banks",
                "action": "declined",
                "reason": "the task asks for silence",
                "where": "",
            },
            {"point": "keep the sea", "action": "applied", "reason": "", "where": "line 1"},
        ]
    }
    at = open_review(fake)
    assert "The Actor's answers" in subheaders(at)
    assert "2 applied, 1 declined (of 3 points)" in all_text(at)
    [table] = [d for d in at.dataframe if "action" in d.value.columns]
    assert list(table.value["point"]) == [
        "stones <b>remember</b> water",
        "silence of the banks",
        "keep the sea",
    ]
    assert list(table.value["action"]) == ["applied", "declined", "applied"]
    assert list(table.value["reason"]) == ["", "the task asks for silence", ""]


def test_reverted_hunks_and_an_over_correction():
    fake = ReflectionFake()
    fake.round = {
        "reverted_hunks": [
            {
                "before": "Rivers run to sea",
                "after": "Rivers run to the ocean",
                "reason": "not flagged",
            },
            {"before": "keep this", "after": "", "reason": "inside a locked region"},
        ],
        "over_correction": True,
    }
    at = open_review(fake)
    assert "Changes put back" in subheaders(at)
    text = all_text(at)
    assert "2 changes outside what the critique asked for" in text
    assert "**1.** not flagged" in text
    assert "**2.** inside a locked region" in text
    assert {"Rivers run to sea", "Rivers run to the ocean", "keep this"} <= {
        t.value for t in at.text
    }
    over = [w for w in at.warning if "Over-correction" in w.value]
    assert len(over) == 1


def test_each_reverted_hunk_shows_its_rule_and_an_undone_revert_says_why():
    fake = ReflectionFake()
    fake.round = {
        "reverted_hunks": [
            {
                "before": "The Sun pulls too.",
                "after": "The Sun pulls as well.",
                "reason": "cosmetic_wording",
                "rule": "It swapped at most 3 words outside the lines the critique quoted.",
            },
            {
                "before": "    return total / count",
                "after": "    return stats[0] / count",
                "reason": "outside_flagged",
                "rule": "It changed code outside the lines the critique quoted.",
                "overridden": {
                    "reason": "failed_tests",
                    "detail": "The locked version failed its evaluation and the revision passes it",
                },
            },
        ],
    }
    at = open_review(fake)
    text = all_text(at)
    assert "1 change outside what the critique asked for" in text
    assert "1 revert undone because the locked version broke" in text
    assert "**1.** cosmetic_wording" in text
    captions = [c.value for c in at.caption]
    assert any("It swapped at most 3 words" in c for c in captions)
    assert any("It changed code outside" in c for c in captions)
    [undone] = [i.value for i in at.info if "Revert undone" in i.value]
    assert "failed its evaluation and the revision passes it" in undone
    assert "The revision's (restored)" in captions
    assert "The revision's (reverted)" in captions


def test_best_of_n_drafts_with_the_kept_one_marked_and_each_cost():
    fake = ReflectionFake()
    fake.round = {
        "drafts": [
            {"output": "first draft", "temperature": 0.2, "cost_usd": 0.001, "verdict": "revise"},
            {
                "output": "second draft\nmore",
                "temperature": 0.7,
                "usage": {"cost_usd": 0.002},
                "evaluation": {"passed": True},
                "chosen": True,
            },
            {"output": "third", "temperature": 1.0, "cost_usd": None, "passed": False},
        ]
    }
    at = open_review(fake)
    assert "Drafts (best of 3)" in subheaders(at)
    [table] = [d for d in at.dataframe if "kept" in d.value.columns]
    assert list(table.value["kept"]) == [False, True, False]
    assert list(table.value["tests"]) == ["", "passed", "failed"]
    assert list(table.value["begins"]) == ["first draft", "second draft", "third"]
    costs = list(table.value["cost"])
    assert costs[:2] == [0.001, 0.002]
    assert costs[2] != costs[2]  # unknown: NaN, shown empty
    assert "Draft 2 was kept." in all_text(at)


def test_nothing_extra_shows_when_the_round_records_none_of_it():
    at = open_review(FakeClient())
    assert not set(PANELS) & set(subheaders(at))
    assert not [s for s in subheaders(at) if s.startswith("Drafts")]
    assert not at.warning
    assert "depth asked" in all_text(at)  # the fake's critique does carry its depth


def test_model_text_in_the_new_panels_shows_as_text():
    fake = ReflectionFake(degraded_reason=evil("degraded"))
    fake.knowledge["kn_rule1"]["title"] = evil("title")
    fake.round = {
        "responses": [{"issue": evil("issue"), "action": "declined", "reason": evil("why")}],
        "reverted_hunks": [
            {"before": evil("before"), "after": evil("after"), "reason": evil("r")},
            {"reason": "x", "rule": evil("rule"), "overridden": {"detail": evil("undone")}},
        ],
        "over_correction": {"detail": evil("over")},
        "drafts": [{"output": evil("draft"), "chosen": True}],
    }
    at = open_review(fake)
    text = visible(at)
    for where in ("degraded", "r", "before", "after", "over", "draft", "rule", "undone"):
        assert evil(where) in text, where
    [link] = [p.proto.label for p in at.get("page_link") if p.proto.query_string]
    assert shown(link) == evil("title")
    assert read(link).styled == []
