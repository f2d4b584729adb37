"""A run's ``policy.profile`` and ``policy.depth`` reach the Critic; an unknown profile is a
422 at creation; a degraded critique never passes a high-risk profile on its own."""

import pytest

from tests.critic.conftest import scripted
from tests.orchestrator.conftest import mint, start, wait_for
from tests.support.fakemodel import user_text

PASS = scripted(verdict="pass", confidence=0.9, reflection="Nothing to change.", error_class="none")


@pytest.fixture
def peer_overrides():
    return {
        "actor": {"model_max_attempts": 2},
        "critic": {"model_max_attempts": 2, "l2_budget_s": 0.5},
    }


class TestChoosing:
    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_an_unknown_profile_is_a_422_and_no_run(self, api, fake_model):
        response = await api.post(
            "/v1/runs", json={"task": "Explain tides.", "policy": {"profile": "astrology"}}
        )
        assert response.status_code == 422, response.text
        assert response.json()["error"] == "UnknownProfile"
        assert (
            "no profile 'astrology'; known: code, general, legal, medical, support"
            in (response.json()["detail"])
        )
        assert (await api.get("/v1/runs")).json()["items"] == []
        assert fake_model.requests() == []

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_a_text_profile_for_code_is_a_422(self, api):
        response = await api.post(
            "/v1/runs",
            json={"task": "Write f.", "kind": "code", "policy": {"profile": "medical"}},
        )
        assert response.status_code == 422
        assert "'medical' judges text tasks, not code" in response.json()["detail"]

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    async def test_a_bad_depth_is_a_422_on_the_field(self, api):
        response = await api.post("/v1/runs", json={"task": "t", "policy": {"depth": "deep"}})
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"][-1] == "depth"

    async def test_profile_and_depth_reach_the_critic_and_the_record(self, api, fake_model):
        run_id = await start(
            api,
            task="May a landlord keep the deposit?",
            policy={"profile": "legal", "depth": "L2", "max_rounds": 1},
        )
        run = await wait_for(api, run_id)
        assert run["policy"]["profile"] == "legal"
        critique = run["rounds"][0]["critique"]
        assert (critique["profile"], critique["depth"], critique["degraded"]) == (
            "legal",
            "L2",
            False,
        )
        [call] = [c for c in fake_model.requests() if c["stage"] == "critique"]
        assert "senior legal reviewer" in call["body"]["system"]
        assert "Depth L2, evidence" in call["body"]["system"]
        assert call["body"]["max_tokens"] == 1400  # what an L2 critique needs

    async def test_without_a_profile_the_kind_decides(self, api):
        run = await wait_for(api, await start(api, task="Explain tides.", policy={"max_rounds": 1}))
        critique = run["rounds"][0]["critique"]
        assert (critique["profile"], critique["depth"]) == ("general", "L1")


