"""Depths L1 / L2 / L3 / auto: each its own prompt, output-token cap and latency budget; a
depth that times out or fails once degrades to L1 for that call."""

import pytest

from shared import deadline
from tests.critic.conftest import issue, scripted
from tests.support.fakemodel import user_text

OUTPUT = "Take 500 g of paracetamol every hour."
WRONG = issue(
    quote="500 g",
    error_type="dosage_unit",
    corrected_text="500 mg",
    evidence_source="task",
    suggestion="The dose unit is grams; paracetamol is dosed in milligrams.",
)
PROMPT_MARKS = {
    "L1": "Depth L1, consistency",
    "L2": "Depth L2, evidence",
    "L3": "Depth L3, counterfactual",
}


def body(**extra) -> dict:
    return {"task": "How much paracetamol may an adult take?", "output": OUTPUT, **extra}


class TestEachDepth:
    @pytest.mark.parametrize(("depth", "cap"), [("L1", 1000), ("L2", 1400), ("L3", 2000)])
    async def test_prompt_cap_and_fields(self, critic, fake_model, depth, cap):
        response = await critic.post("/v1/critique", json=body(depth=depth, profile="medical"))
        assert response.status_code == 200, response.text
        result = response.json()
        assert (result["depth"], result["requested_depth"]) == (depth, depth)
        assert result["degraded"] is False
        assert result["degraded_reason"] is None
        calls = fake_model.requests()
        for call in calls:
            system = call["body"]["system"]
            assert PROMPT_MARKS[depth] in system
            assert [mark for mark in PROMPT_MARKS.values() if mark in system] == [
                PROMPT_MARKS[depth]
            ]
        # what the depth's issues need, not a fixed 256 (an L3 re-test asks for more)
        assert calls[0]["body"]["max_tokens"] == cap
        assert all(cap <= c["body"]["max_tokens"] <= 2048 for c in calls)
        assert result["rounds"] == len(calls)

    async def test_the_cap_grows_with_the_reviewer_points(self, critic, fake_model):
        points = [f"Name the dose in milligrams, point {n}." for n in range(3)]
        reflections = [{"content": p, "source": "human"} for p in points]
        await critic.post(
            "/v1/critique",
            json=body(depth="L2", reflections=reflections, binding_points=points),
        )
        assert fake_model.requests()[0]["body"]["max_tokens"] == 1400 + 3 * 100

    async def test_the_cap_never_exceeds_the_service_cap(self, critic_with, fake_model):
        async with critic_with(max_output_tokens=300) as client:
            await client.post("/v1/critique", json=body(depth="L2"))
        assert fake_model.requests()[0]["body"]["max_tokens"] == 300

    async def test_caps_are_settings(self, critic_with, fake_model):
        async with critic_with(l1_max_tokens=128) as client:
            await client.post("/v1/critique", json=body(depth="L1"))
        assert fake_model.requests()[0]["body"]["max_tokens"] == 128

    async def test_the_profile_gives_the_default_depth(self, critic):
        depths = {}
        for profile in ("general", "legal", "medical"):
            response = await critic.post("/v1/critique", json=body(profile=profile))
            depths[profile] = response.json()["depth"]
        assert depths == {"general": "L1", "legal": "L2", "medical": "L3"}

    async def test_l2_asks_every_issue_for_its_evidence(self, critic, fake_model):
        unsourced = scripted(issues=[issue(evidence_source=None)])
        fake_model.script(
            {"stage": "critique", "response": unsourced},
            {"stage": "critique", "response": scripted(issues=[issue()])},
        )
        response = await critic.post("/v1/critique", json=body(depth="L2"))
        assert response.json()["issues"][0]["evidence_source"] == "task"
        assert "issue 0 names no `evidence_source`" in user_text(fake_model.requests()[1])

    async def test_l1_does_not_require_evidence(self, critic, fake_model):
        fake_model.script(
            {"stage": "critique", "response": scripted(issues=[issue(evidence_source=None)])}
        )
        response = await critic.post("/v1/critique", json=body(depth="L1"))
        assert response.json()["issues"][0]["evidence_source"] is None
        assert len(fake_model.requests()) == 1


