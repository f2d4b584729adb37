"""Fixtures every test shares: a clean environment, so no developer setting leaks in."""

import os

import pytest

ISOLATED_PREFIXES = (
    "OPENAI_",
    "ANTHROPIC_",
    "ACTOR_",
    "CRITIC_",
    "SANDBOX_",
    "FAKEMODEL_",
    "CROSSCHECK_",
)

SERVICE_TOKEN = "test-service-token-0123456789"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith(ISOLATED_PREFIXES):
            monkeypatch.delenv(name)


@pytest.fixture
def service_token() -> str:
    return SERVICE_TOKEN
