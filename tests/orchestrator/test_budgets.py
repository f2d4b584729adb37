"""Budgets that add up, and say so: one deadline per step passed down to the peers and their
model calls, a peer's own budget timeout is not retried, and every retry is an event."""

import pytest

from tests.orchestrator.conftest import start, wait_for

pytestmark = pytest.mark.sqlite_only  # the rules, not the storage


def critique_calls(fake_model) -> list[dict]:
    return [r for r in fake_model.requests() if r.get("stage") == "critique"]


async def events_of(api, run_id: str, type_: str) -> list[dict]:
    every = (await api.get("/v1/events", params={"run_id": run_id, "type": type_})).json()
    return [e["data"] for e in every]


class TestEveryRetryIsAnEvent:
    async def test_a_peer_that_keeps_failing_leaves_one_event_per_retry(self, api, fake_model):
        fake_model.faults(*[{"status": 503}] * 6)  # the Actor gives up (2 attempts) 3 times
        run_id = await start(api, task="Explain tides.")
        run = await wait_for(api, run_id)
        assert (run["status"], run["stop_reason"]) == ("escalated", "environment")
        retries = await events_of(api, run_id, "peer.retry")
        assert [(r["peer"], r["attempt"], r["attempts"]) for r in retries] == [
            ("actor", 2, 3),
            ("actor", 3, 3),
        ]
        assert all(r["status"] == 503 for r in retries)
        assert "actor answered 503 on /v1/draft" in retries[0]["reason"]

    async def test_a_run_without_failures_has_no_retry_events(self, api, fake_model):
        run_id = await start(api, task="Explain tides.")
        await wait_for(api, run_id)
        assert await events_of(api, run_id, "peer.retry") == []


async def trajectory_calls(api, run_id: str) -> list[dict]:
    return (await api.get(f"/v1/runs/{run_id}/trajectory")).json()["calls"]


class TestFailedAttemptsAreOnTheBooks:
    async def test_a_retried_peer_call_bills_the_model_attempts_that_failed(self, api, fake_model):
        fake_model.faults({"status": 503}, {"status": 503})  # the Actor's first call: 2 x 503
        run_id = await start(api, task="Explain tides.")
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", run
        actor = [c for c in await trajectory_calls(api, run_id) if c["role"] == "actor"]
        failed = [[e["status"] for e in c["exchanges"]] for c in actor]
        assert [503, 503] in failed, failed  # the failed attempt is in the trajectory
        assert (
            next(c for c in actor if c["exchanges"][0]["status"] == 503)["usage"]["attempts"] == 2
        )
        stats = (await api.get("/v1/stats")).json()
        actor_calls = sum(p["calls"] for p in stats["providers"] if p["role"] == "actor")
        assert actor_calls == len(actor)  # the failed call counts in the stats too

    async def test_a_run_that_gives_up_bills_every_failed_attempt(self, api, fake_model):
        fake_model.faults(*[{"status": 503}] * 6)
        run_id = await start(api, task="Explain tides.")
        run = await wait_for(api, run_id)
        assert run["stop_reason"] == "environment"
        actor = [c for c in await trajectory_calls(api, run_id) if c["role"] == "actor"]
        # each of the orchestrator's 3 attempts, with the Actor's 2 model attempts in each
        assert [[e["status"] for e in c["exchanges"]] for c in actor] == [[503, 503]] * 3


class TestTheRunsTotals:
    @pytest.fixture
    def peer_overrides(self):
        return {
            "actor": {"model_max_attempts": 1, "model_timeout_s": 1.0},
            "critic": {"model_max_attempts": 2},
        }

    async def test_a_call_that_failed_mid_step_stays_in_the_totals_the_step_writes(
        self, api, fake_model
    ):
        # the draft's first model call times out (billed at once by its prompt's estimated
        # tokens); the orchestrator asks again, and the step's commit then bills the draft
        # against the run it read before either call
        fake_model.faults({"delay_s": 4.0, "stage": "draft"})
        run_id = await start(api, task="Explain tides.")
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", run
        calls = await trajectory_calls(api, run_id)
        [failed] = [c for c in calls if c["usage"]["cut_off_calls"]]
        assert failed["usage"]["input_tokens"] > 0, calls
        for column in ("input_tokens", "output_tokens"):
            assert run[column] == sum(c["usage"][column] for c in calls), (column, run, calls)


class TestTheCriticsOwnBudget:
    @pytest.fixture
    def peer_overrides(self):
        return {
            "actor": {"model_max_attempts": 2},
            "critic": {"model_max_attempts": 2, "l1_budget_s": 0.5, "l2_budget_s": 0.5},
        }

    async def test_a_critique_past_its_budget_is_asked_once_and_the_run_says_why(
        self, api, fake_model
    ):
        fake_model.faults({"delay_s": 3.0, "stage": "critique"})
        run_id = await start(api, task="Explain tides.", policy={"depth": "L1"})
        run = await wait_for(api, run_id)
        assert (run["status"], run["stop_reason"]) == ("escalated", "budget_exceeded")
        assert run["error_class"] == "environment"
        assert "0.5 s budget" in run["detail"]
        # the same request was not sent again by the orchestrator (3 attempts allowed)
        assert len(critique_calls(fake_model)) == 1
        assert await events_of(api, run_id, "peer.retry") == []


class TestOneDeadlinePerStep:
    @pytest.fixture
    def orchestrator_settings(self, orchestrator_settings):
        return orchestrator_settings.model_copy(update={"step_budget_s": 3.0})

    async def test_a_slow_model_is_cut_at_the_steps_deadline_not_retried_past_it(
        self, api, fake_model
    ):
        # the answer takes 8 s: without the step's 3 s deadline passed down, the Actor would
        # wait for it (its model timeout is 60 s) and the run would go on
        fake_model.faults({"delay_s": 8.0, "stage": "draft"})
        run_id = await start(api, task="Explain tides.")
        run = await wait_for(api, run_id, timeout=60)
        assert (run["status"], run["stop_reason"]) == ("escalated", "budget_exceeded")
        assert "deadline" in run["detail"]
        drafts = [r for r in fake_model.requests() if r.get("stage") == "draft"]
        assert len(drafts) == 1
        # the cut-off call was sent: on the books by its prompt's estimated tokens
        [call] = [c for c in await trajectory_calls(api, run_id) if c["role"] == "actor"]
        assert call["usage"]["cut_off_calls"] == 1
        assert call["usage"]["input_tokens"] > 0
        assert "deadline" in call["exchanges"][0]["error"]
        assert await events_of(api, run_id, "peer.retry") == []

    async def test_a_run_well_inside_the_deadline_is_unaffected(self, api, fake_model):
        run_id = await start(api, task="Explain tides.")
        run = await wait_for(api, run_id)
        assert run["status"] == "succeeded", run
