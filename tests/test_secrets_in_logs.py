"""A full draft and critique with keys set, logged at DEBUG: no key or token in any line."""

import io
import logging

import pytest

from actor.app import create_app as create_actor
from critic.app import create_app as create_critic
from shared.logging import configure_logging
from tests.support.apps import serving
from tests.support.factories import ANTHROPIC_KEY, OPENAI_KEY, actor_settings, critic_settings


@pytest.fixture
def captured_logs():
    stream = io.StringIO()
    yield stream
    logging.getLogger().handlers = []


async def test_logs_of_a_full_draft_and_critique_hold_no_secret(
    fake_model, service_token, captured_logs
):
    actor_cfg = actor_settings(fake=fake_model, token=service_token)
    critic_cfg = critic_settings(fake=fake_model, token=service_token)
    configure_logging(
        "test", level="DEBUG", json=True, secrets=actor_cfg.secrets(), stream=captured_logs
    )
    fake_model.faults({"status": 429, "retry_after": 0.01})  # a retry path gets logged too
    async with (
        serving(create_actor(actor_cfg), service_token) as actor,
        serving(create_critic(critic_cfg), service_token) as critic,
    ):
        draft = await actor.post(
            "/v1/draft", json={"task": "Write primes_up_to(n).", "kind": "code"}
        )
        assert draft.status_code == 200
        critique = await critic.post(
            "/v1/critique",
            json={
                "task": "Write primes_up_to(n).",
                "kind": "code",
                "output": draft.json()["output"],
            },
        )
        assert critique.status_code == 200
        rejected = await actor.post(
            "/v1/draft", json={"task": "x"}, headers={"Authorization": f"Bearer {OPENAI_KEY}"}
        )
        assert rejected.status_code == 401

    logs = captured_logs.getvalue()
    # The capture saw the whole exchange, SDK debug output included ...
    assert '"event": "request"' in logs
    assert "model call failed" in logs
    assert '"logger": "openai' in logs
    assert '"logger": "anthropic' in logs
    # ... and nothing secret.
    for secret in (OPENAI_KEY, ANTHROPIC_KEY, service_token, "TESTKEY"):
        assert secret not in logs
