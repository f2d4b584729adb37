"""Fixtures for the fake model: a fresh app per test, driven through the real SDKs in-process.

Both SDKs run on ``httpx2``; the Anthropic SDK refuses a legacy ``httpx`` client, so the
in-process transport is ``httpx2.ASGITransport``. That transport has no timeouts of its own,
so it is wrapped to enforce the read timeout the SDK puts on each request, the way a
socket would.
"""

import asyncio
from collections.abc import AsyncIterator

import anthropic
import httpx2
import openai
import pytest

from fakemodel.app import create_app
from fakemodel.settings import FakeModelSettings

OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"

ACTOR_SCHEMA = {
    "type": "object",
    "properties": {
        "output": {"type": "string"},
        "uncertainties": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["output", "uncertainties"],
    "additionalProperties": False,
}

CRITIC_SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["pass", "revise", "escalate"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "issues": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "dimension": {"type": "string"},
                    "severity": {"enum": ["critical", "major", "minor"]},
                    "quote": {"type": ["string", "null"]},
                    "suggestion": {"type": "string"},
                },
                "required": ["dimension", "severity", "quote", "suggestion"],
                "additionalProperties": False,
            },
        },
        "reflection": {"type": "string"},
        "error_class": {"enum": ["logic", "hallucination", "environment", "none"]},
    },
    "required": ["verdict", "confidence", "issues", "reflection", "error_class"],
    "additionalProperties": False,
}


class TimeoutASGITransport(httpx2.AsyncBaseTransport):
    """``httpx2.ASGITransport`` that honours the request's read timeout."""

    def __init__(self, app) -> None:
        self._inner = httpx2.ASGITransport(app=app)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        read_timeout = (request.extensions.get("timeout") or {}).get("read")
        try:
            return await asyncio.wait_for(self._inner.handle_async_request(request), read_timeout)
        except TimeoutError as error:
            raise httpx2.ReadTimeout("read timed out", request=request) from error


@pytest.fixture
def settings() -> FakeModelSettings:
    return FakeModelSettings()


@pytest.fixture
def app(settings):
    return create_app(settings)


@pytest.fixture
def state(app):
    return app.state.fakemodel


@pytest.fixture
async def http(app) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(
        transport=TimeoutASGITransport(app), base_url="http://fake"
    ) as client:
        yield client


def make_openai(http: httpx2.AsyncClient, **options) -> openai.AsyncOpenAI:
    options.setdefault("max_retries", 0)
    options.setdefault("api_key", OPENAI_KEY)
    return openai.AsyncOpenAI(base_url="http://fake/v1", http_client=http, **options)


def make_anthropic(http: httpx2.AsyncClient, **options) -> anthropic.AsyncAnthropic:
    options.setdefault("max_retries", 0)
    if "auth_token" not in options:
        options.setdefault("api_key", ANTHROPIC_KEY)
    return anthropic.AsyncAnthropic(base_url="http://fake", http_client=http, **options)


@pytest.fixture
def oai(http) -> openai.AsyncOpenAI:
    return make_openai(http)


@pytest.fixture
def ant(http) -> anthropic.AsyncAnthropic:
    return make_anthropic(http)


def actor_prompt(
    task: str,
    *,
    kind: str = "text",
    entry_point: str | None = None,
    previous_output: str | None = None,
    reflections: list[str] | None = None,
) -> str:
    parts = [f"<task>\n{task}\n</task>", f"<kind>{kind}</kind>"]
    if entry_point:
        parts.append(f"<entry_point>{entry_point}</entry_point>")
    if previous_output is not None:
        parts.append(f"<previous_output>\n{previous_output}\n</previous_output>")
        lines = "\n".join(f"- {reflection}" for reflection in reflections or [])
        parts.append(f"<reflections>\n{lines}\n</reflections>")
    return "\n\n".join(parts)


def critic_prompt(task: str, candidate: str, *, kind: str = "text") -> str:
    return (
        f"<task>\n{task}\n</task>\n\n<kind>{kind}</kind>\n\n"
        f"<candidate_output>\n{candidate}\n</candidate_output>"
    )