class TestDegraded:
    async def test_a_degraded_pass_on_a_high_risk_profile_escalates(self, api, fake_model):
        fake_model.faults({"delay_s": 3.0, "stage": "critique"})
        fake_model.script(
            {"stage": "critique", "response": PASS}, {"stage": "critique", "response": PASS}
        )
        run_id = await start(
            api, task="May a landlord keep the deposit?", policy={"profile": "legal"}
        )
        run = await wait_for(api, run_id)
        assert run["status"] == "escalated"
        assert run["stop_reason"] == "degraded_critique"
        assert "profile 'legal' is high-risk, so a person decides" in run["detail"]
        critique = run["rounds"][0]["critique"]
        assert critique["verdict"] == "pass"
        assert (critique["degraded"], critique["depth"], critique["requested_depth"]) == (
            True,
            "L1",
            "L2",
        )
        reviews = (await api.get("/v1/reviews", params={"run_id": run_id})).json()
        assert [r["kind"] for r in reviews["items"]] == ["escalation"]

    async def test_a_retry_of_a_degraded_pass_revises_with_a_note_to_follow(self, api, fake_model):
        # the pass could not ship, and nothing criticised the version: the revision a person
        # asks for still gets a reflection to follow (a revise request needs one)
        fake_model.faults({"delay_s": 3.0, "stage": "critique"})
        fake_model.script(
            {"stage": "critique", "response": PASS}, {"stage": "critique", "response": PASS}
        )
        run_id = await start(
            api, task="May a landlord keep the deposit?", policy={"profile": "legal"}
        )
        await wait_for(api, run_id)
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        assert (await api.post(f"/v1/reviews/{item['id']}/claim", headers=headers)).is_success
        decided = await api.post(
            f"/v1/reviews/{item['id']}/decision", json={"action": "retry"}, headers=headers
        )
        assert decided.status_code == 200, decided.text
        run = await wait_for(api, run_id, statuses={"succeeded", "escalated", "failed"})
        assert run["stop_reason"] != "internal_error", run["detail"]
        assert len(run["rounds"]) == 2
        [revise] = [c for c in fake_model.requests() if c["stage"] == "revise"]
        assert "A person asked for another revision of round 1" in user_text(revise)

    async def test_a_degraded_pass_on_a_low_risk_profile_passes(self, api, fake_model):
        fake_model.faults({"delay_s": 3.0, "stage": "critique"})
        fake_model.script(
            {"stage": "critique", "response": PASS}, {"stage": "critique", "response": PASS}
        )
        run_id = await start(
            api, task="Explain tides.", policy={"profile": "general", "depth": "L2"}
        )
        run = await wait_for(api, run_id)
        assert (run["status"], run["stop_reason"]) == ("succeeded", "critic_pass")
        assert run["rounds"][0]["critique"]["degraded"] is True


@pytest.mark.sqlite_only
class TestLatencyBudget:
    async def test_the_budget_reaches_the_critic_and_auto_steps_down(self, api, fake_model):
        async def depth_of(**policy) -> dict:
            fake_model.reset()
            fake_model.script({"stage": "critique", "response": PASS})
            body = {"profile": "medical", "depth": "auto", "max_rounds": 1, **policy}
            run = await wait_for(api, await start(api, task="Paracetamol dose?", policy=body))
            assert run["policy"]["latency_budget_s"] == policy.get("latency_budget_s")
            return run["rounds"][0]["critique"]

        # medical is high-risk: auto is L3 (its budget 180 s) unless the caller cannot wait
        unhurried = await depth_of()
        assert (unhurried["depth"], unhurried["requested_depth"]) == ("L3", "auto")
        hurried = await depth_of(latency_budget_s=100)  # L2's 0.5 s fits, L3's 180 s not
        assert (hurried["depth"], hurried["requested_depth"]) == ("L2", "auto")
        assert hurried["degraded"] is False
        [call] = [c for c in fake_model.requests() if c["stage"] == "critique"]
        assert "Depth L2, evidence" in call["body"]["system"]
        rushed = await depth_of(latency_budget_s=0.1)  # nothing fits: L1 at least
        assert rushed["depth"] == "L1"

    async def test_the_budget_does_not_change_a_fixed_depth(self, api, fake_model):
        fake_model.script({"stage": "critique", "response": PASS})
        policy = {"profile": "medical", "depth": "L3", "latency_budget_s": 1, "max_rounds": 1}
        run = await wait_for(api, await start(api, task="Paracetamol dose?", policy=policy))
        assert run["rounds"][0]["critique"]["depth"] == "L3"

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            (0, "greater than 0"),
            (-5, "greater than 0"),
            (3601, "less than or equal to 3600"),
            ("soon", "valid number"),
        ],
    )
    async def test_a_budget_out_of_bounds_is_a_422_naming_it(self, api, fake_model, value, message):
        response = await api.post(
            "/v1/runs", json={"task": "Explain tides.", "policy": {"latency_budget_s": value}}
        )
        assert response.status_code == 422, response.text
        [error] = response.json()["detail"]
        assert error["loc"][-1] == "latency_budget_s"
        assert message in error["msg"]
        assert (await api.get("/v1/runs")).json()["items"] == []

    async def test_the_boundary_3600_is_accepted(self, api):
        response = await api.post(
            "/v1/runs", json={"task": "Explain tides.", "policy": {"latency_budget_s": 3600}}
        )
        assert response.status_code == 201, response.text
        run = (await api.get(f"/v1/runs/{response.json()['id']}")).json()
        assert run["policy"]["latency_budget_s"] == 3600
