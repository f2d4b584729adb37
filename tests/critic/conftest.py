"""A Critic served in-process, talking to the real fake model server through the SDK."""

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import pytest

from critic.app import create_app
from tests.support.apps import serving
from tests.support.factories import critic_settings

JUSTIFICATION = (
    "Every requirement of the task is answered in the output; the figures agree with the task "
    "and with each other, and no claim lacks support."
)


def scripted(**overrides: Any) -> dict[str, Any]:
    """A scripted critique; one without issues states ``no_error_found`` with a justification."""
    body: dict[str, Any] = {
        "verdict": "revise",
        "confidence": 0.8,
        "issues": [],
        "reflection": "Tighten the argument.",
        "error_class": "logic",
        **overrides,
    }
    if not body["issues"]:
        body.setdefault("no_error_found", True)
        body.setdefault("justification", JUSTIFICATION)
    return body


def issue(**overrides: Any) -> dict[str, Any]:
    return {
        "dimension": "accuracy",
        "severity": "critical",
        "quote": None,
        "suggestion": "Fix it.",
        "error_type": "other",
        "evidence_source": "task",
        **overrides,
    }


@pytest.fixture(autouse=True)
def _own_replay_store(monkeypatch, tmp_path):
    monkeypatch.setenv("CRITIC_REPLAY_DB", str(tmp_path / "critic-replays.sqlite"))
    monkeypatch.delenv("REDIS_URL", raising=False)


@pytest.fixture
def critic_with(
    fake_model, service_token
) -> Callable[..., AbstractAsyncContextManager[httpx.AsyncClient]]:
    """``async with critic_with(l2_budget_s=0.5) as client``: a Critic with those settings."""

    def start(**overrides: Any) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        settings = critic_settings(fake=fake_model, token=service_token, **overrides)
        return serving(create_app(settings), service_token)

    return start


@pytest.fixture
async def critic(critic_with) -> AsyncIterator[httpx.AsyncClient]:
    async with critic_with() as client:
        yield client