class TestCounterfactual:
    async def test_l3_re_tests_its_issues_in_a_second_round(self, critic, fake_model):
        fake_model.script(
            {"stage": "critique", "response": scripted(issues=[WRONG])},
            {"stage": "critique", "response": scripted(issues=[WRONG], confidence=0.9)},
        )
        response = await critic.post("/v1/critique", json=body(depth="L3", profile="medical"))
        result = response.json()
        first, second = fake_model.requests()
        assert "<counterfactual_review>" not in user_text(first)
        review = user_text(second)
        assert "<counterfactual_review>" in review
        assert "1. [dosage_unit] The dose unit is grams" in review
        assert '(on: "500 g")' in review
        assert result["rounds"] == 2
        assert result["confidence"] == 0.9
        usage_in = sum(c["response"]["usage"]["input_tokens"] for c in (first, second))
        assert result["usage"]["input_tokens"] == usage_in

    async def test_the_second_round_may_withdraw_every_issue(self, critic, fake_model):
        fake_model.script(
            {"stage": "critique", "response": scripted(issues=[WRONG])},
            {"stage": "critique", "response": scripted(verdict="pass", error_class="none")},
        )
        response = await critic.post("/v1/critique", json=body(depth="L3", profile="medical"))
        result = response.json()
        assert (result["verdict"], result["no_error_found"], result["rounds"]) == ("pass", True, 2)

    async def test_l3_without_issues_stops_after_one_round(self, critic, fake_model):
        fake_model.script({"stage": "critique", "response": scripted(verdict="pass")})
        result = (await critic.post("/v1/critique", json=body(depth="L3"))).json()
        assert result["rounds"] == 1
        assert len(fake_model.requests()) == 1


class TestAuto:
    @pytest.mark.parametrize(
        ("profile", "budget", "expected"),
        [
            ("general", None, "L1"),
            ("support", None, "L2"),
            ("medical", None, "L3"),
            ("medical", 100.0, "L2"),  # L3's budget (180 s) does not fit
            ("medical", 10.0, "L1"),
            ("legal", 1000.0, "L3"),
        ],
    )
    async def test_auto_follows_risk_then_the_latency_budget(
        self, critic, profile, budget, expected
    ):
        extra = {"latency_budget_s": budget} if budget else {}
        response = await critic.post(
            "/v1/critique", json=body(depth="auto", profile=profile, **extra)
        )
        result = response.json()
        assert (result["requested_depth"], result["depth"]) == ("auto", expected)

    async def test_a_bad_depth_is_a_422(self, critic):
        response = await critic.post("/v1/critique", json=body(depth="L4"))
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "depth"]


