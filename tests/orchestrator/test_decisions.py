"""Reviewer decisions: a comment becomes a binding reflection and the run resumes; approve,
edit, reject and retry do what they say; claims and idempotency hold (SQLite and Postgres)."""

import json
from datetime import UTC, datetime, timedelta

from tests.critic.conftest import JUSTIFICATION
from tests.orchestrator.conftest import mint, start, wait_for
from tests.support.fakemodel import user_text

FINAL = {"succeeded", "escalated", "failed", "cancelled"}


async def paused(api, **policy) -> tuple[str, dict]:
    run_id = await start(api, task="Explain tides.", policy={"review": "before_critique", **policy})
    await wait_for(api, run_id)
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    return run_id, item


async def claimed_by_reviewer(api, item) -> dict:
    headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
    assert (await api.post(f"/v1/reviews/{item['id']}/claim", headers=headers)).status_code == 200
    return headers


async def decide(api, item, headers, **body):
    return await api.post(f"/v1/reviews/{item['id']}/decision", json=body, headers=headers)


PASS_CRITIQUE = {
    "verdict": "pass",
    "confidence": 0.9,
    "issues": [],
    "reflection": "Ready.",
    "error_class": "none",
    "no_error_found": True,
    "justification": JUSTIFICATION,
}
PASSABLE = "The Moon's pull raises the oceans on the near and far sides.\n(revised)"
MOON = "Mention the Moon."
# Revisions that ignore the point, long enough not to count as a shrunken version
IGNORED = (
    "Tides rise and fall twice a day because of gravity and the turning of the Earth: the "
    "water bulges on two opposite sides of the planet and each coast passes through both.\n"
    "(revised)"
)
IGNORED_AGAIN = IGNORED.replace("twice a day", "about twice a day")


def actor_says(output: str) -> dict:
    """A scripted revision that claims to apply the point and does not."""
    claimed = {"point": MOON, "action": "applied", "reason": "", "where": "everywhere"}
    return {
        "stage": "revise",
        "response": {"output": output, "uncertainties": [], "responses": [claimed]},
    }


