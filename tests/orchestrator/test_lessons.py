"""Lessons: a reviewer's comment kept for similar tasks is a knowledge entry of kind `lesson`
that reaches their Actor prompts; `/v1/lessons` is a view over those entries."""

from tests.orchestrator.conftest import mint, start, wait_for
from tests.orchestrator.test_decisions import FINAL, claimed_by_reviewer, decide
from tests.support.fakemodel import user_text

TIDES = "Explain how the Moon causes ocean tides."
SIMILAR = "Explain ocean tides and the Moon to a child."
UNRELATED = "Summarise the French revolution."


async def teach(api, comment: str, scope: str = "global") -> dict:
    run_id = await start(api, task=TIDES, policy={"review": "first_round"})
    await wait_for(api, run_id)
    [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
    headers = await claimed_by_reviewer(api, item)
    response = await decide(
        api, item, headers, action="comment", comment=comment, lesson=True, lesson_scope=scope
    )
    assert response.status_code == 200, response.text
    await wait_for(api, run_id, statuses=FINAL)
    [lesson] = (await api.get("/v1/lessons")).json()
    return lesson


def draft_prompt(fake_model, task: str) -> str:
    return next(
        user_text(c)
        for c in fake_model.requests()
        if c["stage"] == "draft" and task in user_text(c)
    )


class TestLessons:
    async def test_a_lesson_reaches_similar_tasks_and_the_run_records_it(self, api, fake_model):
        lesson = await teach(api, "Always mention the spring and neap tides.")
        run_id = await start(api, task=SIMILAR, policy={"max_rounds": 1})
        run = await wait_for(api, run_id)
        assert run["lessons_used"] == [lesson["id"]]
        prompt = draft_prompt(fake_model, SIMILAR)
        assert "<knowledge>" in prompt
        assert "[lesson from a reviewer] Always mention the spring and neap tides." in prompt
        [after] = (await api.get("/v1/lessons")).json()
        assert after["uses"] == 1

    async def test_unrelated_tasks_get_no_lessons(self, api, fake_model):
        await teach(api, "Always mention the spring and neap tides.")
        run_id = await start(api, task=UNRELATED, policy={"max_rounds": 1})
        run = await wait_for(api, run_id)
        assert run["lessons_used"] == []
        assert "<knowledge>" not in draft_prompt(fake_model, UNRELATED)

    async def test_tag_scoped_lessons_apply_only_to_runs_with_the_tag(self, api):
        lesson = await teach(api, "Cite NOAA for tide data.", scope="oceanography")
        untagged = await start(api, task=SIMILAR, policy={"max_rounds": 1})
        tagged = await start(api, task=SIMILAR, tags=["oceanography"], policy={"max_rounds": 1})
        assert (await wait_for(api, untagged))["lessons_used"] == []
        assert (await wait_for(api, tagged))["lessons_used"] == [lesson["id"]]

    async def test_retired_lessons_are_not_offered(self, api):
        lesson = await teach(api, "Always mention the spring and neap tides.")
        headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        retired = await api.post(f"/v1/lessons/{lesson['id']}/retire", headers=headers)
        assert retired.json()["retired"] is True
        run_id = await start(api, task=SIMILAR, policy={"max_rounds": 1})
        assert (await wait_for(api, run_id))["lessons_used"] == []
        assert (await api.get("/v1/lessons")).json() == []

    async def test_a_lesson_needs_a_comment(self, api):
        run_id = await start(api, task=TIDES, policy={"review": "first_round"})
        await wait_for(api, run_id)
        [item] = (await api.get("/v1/reviews", params={"run_id": run_id})).json()["items"]
        headers = await claimed_by_reviewer(api, item)
        response = await decide(api, item, headers, action="approve", lesson=True)
        assert response.status_code == 422


class TestLessonsAreKnowledge:
    async def test_lessons_keep_their_shape_and_are_lesson_entries(self, api):
        lesson = await teach(api, "Always mention the spring and neap tides.", scope="oceanography")
        assert set(lesson) == {
            "id",
            "content",
            "scope",
            "author",
            "source_run_id",
            "owner",
            "shared",
            "uses",
            "retired",
            "created_at",
        }
        assert (lesson["content"], lesson["scope"], lesson["uses"], lesson["retired"]) == (
            "Always mention the spring and neap tides.",
            "oceanography",
            0,
            False,
        )
        assert lesson["source_run_id"]
        assert lesson["author"]
        [entry] = (await api.get("/v1/knowledge", params={"kind": "lesson"})).json()
        assert (entry["id"], entry["kind"], entry["pack"]) == (lesson["id"], "lesson", "review")
        assert (entry["title"], entry["body"]) == (lesson["content"], lesson["content"])
        assert (entry["scope"], entry["source_run_id"]) == ("oceanography", lesson["source_run_id"])
        scoped = await api.get("/v1/lessons", params={"scope": "oceanography"})
        assert [x["id"] for x in scoped.json()] == [lesson["id"]]
        assert (await api.get("/v1/lessons", params={"scope": "global"})).json() == []

    async def test_only_lessons_are_retired_through_the_lessons_api(self, api):
        anchor = (
            await api.post(
                "/v1/knowledge",
                json={"kind": "rule_anchor", "title": "Tides", "body": "Two a day."},
            )
        ).json()
        headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}
        response = await api.post(f"/v1/lessons/{anchor['id']}/retire", headers=headers)
        assert response.status_code == 404
        assert f"lesson {anchor['id']} does not exist" in response.text
        assert (await api.get("/v1/lessons")).json() == []
        assert (await api.get(f"/v1/knowledge/{anchor['id']}")).json()["retired"] is False
