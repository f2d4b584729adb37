"""Best of N through the API: N drafts in parallel at spread temperatures, the best kept,
every draft in the trajectory with its cost."""

import pytest

from orchestrator.engine.drafts import temperatures
from tests.orchestrator.conftest import start, wait_for
from tests.orchestrator.test_loop import TestCodeTasks, actor_reply, critique

WRONG = (
    "def primes_up_to(n):\n"
    "    return [k for k in range(2, n) if all(k % d for d in range(2, k))]  # wrong-a\n"
)
ALSO_WRONG = "def primes_up_to(n):\n    return [2, 3, 5]  # wrong-b\n"
RIGHT = (
    "def primes_up_to(n):\n"
    "    # right-one\n"
    "    return [k for k in range(2, n + 1) if all(k % d for d in range(2, k))]\n"
)
MINOR = {
    "dimension": "style",
    "severity": "minor",
    "quote": "# right-one",
    "suggestion": "Say which method this is.",
}
MAJOR = {
    "dimension": "accuracy",
    "severity": "major",
    "quote": "first-draft",
    "suggestion": "This is wrong.",
}


def stages(fake_model, stage):
    return [c for c in fake_model.requests() if c["stage"] == stage]


class TestTemperatures:
    def test_one_draft_keeps_the_actors_own_temperature(self):
        assert temperatures(1) == [None]

    def test_drafts_spread_evenly_around_the_default(self):
        assert temperatures(2) == [0.55, 0.85]
        assert temperatures(3) == [0.4, 0.7, 1.0]
        assert temperatures(5) == [0.1, 0.4, 0.7, 1.0, 1.3]


class TestBestOfN:
    @pytest.fixture
    def peer_overrides(self):
        # Spread temperatures reach only a model that takes a temperature: gpt-5-mini, the
        # default, is a reasoning model and is sent none (its drafts differ by sampling alone).
        return {
            "actor": {"model_max_attempts": 2, "draft_model": "gpt-4.1-mini"},
            "critic": {"model_max_attempts": 2},
        }

    async def test_the_draft_whose_tests_pass_is_kept_with_every_draft_billed(
        self, api, fake_model
    ):
        # the Critic likes the failing drafts better: the evaluator still decides first
        fake_model.script(
            {"stage": "draft", "temperature": 0.4, "response": actor_reply(WRONG)},
            {"stage": "draft", "temperature": 0.7, "response": actor_reply(RIGHT)},
            {"stage": "draft", "temperature": 1.0, "response": actor_reply(ALSO_WRONG)},
            {"stage": "critique", "match": "wrong-a", "response": critique("pass")},
            {"stage": "critique", "match": "wrong-b", "response": critique("pass")},
            {"stage": "critique", "match": "right-one", "response": critique(issues=[MINOR])},
        )
        run_id = await start(
            api,
            task="Write primes_up_to(n) returning every prime <= n.",
            kind="code",
            tests=TestCodeTasks.TESTS,
            entry_point="primes_up_to",
            policy={"drafts": 3, "max_rounds": 1},
        )
        run = await wait_for(api, run_id)
        first = run["rounds"][0]
        assert first["output"] == RIGHT
        assert run["final_output"] == RIGHT
        assert first["evaluation"]["passed"] is True
        drafts = first["drafts"]
        assert [d["index"] for d in drafts] == [0, 1, 2]
        assert [d["temperature"] for d in drafts] == [0.4, 0.7, 1.0]
        assert [d["output"] for d in drafts] == [WRONG, RIGHT, ALSO_WRONG]
        assert [d["passed"] for d in drafts] == [False, True, False]
        assert [d["verdict"] for d in drafts] == ["pass", "revise", "pass"]
        assert [d["chosen"] for d in drafts] == [False, True, False]
        assert drafts[1]["issues_by_severity"] == {"critical": 0, "major": 0, "minor": 1}
        # each draft's own cost, and the run billed all of them (the critique of the chosen
        # draft is round 1's critique: no second critic call)
        assert all(d["cost_usd"] > 0 for d in drafts)
        assert run["cost_usd"] == pytest.approx(sum(d["cost_usd"] for d in drafts))
        assert first["critique"]["verdict"] == "revise"
        assert len(stages(fake_model, "draft")) == 3
        assert len(stages(fake_model, "critique")) == 3
        assert sorted(c["temperature"] for c in stages(fake_model, "draft")) == [0.4, 0.7, 1.0]
        trajectory = (await api.get(f"/v1/runs/{run_id}/trajectory")).json()
        roles = sorted(c["role"] for c in trajectory["calls"])
        assert roles == ["actor"] * 3 + ["critic"] * 3
        # the failing tests of round 1's chosen draft are not there: no failure reflection
        assert not [f for f in run["reflections"] if f["source"] == "evaluator"]

    async def test_without_an_evaluator_the_critics_verdict_decides(self, api, fake_model):
        fake_model.script(
            {"stage": "draft", "temperature": 0.55, "response": actor_reply("first-draft.")},
            {"stage": "draft", "temperature": 0.85, "response": actor_reply("second-draft.")},
            {"stage": "critique", "match": "first-draft", "response": critique(issues=[MAJOR])},
            {"stage": "critique", "match": "second-draft", "response": critique("pass")},
        )
        run_id = await start(api, task="Explain tides.", policy={"drafts": 2})
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", run["detail"]
        assert run["stop_reason"] == "critic_pass"
        assert run["final_output"] == "second-draft."
        assert [d["chosen"] for d in run["rounds"][0]["drafts"]] == [False, True]
        assert [d["passed"] for d in run["rounds"][0]["drafts"]] == [None, None]
        assert len(stages(fake_model, "critique")) == 2

    async def test_ties_go_to_the_earlier_draft(self, api, fake_model):
        fake_model.script(
            {"stage": "draft", "temperature": 0.55, "response": actor_reply("first-draft.")},
            {"stage": "draft", "temperature": 0.85, "response": actor_reply("second-draft.")},
            {"stage": "critique", "response": critique("pass")},
            {"stage": "critique", "response": critique("pass")},
        )
        run_id = await start(api, task="Explain tides.", policy={"drafts": 2})
        run = await wait_for(api, run_id)
        assert run["final_output"] == "first-draft."

    async def test_one_draft_sends_exactly_one_draft_request(self, api, fake_model):
        run_id = await start(api, task="Explain tides.", policy={"drafts": 1})
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded"
        assert [c["stage"] for c in fake_model.requests()] == [
            "draft",
            "critique",
            "revise",
            "critique",
        ]
        assert all(r["drafts"] == [] for r in run["rounds"])

    @pytest.mark.sqlite_only  # a validation: the database plays no part
    @pytest.mark.parametrize("bad", [0, 6, "many"])
    async def test_drafts_out_of_range_is_422(self, api, bad):
        response = await api.post("/v1/runs", json={"task": "x", "policy": {"drafts": bad}})
        assert response.status_code == 422, response.text
        assert "drafts" in response.text