class TestComment:
    async def test_a_comment_on_a_passable_draft_still_produces_a_revision_that_applies_it(
        self, api, fake_model
    ):
        # the draft already ends "(revised)": the fake Critic would pass it as it is
        fake_model.script({"stage": "draft", "response": {"output": PASSABLE, "uncertainties": []}})
        run_id, item = await paused(api, review="first_round", max_rounds=1)
        headers = await claimed_by_reviewer(api, item)
        response = await decide(api, item, headers, action="comment", comment=MOON)
        assert response.status_code == 200, response.text
        assert response.json()["run_status"] == "revising"
        run = await wait_for(api, run_id, statuses=FINAL)
        assert (run["status"], run["stop_reason"]) == ("succeeded", "critic_pass")
        assert [c["stage"] for c in fake_model.requests()] == ["draft", "revise", "critique"]
        # the Actor's request carries the comment and its point in the reviewer section, and
        # its answer applied it
        revise_prompt = user_text(fake_model.requests()[1])
        section = revise_prompt[revise_prompt.index("<reviewer_instructions>") :]
        assert section.split("\n")[3].startswith("[BINDING: human reviewer")
        assert section.split("\n")[3].endswith(f"] {MOON}")
        assert f"<binding_points>\n1. {MOON}\n</binding_points>" in section
        assert f"Reviewer point applied: {MOON}" in run["final_output"]
        assert run["final_round"] == 2
        assert run["rounds"][1]["responses"][0]["action"] == "applied"
        # the Critic was told it is a reviewer's instruction, and checked it
        critique_prompt = user_text(fake_model.requests()[2])
        assert "A human reviewer's instructions for this version" in critique_prompt
        [check] = run["rounds"][1]["critique"]["binding_checks"]
        assert (check["point"], check["satisfied"]) == (MOON, True)
        assert MOON in check["quote"]
        assert check["quote"] in run["final_output"]
        assert (run["binding_points"], run["human_rounds"]) == ([], 1)
        decided = (await api.get(f"/v1/reviews/{item['id']}")).json()
        assert decided["decision"]["comment"] == MOON
        assert decided["decision"]["points"] == [MOON]

    async def test_a_pass_waits_until_every_point_is_satisfied(self, api, fake_model):
        fake_model.script(actor_says(IGNORED))
        run_id, item = await paused(api, review="first_round", max_rounds=1)
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="comment", comment=MOON)
        run = await wait_for(api, run_id, statuses=FINAL)
        assert run["status"] == "succeeded"
        stages = [c["stage"] for c in fake_model.requests()]
        assert stages == ["draft", "revise", "critique", "revise", "critique"]
        missed, applied = run["rounds"][1], run["rounds"][2]
        assert missed["critique"]["verdict"] == "pass"  # the Critic passed the text ...
        assert missed["critique"]["binding_checks"][0]["satisfied"] is False  # ... not the point
        assert applied["critique"]["binding_checks"][0]["satisfied"] is True
        assert run["human_rounds"] == 2  # neither counted against max_rounds: 1
        second_revise = user_text(fake_model.requests()[3])
        assert "does not yet apply the reviewer's binding points" in second_revise

    async def test_an_actor_that_ignores_the_point_twice_escalates(self, api, fake_model):
        fake_model.script(actor_says(IGNORED), actor_says(IGNORED_AGAIN))
        run_id, item = await paused(api, review="first_round")
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="comment", comment=MOON)
        run = await wait_for(api, run_id, statuses=FINAL)
        assert (run["status"], run["stop_reason"]) == ("escalated", "human_point_unmet")
        assert MOON in run["detail"]
        reviews = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        [escalation] = [r for r in reviews if r["kind"] == "escalation"]
        context = (await api.get(f"/v1/reviews/{escalation['id']}")).json()["context"]
        assert context["binding_points"] == [MOON]
        attempts = [r["output"] for r in context["rounds"][1:]]
        assert attempts == [IGNORED, IGNORED_AGAIN]

    async def test_a_comment_on_an_escalation_leads_to_a_revision(self, api, fake_model):
        run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
        await wait_for(api, run_id)
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        assert item["kind"] == "escalation"
        headers = await claimed_by_reviewer(api, item)
        response = await decide(api, item, headers, action="comment", comment=MOON)
        assert response.json()["run_status"] == "revising"
        run = await wait_for(api, run_id, statuses=FINAL)
        assert run["status"] == "succeeded"
        stages = [c["stage"] for c in fake_model.requests()]
        assert stages == ["draft", "critique", "revise", "critique"]
        assert f"1. {MOON}" in user_text(fake_model.requests()[2])

    async def test_points_can_be_given_one_by_one(self, api, fake_model):
        run_id, item = await paused(api, review="first_round")
        headers = await claimed_by_reviewer(api, item)
        points = ["Mention the Moon.", "Give the period: about 12 h 25 min."]
        await decide(api, item, headers, action="comment", points=points)
        run = await wait_for(api, run_id, statuses=FINAL)
        assert run["status"] == "succeeded"
        revise_prompt = user_text(fake_model.requests()[1])
        assert f"1. {points[0]}\n2. {points[1]}" in revise_prompt
        checks = run["rounds"][1]["critique"]["binding_checks"]
        assert [c["satisfied"] for c in checks] == [True, True]

    async def test_each_line_of_a_comment_is_a_point(self, api, fake_model):
        run_id, item = await paused(api, review="first_round")
        headers = await claimed_by_reviewer(api, item)
        comment = "- Mention the Moon.\n\n2. Say why there are two bulges."
        await decide(api, item, headers, action="comment", comment=comment)
        await wait_for(api, run_id, statuses=FINAL)
        revise_prompt = user_text(fake_model.requests()[1])
        assert "1. Mention the Moon.\n2. Say why there are two bulges." in revise_prompt


