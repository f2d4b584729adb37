"""Reviewer decisions: a comment becomes a binding reflection and the run resumes; approve,
edit, reject and retry do what they say; claims and idempotency hold (SQLite and Postgres)."""

import json

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


class TestComment:
    async def test_a_comment_is_binding_for_the_critic_and_the_next_actor_call(
        self, api, fake_model
    ):
        run_id, item = await paused(api, review="first_round")
        headers = await claimed_by_reviewer(api, item)
        response = await decide(api, item, headers, action="comment", comment="Mention the Moon.")
        assert response.status_code == 200, response.text
        assert response.json()["run_status"] == "critiquing"
        run = await wait_for(api, run_id, statuses=FINAL)
        assert run["status"] == "succeeded"
        stages = [c["stage"] for c in fake_model.requests()]
        assert stages == ["draft", "critique", "revise", "critique"]
        critique_prompt = user_text(fake_model.requests()[1])
        assert "[BINDING: human reviewer" in critique_prompt
        assert "Mention the Moon." in critique_prompt
        revise_prompt = user_text(fake_model.requests()[2])
        human = revise_prompt.index("Mention the Moon.")
        assert "[BINDING: human reviewer" in revise_prompt[:human]
        assert human < revise_prompt.index("[critic]")
        assert run["reflections"][0]["source"] == "human"
        decided = (await api.get(f"/v1/reviews/{item['id']}")).json()
        assert decided["status"] == "resolved"
        assert decided["decision"]["comment"] == "Mention the Moon."


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

    async def test_edit_and_finish(self, api):
        run_id, item = await paused(api)
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="edit", output="The Moon pulls.", finish=True)
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        assert run["final_output"] == "The Moon pulls."
        assert run["rounds"][0]["rolled_back"][0]["reason"].startswith("edited by")

    async def test_edit_and_continue_sends_the_edit_to_the_critic(self, api, fake_model):
        run_id, item = await paused(api, review="first_round")
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="edit", output="The Moon pulls the oceans.")
        await wait_for(api, run_id, statuses=FINAL)
        assert "The Moon pulls the oceans." in user_text(fake_model.requests()[1])

    async def test_reject_ends_the_run(self, api):
        run_id, item = await paused(api)
        headers = await claimed_by_reviewer(api, item)
        await decide(api, item, headers, action="reject", comment="Off topic.")
        run = (await api.get(f"/v1/runs/{run_id}")).json()
        assert run["status"] == "failed"
        assert run["stop_reason"] == "review_rejected"
        assert run["detail"] == "Off topic."

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
        other = await decide(api, item, headers, action="reject")
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
        _, item = await paused(api, review_deadline_s=600, review_on_expiry="escalate")
        assert item["deadline"] is not None
        assert item["on_expiry"] == "escalate"
        listed = (await api.get("/v1/reviews", params={"status": "pending"})).json()["items"]
        assert [i["on_expiry"] for i in listed if i["id"] == item["id"]] == ["escalate"]

    async def test_expiry_continues_with_the_ai_critic(self, api, fake_model):
        run_id, item = await paused(api, review="first_round", review_deadline_s=1)
        run = await wait_for(api, run_id, statuses=FINAL, timeout=15)
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
        run = await wait_for(api, run_id, statuses=FINAL, timeout=15)
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
        run = await wait_for(api, run_id, statuses=FINAL, timeout=15)
        assert run["stop_reason"] == "review_expired"
