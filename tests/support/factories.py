"""Keyword-only factories for service settings wired to the fake model server."""

from __future__ import annotations

from typing import Any

from actor.settings import ActorSettings
from critic.settings import CriticSettings
from tests.support.fakemodel import FakeModel

OPENAI_KEY = "sk-proj-TESTKEY-openai-abcdefghijklmnop"
ANTHROPIC_KEY = "sk-ant-api03-TESTKEY-anthropic-abcdefghijklmnop"


def provider_env(fake: FakeModel) -> dict[str, Any]:
    return {
        "openai_api_key": OPENAI_KEY,
        "openai_base_url": fake.openai_base_url,
        "anthropic_api_key": ANTHROPIC_KEY,
        "anthropic_base_url": fake.anthropic_base_url,
        "retry_initial_s": 0.01,
        "retry_max_wait_s": 0.05,
    }


def actor_settings(*, fake: FakeModel, token: str, **overrides: Any) -> ActorSettings:
    return ActorSettings(service_token=token, **{**provider_env(fake), **overrides})


def critic_settings(*, fake: FakeModel, token: str, **overrides: Any) -> CriticSettings:
    return CriticSettings(service_token=token, **{**provider_env(fake), **overrides})