class TestOtherActions:
    async def test_approve_makes_the_output_final(self, api, fake_model):
        run_id, item = await paused(api)
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="approve")
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        assert run["status"] == "succeeded"
        assert run["stop_reason"] == "review_approved"
        assert run["final_output"] == run["rounds"][0]["output"]
        assert [c["stage"] for c in fake_model.requests()] == ["draft"]

    async def test_an_edit_is_a_new_version_and_the_draft_stays(self, api):
        run_id, item = await paused(api)
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="edit", output="The Moon pulls.", finish=True)
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        assert run["final_output"] == "The Moon pulls."
        draft, edited = run["rounds"]
        assert (draft["provenance"], draft["output"]) == ("actor", run["rounds"][0]["output"])
        assert draft["output"] != "The Moon pulls."
        assert (edited["number"], edited["provenance"]) == (2, "human")
        assert edited["review"]["from_round"] == 1
        assert run["final_round"] == 2
        events = (await api.get("/v1/events", params={"run_id": run_id})).json()
        assert any(
            e["type"] == "round.output" and e["data"].get("provenance") == "human" for e in events
        )

    async def test_edit_and_continue_sends_the_edit_to_the_critic(self, api, fake_model):
        run_id, item = await paused(api, review="first_round")
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="edit", output="The Moon pulls the oceans.")
        await wait_for(api, run_id, statuses=FINAL)
        assert "The Moon pulls the oceans." in user_text(fake_model.requests()[1])

    async def test_reject_needs_a_reason(self, api):
        _, item = await paused(api)
        headers = await claimed_by_reviewer(api, item)
        response = await decide(api, item, headers, action="reject")
        assert response.status_code == 422
        assert "reject decision needs the reason" in response.text
        blank = await decide(api, item, headers, action="reject", comment="   ")
        assert blank.status_code == 422

    async def test_reject_ends_the_run(self, api):
        run_id, item = await paused(api)
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="reject", comment="Off topic.")
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        assert run["status"] == "failed"
        assert run["stop_reason"] == "review_rejected"
        assert run["detail"] == "Off topic."

    async def test_a_retry_after_the_critic_was_down_critiques_the_version_it_stopped_at(
        self, api, fake_model
    ):
        fake_model.faults(*[{"status": 503, "stage": "critique"}] * 6)
        run_id = await start(api, task="Explain tides.")
        down = await wait_for(api, run_id)
        assert (down["status"], down["stop_reason"]) == ("escalated", "environment")
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        headers = await claimed_by_reviewer(api, item)
        response = await decide(api, item, headers, action="retry")
        assert response.json()["run_status"] == "critiquing"
        fake_model.script({"stage": "critique", "response": PASS_CRITIQUE})
        run = await wait_for(api, run_id, statuses=FINAL)
        # never a revision of a version nobody judged: the draft gets its critique and ships
        assert (run["status"], run["final_round"], len(run["rounds"])) == ("succeeded", 1, 1)
        stages = [c["stage"] for c in fake_model.requests() if c["status"] == 200]
        assert stages == ["draft", "critique"]

    async def test_retry_gives_an_escalated_run_more_rounds(self, api, fake_model):
        run_id = await start(api, task="Explain tides.", policy={"max_rounds": 1})
        await wait_for(api, run_id)
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        headers = await claimed_by_reviewer(api, item)
        response = await decide(api, item, headers, action="retry", rounds=1, comment="Add detail.")
        assert response.json()["run_status"] == "revising"
        run = await wait_for(api, run_id, statuses={"succeeded", "failed"})
        assert run["status"] == "succeeded"
        assert run["policy"]["max_rounds"] == 2
        assert [c["stage"] for c in fake_model.requests()] == [
            "draft",
            "critique",
            "revise",
            "critique",
        ]
        assert "Add detail." in json.dumps(fake_model.requests()[2]["body"])


