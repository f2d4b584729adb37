"""A ``pass`` that is no pass: one listing a major or critical issue, an issue on a dimension
outside the profile, or a confidence under the caller's ``min_pass_confidence``. The Critic
re-asks its model once with the problem; a model that says it again gets ``revise``."""

import pytest

from shared.verdicts import pass_refusals, refused
from tests.critic.conftest import issue, scripted
from tests.support.fakemodel import user_text

REQUEST = {"task": "Explain tides.", "output": "Tides come from the wind."}


def twice(body: dict) -> list[dict]:
    """The same answer to the first ask and to the repair re-ask."""
    return [{"stage": "critique", "response": body}, {"stage": "critique", "response": body}]


class TestTheCritic:
    async def test_a_pass_with_a_critical_issue_is_re_asked_then_counts_as_revise(
        self, critic, fake_model
    ):
        # what a small real model answered: pass, confidence 1.0, a critical issue saying
        # "no_problem" on a dimension the profile does not have
        wrong = scripted(
            verdict="pass",
            confidence=1.0,
            error_class="none",
            issues=[issue(severity="critical", dimension="accuracy", suggestion="no_problem")],
        )
        fake_model.script(*twice(wrong))
        response = await critic.post("/v1/critique", json=REQUEST)
        assert response.status_code == 200, response.text
        body = response.json()
        assert (body["verdict"], body["error_class"]) == ("revise", "logic")
        assert body["refused_pass"] == [
            "issue 1 is critical (accuracy): a pass lists no major or critical issue"
        ]
        first, repair = fake_model.requests()
        assert "`verdict` is pass, but issue 1 is critical (accuracy)" in user_text(repair)
        assert "`verdict` is pass" not in user_text(first)

    async def test_a_model_that_corrects_itself_on_the_re_ask_keeps_its_verdict(
        self, critic, fake_model
    ):
        wrong = scripted(verdict="pass", error_class="none", issues=[issue(severity="major")])
        fake_model.script(
            {"stage": "critique", "response": wrong},
            {"stage": "critique", "response": scripted(verdict="pass", error_class="none")},
        )
        body = (await critic.post("/v1/critique", json=REQUEST)).json()
        assert (body["verdict"], body["refused_pass"]) == ("pass", [])

    async def test_an_issue_off_the_profile_is_no_pass(self, critic, fake_model):
        off = scripted(
            verdict="pass",
            error_class="none",
            issues=[issue(severity="minor", dimension="vibes")],
        )
        fake_model.script(*twice(off))
        body = (await critic.post("/v1/critique", json=REQUEST)).json()
        assert body["verdict"] == "revise"
        assert (
            "'vibes', which is not a dimension of the profile (completeness"
            in (body["refused_pass"][0])
        )
        assert body["dimensions"] == ["completeness", "coherence", "accuracy", "structure"]

    async def test_a_minor_issue_on_the_profile_may_pass(self, critic, fake_model):
        minor = scripted(
            verdict="pass",
            error_class="none",
            issues=[issue(severity="minor", dimension="structure")],
        )
        fake_model.script({"stage": "critique", "response": minor})
        body = (await critic.post("/v1/critique", json=REQUEST)).json()
        assert (body["verdict"], body["refused_pass"]) == ("pass", [])
        assert len(fake_model.requests()) == 1  # no re-ask

    @pytest.mark.parametrize(
        ("minimum", "confidence", "verdict"),
        [
            (0.6, 0.59, "revise"),  # just under the run's threshold
            (0.6, 0.6, "pass"),  # at it
            (None, 0.0, "pass"),  # no minimum asked for: a person judges confidence
            (0.0, 0.0, "pass"),
            (1.0, 0.99, "revise"),
        ],
    )
    async def test_a_pass_needs_the_confidence_the_caller_asks_for(
        self, critic, fake_model, minimum, confidence, verdict
    ):
        fake_model.script(*twice(scripted(verdict="pass", confidence=confidence)))
        body = (
            await critic.post("/v1/critique", json={**REQUEST, "min_pass_confidence": minimum})
        ).json()
        assert body["verdict"] == verdict
        assert bool(body["refused_pass"]) is (verdict == "revise")

    @pytest.mark.parametrize("bad", [-0.1, 1.1, "high"])
    async def test_the_minimum_is_a_share(self, critic, bad):
        response = await critic.post("/v1/critique", json={**REQUEST, "min_pass_confidence": bad})
        assert response.status_code == 422
        assert "min_pass_confidence" in response.text

    async def test_a_revise_is_never_touched(self, critic, fake_model):
        revise = scripted(issues=[issue(severity="critical", dimension="vibes")])
        fake_model.script({"stage": "critique", "response": revise})
        body = (
            await critic.post("/v1/critique", json={**REQUEST, "min_pass_confidence": 1})
        ).json()
        assert (body["verdict"], body["refused_pass"]) == ("revise", [])
        assert len(fake_model.requests()) == 1


class TestTheRule:
    """``shared.verdicts``, the rule both the Critic and the orchestrator apply."""

    @pytest.mark.parametrize("severity", ["major", "critical"])
    def test_a_blocking_issue(self, severity):
        found = pass_refusals(
            {"verdict": "pass", "issues": [{"severity": severity, "dimension": "d"}]}
        )
        assert found == [f"issue 1 is {severity} (d): a pass lists no major or critical issue"]

    def test_each_problem_is_named_once_per_issue(self):
        critique = {
            "verdict": "pass",
            "confidence": 0.2,
            "issues": [
                {"severity": "minor", "dimension": "a"},
                {"severity": "critical", "dimension": "x"},
            ],
        }
        found = pass_refusals(critique, dimensions=["a"], min_confidence=0.5)
        assert found == [
            "issue 2 is critical (x): a pass lists no major or critical issue",
            "issue 2 is on 'x', which is not a dimension of the profile (a)",
            "confidence 0.20 is under the 0.50 a pass needs",
        ]

    def test_no_dimensions_given_means_not_checked(self):
        assert pass_refusals({"verdict": "pass", "issues": [{"dimension": "x"}]}) == []

    def test_refused_turns_the_verdict_and_keeps_earlier_reasons(self):
        doc = {"verdict": "pass", "error_class": "none", "refused_pass": ["a"]}
        assert refused(doc, ["a", "b"]) == {
            "verdict": "revise",
            "error_class": "logic",
            "refused_pass": ["a", "b"],
        }
        assert refused(doc, []) is doc
