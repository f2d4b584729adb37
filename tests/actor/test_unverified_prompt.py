"""A revision told which research queries failed must say what could not be verified; the
list is bounded on the wire."""

import pytest

from actor.app import create_app
from shared.contracts import MAX_REASON_CHARS, MAX_UNVERIFIED
from tests.support.apps import serving
from tests.support.factories import actor_settings
from tests.support.fakemodel import user_text

FAILED = {"query": "Golden Gate Bridge toll today", "reason": "tavily answered HTTP 502"}


@pytest.fixture(autouse=True)
def _own_replay_store(monkeypatch, tmp_path):
    monkeypatch.setenv("ACTOR_REPLAY_DB", str(tmp_path / "actor-replays.sqlite"))
    monkeypatch.delenv("REDIS_URL", raising=False)


@pytest.fixture
async def actor(fake_model, service_token):
    settings = actor_settings(fake=fake_model, token=service_token)
    async with serving(create_app(settings), service_token) as client:
        yield client


def revise(**extra) -> dict:
    return {
        "task": "What does crossing the Golden Gate Bridge cost?",
        "previous_output": "The toll is $9.",
        "reflections": [{"source": "critic", "content": "Check the toll."}],
        **extra,
    }


async def test_failed_queries_come_with_the_rule(actor, fake_model):
    response = await actor.post("/v1/revise", json=revise(unverified=[FAILED]))
    assert response.status_code == 200, response.text
    text = user_text(fake_model.requests()[0])
    section = text.split("<unverified>")[1].split("</unverified>")[0]
    assert "- Golden Gate Bridge toll today (why: tavily answered HTTP 502)" in section
    rules = text.split("How to revise:")[1]
    assert "Say what could not be verified" in rules
    assert "as verified fact" in rules


async def test_none_failed_no_section_and_no_rule(actor, fake_model):
    await actor.post("/v1/revise", json=revise())
    text = user_text(fake_model.requests()[0])
    assert "<unverified>" not in text
    assert "could not be verified" not in text


@pytest.mark.parametrize(
    ("unverified", "field"),
    [
        ([FAILED] * (MAX_UNVERIFIED + 1), "unverified"),
        ([{**FAILED, "reason": "x" * (MAX_REASON_CHARS + 1)}], "reason"),
        ([{**FAILED, "query": "q" * 501}], "query"),
        ([{"query": "no reason"}], "reason"),
    ],
)
async def test_the_list_is_bounded(actor, fake_model, unverified, field):
    response = await actor.post("/v1/revise", json=revise(unverified=unverified))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][-1] == field
    assert fake_model.requests() == []
