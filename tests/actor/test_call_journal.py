"""An Actor killed while its model call is in flight: the retry (same Idempotency-Key)
counts the prompt the dead process had sent, once, in the usage the run is billed for."""

import asyncio

import pytest

from actor.app import create_app
from tests.support.apps import serving
from tests.support.factories import actor_settings

KEY = "run_1:0:actor:1"
TASK = "Say why the sky is blue in one sentence."
ANSWER = {"output": "Rayleigh scattering favours short wavelengths.", "uncertainties": []}


@pytest.fixture(autouse=True)
def _own_replay_store(monkeypatch, tmp_path):
    monkeypatch.setenv("ACTOR_REPLAY_DB", str(tmp_path / "actor-replays.sqlite"))
    monkeypatch.delenv("REDIS_URL", raising=False)


async def stopped_mid_call(fake_model, service_token, body: dict) -> None:
    """Start the Actor, send the keyed draft, stop the Actor while the model hangs."""
    settings = actor_settings(fake=fake_model, token=service_token)
    async with serving(create_app(settings), service_token) as actor:
        pending = asyncio.create_task(
            actor.post("/v1/draft", json=body, headers={"Idempotency-Key": KEY})
        )
        deadline = asyncio.get_running_loop().time() + 60
        while not fake_model.requests():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        # leaving the block stops the app: its running draft is cancelled mid-call
    pending.cancel()
    await asyncio.gather(pending, return_exceptions=True)


class TestKilledMidDraft:
    async def test_the_retry_counts_the_cut_off_prompt_once(self, fake_model, service_token):
        body = {"task": TASK, "kind": "text"}
        fake_model.script(
            {"stage": "draft", "response": ANSWER, "fault": {"delay_s": 120}},  # hangs
            {"stage": "draft", "response": ANSWER},
            {"stage": "draft", "response": ANSWER},
        )
        await stopped_mid_call(fake_model, service_token, body)
        settings = actor_settings(fake=fake_model, token=service_token)
        async with serving(create_app(settings), service_token) as restarted:
            retried = await restarted.post("/v1/draft", json=body, headers={"Idempotency-Key": KEY})
            again = await restarted.post("/v1/draft", json=body, headers={"Idempotency-Key": KEY})
        assert retried.status_code == 200, retried.text
        usage = retried.json()["usage"]
        answered = [r["response"]["usage"] for r in fake_model.requests() if r["response"]]
        assert len(answered) == 1  # the hung call never answered; the retry's did
        assert usage["cut_off_calls"] == 1
        assert usage["input_tokens"] > answered[0]["prompt_tokens"]  # plus the cut-off prompt
        assert usage["output_tokens"] == answered[0]["completion_tokens"]
        assert again.json()["usage"] == usage  # replayed, not counted a second time
        assert len(fake_model.requests()) == 2

    async def test_without_a_key_nothing_is_journalled(self, fake_model, service_token):
        fake_model.script({"stage": "draft", "response": ANSWER})
        settings = actor_settings(fake=fake_model, token=service_token)
        async with serving(create_app(settings), service_token) as actor:
            reply = await actor.post("/v1/draft", json={"task": TASK, "kind": "text"})
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["cut_off_calls"] == 0