class TestRules:
    async def test_deciding_without_a_claim_is_409(self, api):
        _, item = await paused(api)
        headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        response = await decide(api, item, headers, action="approve")
        assert response.status_code == 409

    async def test_someone_elses_claim_is_409(self, api):
        _, item = await paused(api)
        await claimed_by_reviewer(api, item)
        other = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        assert (await decide(api, item, other, action="approve")).status_code == 409

    async def test_a_resolved_item_is_409_but_the_same_key_replays(self, api):
        _, item = await paused(api)
        headers = await claimed_by_reviewer(api, item)
        keyed = {**headers, "Idempotency-Key": "decision-1"}
        first = await decide(api, item, keyed, action="approve")
        again = await decide(api, item, keyed, action="approve")
        assert first.status_code == again.status_code == 200
        assert first.json() == again.json()
        other = await decide(api, item, headers, action="reject", comment="Off topic.")
        assert other.status_code == 409

    async def test_actions_must_fit_the_kind_and_carry_their_fields(self, api):
        _, item = await paused(api)
        headers = await claimed_by_reviewer(api, item)
        assert (await decide(api, item, headers, action="retry")).status_code == 422
        assert (await decide(api, item, headers, action="comment")).status_code == 422
        assert (await decide(api, item, headers, action="edit")).status_code == 422
        assert (await decide(api, item, headers, action="maybe")).status_code == 422

    async def test_the_decision_is_audited(self, api):
        run_id, item = await paused(api)
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="approve")
        events = (await api.get("/v1/events", params={"run_id": run_id})).json()
        decided = [e for e in events if e["type"] == "review.decided"]
        assert decided[0]["data"]["action"] == "approve"
        assert decided[0]["data"]["by"].startswith("tok_")


class TestDeadlines:
    async def test_the_deadline_and_its_action_are_in_the_queue(self, api):
        before = datetime.now(UTC)
        _, item = await paused(api, review_deadline_s=600, review_on_expiry="escalate")
        after = datetime.now(UTC)
        deadline = datetime.fromisoformat(item["deadline"])
        # 600 s from the moment the run paused, which lies between the two readings
        assert before + timedelta(seconds=599) <= deadline <= after + timedelta(seconds=601)
        created = datetime.fromisoformat(item["created_at"])
        assert abs((deadline - created).total_seconds() - 600) < 1
        assert item["on_expiry"] == "escalate"
        listed = (await api.get("/v1/reviews", params={"status": "pending"})).json()["items"]
        assert [i["on_expiry"] for i in listed if i["id"] == item["id"]] == ["escalate"]

    async def test_expiry_continues_with_the_ai_critic(self, api, fake_model):
        run_id, item = await paused(api, review="first_round", review_deadline_s=1)
        run = await wait_for(api, run_id, statuses=FINAL, timeout=60)
        assert run["status"] == "succeeded"
        assert [c["stage"] for c in fake_model.requests()] == [
            "draft",
            "critique",
            "revise",
            "critique",
        ]
        expired = (await api.get(f"/v1/reviews/{item['id']}")).json()
        assert expired["status"] == "expired"
        assert expired["decision"]["on_expiry"] == "continue"

    async def test_expiry_can_escalate(self, api, fake_model):
        run_id, _ = await paused(api, review_deadline_s=1, review_on_expiry="escalate")
        run = await wait_for(api, run_id, statuses=FINAL, timeout=60)
        assert run["status"] == "escalated"
        assert run["stop_reason"] == "review_expired"
        reviews = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        assert {r["kind"]: r["status"] for r in reviews} == {
            "escalation": "pending",
            "pre_critique": "expired",
        }
        assert [c["stage"] for c in fake_model.requests()] == ["draft"]

    async def test_a_claim_does_not_stop_the_deadline(self, api):
        run_id, item = await paused(api, review_deadline_s=1, review_on_expiry="escalate")
        await claimed_by_reviewer(api, item)
        run = await wait_for(api, run_id, statuses=FINAL, timeout=60)
        assert run["stop_reason"] == "review_expired"