class TestDegrade:
    async def test_a_timed_out_l2_degrades_to_l1(self, critic_with, fake_model):
        fake_model.faults({"delay_s": 3.0, "stage": "critique"})
        async with critic_with(l2_budget_s=0.5) as client:
            response = await client.post("/v1/critique", json=body(depth="L2", profile="legal"))
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["degraded"] is True
        assert (result["requested_depth"], result["depth"]) == ("L2", "L1")
        assert "0.5 s budget" in result["degraded_reason"]
        cut_off, fallback = fake_model.requests()
        assert PROMPT_MARKS["L2"] in cut_off["body"]["system"]
        assert PROMPT_MARKS["L1"] in fallback["body"]["system"]
        assert fallback["body"]["max_tokens"] == 1000
        assert result["risk"] == "high"

    async def test_an_l2_that_keeps_answering_garbage_degrades_to_l1(self, critic, fake_model):
        fake_model.faults(
            {"malformed": True, "stage": "critique"}, {"malformed": True, "stage": "critique"}
        )
        response = await critic.post("/v1/critique", json=body(depth="L2"))
        result = response.json()
        assert response.status_code == 200, response.text
        assert result["degraded"] is True
        assert result["degraded_reason"].startswith("InvalidModelOutput")
        assert len(fake_model.requests()) == 3

    async def test_a_degraded_critique_counts_the_failed_l2_calls(self, critic, fake_model):
        fake_model.faults(
            {"malformed": True, "stage": "critique"}, {"malformed": True, "stage": "critique"}
        )
        response = await critic.post("/v1/critique", json=body(depth="L2"))
        result = response.json()
        assert result["degraded"] is True
        assert result["usage"]["attempts"] == 3  # two failed L2 calls and the L1 one
        calls = fake_model.requests()
        assert result["usage"]["input_tokens"] == sum(
            c["response"]["usage"]["input_tokens"] for c in calls
        )

    async def test_a_failed_l1_says_what_its_calls_cost(self, critic, fake_model):
        fake_model.faults(
            {"malformed": True, "stage": "critique"}, {"malformed": True, "stage": "critique"}
        )
        response = await critic.post("/v1/critique", json=body(depth="L1"))
        failed = response.json()
        assert response.status_code == 422
        assert failed["error"] == "InvalidModelOutput"
        assert "finish reason tool_use, " in failed["detail"]
        assert failed["usage"]["attempts"] == 2
        assert failed["usage"]["output_tokens"] == sum(
            c["response"]["usage"]["output_tokens"] for c in fake_model.requests()
        )

    async def test_a_critique_cut_off_twice_is_output_truncated(self, critic, fake_model):
        fake_model.faults(
            {"truncated": True, "stage": "critique"}, {"truncated": True, "stage": "critique"}
        )
        response = await critic.post("/v1/critique", json=body(depth="L1"))
        assert response.status_code == 422
        assert response.json()["error"] == "OutputTruncated"
        assert "finish reason max_tokens" in response.json()["detail"]
        assert response.json()["usage"]["attempts"] == 2

    async def test_an_out_of_range_confidence_is_clamped_and_noted(self, critic, fake_model):
        fake_model.script(
            {
                "stage": "critique",
                "response": {
                    "verdict": "revise",
                    "confidence": 95,
                    "issues": [
                        {"dimension": "accuracy", "severity": "minor", "suggestion": "Fix it."}
                    ],
                    "reflection": "One thing.",
                    "error_class": "logic",
                },
            }
        )
        response = await critic.post("/v1/critique", json=body(depth="L1"))
        result = response.json()
        assert response.status_code == 200, response.text
        assert result["confidence"] == 1.0
        assert result["clamped"] == ["confidence 95 clamped to 1.0"]
        assert len(fake_model.requests()) == 1

    async def test_a_timed_out_l1_is_a_504_not_a_retry(self, critic_with, fake_model):
        fake_model.faults({"delay_s": 3.0, "stage": "critique"})
        async with critic_with(l1_budget_s=0.5) as client:
            response = await client.post("/v1/critique", json=body(depth="L1"))
        assert response.status_code == 504
        # BudgetExceeded: the orchestrator does not send the same request again
        assert response.json()["error"] == "BudgetExceeded"
        assert "depth L1 took longer than its 0.5 s budget" in response.json()["detail"]
        assert len(fake_model.requests()) == 1

    async def test_the_callers_deadline_cuts_a_longer_budget_and_says_so(
        self, critic_with, fake_model
    ):
        fake_model.faults({"delay_s": 3.0, "stage": "critique"})
        async with critic_with(l1_budget_s=60) as client:
            response = await client.post(
                "/v1/critique", json=body(depth="L1"), headers={deadline.HEADER: "1500"}
            )
        assert response.status_code == 504
        assert response.json()["error"] == "BudgetExceeded"
        assert "ran past its caller's deadline" in response.json()["detail"]
        assert len(fake_model.requests()) == 1

    async def test_auto_depth_steps_down_to_what_the_deadline_leaves(self, critic_with, fake_model):
        async with critic_with(l1_budget_s=1, l2_budget_s=30, l3_budget_s=60) as client:
            generous = await client.post("/v1/critique", json=body(depth="auto", profile="medical"))
            short = await client.post(
                "/v1/critique",
                json=body(depth="auto", profile="medical"),
                headers={deadline.HEADER: "10000"},
            )
        assert generous.json()["depth"] != "L1", generous.text
        assert short.json()["depth"] == "L1", short.text

    async def test_a_degraded_l1_that_fails_too_is_the_l1_error(self, critic_with, fake_model):
        fake_model.faults(
            {"delay_s": 3.0, "stage": "critique"}, {"delay_s": 3.0, "stage": "critique"}
        )
        async with critic_with(l2_budget_s=0.3, l1_budget_s=0.3) as client:
            response = await client.post("/v1/critique", json=body(depth="L2"))
        assert response.status_code == 504
        assert "depth L1" in response.json()["detail"]


