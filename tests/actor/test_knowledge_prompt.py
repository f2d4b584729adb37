"""The Actor shows the knowledge it is given as guidance, lessons from reviewers first; an
older client sending plain `lessons` still gets them into the prompt."""

import pytest

from actor.app import create_app
from tests.support.apps import serving
from tests.support.factories import actor_settings
from tests.support.fakemodel import user_text

TASK = "Explain how the Moon causes ocean tides."
ANCHOR = {
    "id": "tides.moon",
    "kind": "rule_anchor",
    "title": "Tides follow the Moon",
    "body": "Two tides a day: the Moon's gravity and the Earth's rotation.",
}
LESSON = {"id": "les_1", "kind": "lesson", "title": "Neap", "body": "Mention neap tides."}


@pytest.fixture(autouse=True)
def _own_replay_store(monkeypatch, tmp_path):
    monkeypatch.setenv("ACTOR_REPLAY_DB", str(tmp_path / "actor-replays.sqlite"))
    monkeypatch.delenv("REDIS_URL", raising=False)


@pytest.fixture
async def actor(fake_model, service_token):
    app = create_app(actor_settings(fake=fake_model, token=service_token))
    async with serving(app, service_token) as client:
        yield client


async def test_draft_and_revise_show_knowledge_with_lessons_first(actor, fake_model):
    draft = await actor.post("/v1/draft", json={"task": TASK, "knowledge": [ANCHOR, LESSON]})
    assert draft.status_code == 200, draft.text
    revise = await actor.post(
        "/v1/revise",
        json={
            "task": TASK,
            "previous_output": "The Moon pulls the sea.",
            "reflections": [{"source": "critic", "content": "Say why there are two tides."}],
            "knowledge": [ANCHOR, LESSON],
        },
    )
    assert revise.status_code == 200, revise.text
    for call in fake_model.requests():
        text = user_text(call)
        block = text[text.index("<knowledge>") : text.index("</knowledge>")]
        assert block.index("[lesson from a reviewer] Mention neap tides.") < block.index(
            "[rule_anchor] Tides follow the Moon: Two tides a day"
        )
        assert "<lessons>" not in text


async def test_plain_lessons_from_older_clients_still_reach_the_prompt(actor, fake_model):
    response = await actor.post("/v1/draft", json={"task": TASK, "lessons": ["Cite NOAA."]})
    assert response.status_code == 200, response.text
    [call] = fake_model.requests()
    text = user_text(call)
    assert "<lessons>" in text
    assert "- Cite NOAA." in text
    assert "<knowledge>" not in text


async def test_an_unknown_knowledge_kind_is_a_422(actor):
    response = await actor.post(
        "/v1/draft", json={"task": TASK, "knowledge": [{**ANCHOR, "kind": "rumour"}]}
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:2] == ["body", "knowledge"]
