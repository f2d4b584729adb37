"""The Actor and research: a draft gives search queries (through either provider's structured
output), and a revision given evidence is told to cite only it."""

import pytest

from actor.app import create_app
from tests.support.apps import serving
from tests.support.factories import actor_settings
from tests.support.fakemodel import user_text

EVIDENCE = {
    "n": 1,
    "url": "file:///corpus/golden-gate.md",
    "title": "Golden Gate Bridge",
    "snippet": "The Golden Gate Bridge opened to traffic on May 27, 1937.",
    "retrieved_at": "2026-12-01T00:00:00Z",
    "source": "corpus",
}


@pytest.fixture(autouse=True)
def _own_replay_store(monkeypatch, tmp_path):
    monkeypatch.setenv("ACTOR_REPLAY_DB", str(tmp_path / "actor-replays.sqlite"))
    monkeypatch.delenv("REDIS_URL", raising=False)


@pytest.fixture(params=["openai", "anthropic"])
async def actor(request, fake_model, service_token):
    settings = actor_settings(
        fake=fake_model,
        token=service_token,
        actor_provider=request.param,
        allow_same_provider=request.param == "anthropic",
    )
    async with serving(create_app(settings), service_token) as client:
        yield client


async def test_a_draft_returns_its_search_queries_tidied_and_capped(actor, fake_model):
    queries = ["Golden Gate Bridge  opening year", " ", "bridge length", "paint colour", "extra"]
    reply = {"output": "It opened in 1957.", "uncertainties": [], "search_queries": queries}
    fake_model.script({"stage": "draft", "response": reply})
    response = await actor.post("/v1/draft", json={"task": "When did the bridge open?"})
    assert response.status_code == 200, response.text
    assert response.json()["search_queries"] == [
        "Golden Gate Bridge opening year",
        "bridge length",
        "paint colour",
    ]
    call = fake_model.requests()[0]
    assert "`search_queries`" in user_text(call)
    assert "search_queries" in str(call["body"])  # in the structured-output schema


async def test_a_draft_without_queries_gives_an_empty_list(actor, fake_model):
    for n, reply in enumerate(
        (
            {"output": "Rayleigh scattering.", "uncertainties": []},  # the field left out
            {"output": "Rayleigh scattering.", "uncertainties": [], "search_queries": []},
        )
    ):
        fake_model.script({"stage": "draft", "response": reply})
        task = f"Explain why the sky is blue ({n})."
        response = await actor.post("/v1/draft", json={"task": task})
        assert response.status_code == 200, response.text
        assert response.json()["search_queries"] == []
    assert len(fake_model.requests()) == 2  # each answered by the model, not a replay


async def test_a_revision_with_evidence_is_told_to_cite_only_it(actor, fake_model):
    body = {
        "task": "When did the bridge open?",
        "previous_output": "It opened in 1957.",
        "reflections": [{"source": "critic", "content": "The year is wrong."}],
        "evidence": [EVIDENCE],
    }
    response = await actor.post("/v1/revise", json=body)
    assert response.status_code == 200, response.text
    text = user_text(fake_model.requests()[0])
    assert "[1] Golden Gate Bridge file:///corpus/golden-gate.md" in text
    assert "May 27, 1937" in text
    assert "`[n] URL`" in text
    assert "never cite a source that is not listed there" in text


async def test_a_revision_without_evidence_has_no_citation_rule(actor, fake_model):
    body = {
        "task": "When did the bridge open?",
        "previous_output": "It opened in 1957.",
        "reflections": [{"source": "critic", "content": "The year is wrong."}],
    }
    await actor.post("/v1/revise", json=body)
    text = user_text(fake_model.requests()[0])
    assert "<evidence>" not in text
    assert "never cite a source" not in text