class TestEvidence:
    """Research evidence: numbered sources in the prompt, `evidence:[n]` checked against
    them, and search queries asked for at L2 or when the caller researches."""

    EVIDENCE = [
        {
            "n": 1,
            "url": "file:///corpus/paracetamol.md",
            "title": "Paracetamol",
            "snippet": "The adult dose is 500 mg to 1 g every 4 to 6 hours.",
            "retrieved_at": "2026-12-01T00:00:00Z",
            "source": "corpus",
        }
    ]

    async def test_sources_are_numbered_in_the_prompt(self, critic, fake_model):
        await critic.post("/v1/critique", json=body(depth="L2", evidence=self.EVIDENCE))
        prompt = user_text(fake_model.requests()[0])
        assert "[1] Paracetamol file:///corpus/paracetamol.md" in prompt
        assert "500 mg to 1 g every 4 to 6 hours" in prompt
        assert "`evidence:[n]`" in prompt

    async def test_an_unknown_source_number_is_repaired_then_dropped(self, critic, fake_model):
        wrong = scripted(issues=[issue(evidence_source="evidence:[7]")])
        fake_model.script(
            {"stage": "critique", "response": wrong},
            {"stage": "critique", "response": wrong},
        )
        response = await critic.post("/v1/critique", json=body(depth="L1", evidence=self.EVIDENCE))
        assert response.status_code == 200, response.text
        assert response.json()["issues"][0]["evidence_source"] is None
        repair = user_text(fake_model.requests()[1])
        assert "cites evidence:[7], which is not one of the numbered sources" in repair

    async def test_a_known_source_number_is_kept(self, critic, fake_model):
        fake_model.script(
            {
                "stage": "critique",
                "response": scripted(issues=[issue(evidence_source="evidence:[1]")]),
            }
        )
        response = await critic.post("/v1/critique", json=body(depth="L2", evidence=self.EVIDENCE))
        assert response.json()["issues"][0]["evidence_source"] == "evidence:[1]"
        assert len(fake_model.requests()) == 1

    @pytest.mark.parametrize(
        ("extra", "asked"),
        [
            ({"depth": "L2"}, True),
            ({"depth": "L1", "research": True}, True),
            ({"depth": "L1"}, False),
        ],
    )
    async def test_queries_are_asked_at_l2_or_with_research(self, critic, fake_model, extra, asked):
        queries = ["paracetamol adult maximum daily dose", "", "  paracetamol   units "]
        fake_model.script(
            {"stage": "critique", "response": scripted(issues=[issue()], queries=queries)}
        )
        response = await critic.post("/v1/critique", json=body(**extra))
        prompt = user_text(fake_model.requests()[0])
        assert ("In `queries`, give up to 3" in prompt) is asked
        expected = ["paracetamol adult maximum daily dose", "paracetamol units"] if asked else []
        assert response.json()["queries"] == expected
