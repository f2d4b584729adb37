"""`request_review` through the `mcp` package's own client: a text goes before a person (a
reviewer deciding over the HTTP API with their own token) and the tool returns what they
decided and what shipped (a real Orchestrator, the Actor and Critic on the fake model)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from tests.crosscheck.test_mcp_server import mcp_over_http, structured
from tests.orchestrator.conftest import ADMIN_TOKEN, mint

GIVEN = "Tides happen because the Moon pulls on the sea, twice a day on every coast."
TASK = "A sentence on tides for a children's encyclopedia."
POINT = "Mention the Sun as well."

Decide = Callable[[dict[str, Any]], Awaitable[None]]


async def open_item(api, timeout: float = 30.0) -> dict[str, Any]:
    """The review item the tool's run opened, once it is there."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        items = (await api.get("/v1/reviews", params={"status": "pending"})).json()["items"]
        if items:
            return dict(items[0])
        await asyncio.sleep(0.1)
    raise AssertionError("no review item opened")


@asynccontextmanager
async def reviewer(api) -> AsyncIterator[Decide]:
    """Decide the open item as a reviewer would: claim it, then post the decision."""
    headers = {"Authorization": f"Bearer {await mint(api, 'reviewer')}"}

    async def decide(body: dict[str, Any]) -> None:
        item = await open_item(api)
        claimed = await api.post(f"/v1/reviews/{item['id']}/claim", headers=headers)
        assert claimed.status_code == 200, claimed.text
        decided = await api.post(f"/v1/reviews/{item['id']}/decision", json=body, headers=headers)
        assert decided.status_code == 200, decided.text

    yield decide


async def review_with(url: str, api, arguments: dict[str, Any], decision: dict[str, Any]) -> Any:
    """Call request_review and, while it waits, have a reviewer decide; the tool's result."""
    async with mcp_over_http(url, ADMIN_TOKEN) as client, reviewer(api) as decide:
        call = asyncio.create_task(client.call_tool("request_review", arguments))
        await decide(decision)
        return structured(await asyncio.wait_for(call, timeout=60))


async def test_an_approved_text_ships_as_given(url, api, fake_model):
    result = await review_with(
        url, api, {"text": GIVEN, "task": TASK, "wait_s": 60}, {"action": "approve"}
    )
    assert (result["outcome"], result["decision"]) == ("approved", "approve")
    assert (result["output"], result["shipped_by"]) == (GIVEN, "person")
    assert result["decided_by"] == "reviewer for tests"
    assert fake_model.requests() == []  # no model wrote or judged it
    run = (await api.get(f"/v1/runs/{result['run_id']}")).json()
    assert (run["task"], run["final_output"], run["status"]) == (TASK, GIVEN, "succeeded")
    assert run["rounds"][0]["provenance"] == "given"


async def test_a_comment_gets_the_actors_revision_by_the_point(url, api, fake_model):
    result = await review_with(
        url, api, {"text": GIVEN, "wait_s": 60}, {"action": "comment", "comment": POINT}
    )
    assert (result["outcome"], result["decision"], result["comment"]) == (
        "revised",
        "comment",
        POINT,
    )
    assert [c["stage"] for c in fake_model.requests()] == ["revise", "critique"]
    assert f"Reviewer point applied: {POINT}" in result["output"]
    assert result["output"] != GIVEN
    assert result["shipped_by"] == "critic"


async def test_a_rejected_text_says_rejected_and_ships_nothing(url, api):
    result = await review_with(
        url,
        api,
        {"text": GIVEN, "wait_s": 60},
        {"action": "reject", "comment": "Wrong for children."},
    )
    assert (result["outcome"], result["decision"]) == ("rejected", "reject")
    assert result["comment"] == "Wrong for children."
    assert result["output"] is None
    assert "rejected" in result["message"]


async def test_critic_first_still_waits_for_the_person(url, api, fake_model):
    result = await review_with(
        url,
        api,
        {"text": GIVEN, "critic_first": True, "wait_s": 60},
        {"action": "edit", "output": GIVEN + " The Sun helps a little.", "finish": True},
    )
    assert [c["stage"] for c in fake_model.requests()] == ["critique"]
    assert result["outcome"] == "edited"
    assert result["output"] == GIVEN + " The Sun helps a little."


async def test_when_nobody_decides_in_time_it_names_the_run_and_the_item(url, api):
    async with mcp_over_http(url, ADMIN_TOKEN) as client:
        # nobody decides, so the tool waits all of wait_s: long enough for the run to reach
        # the person on a loaded machine (1 s was not: still evaluating), short for a test
        result = structured(await client.call_tool("request_review", {"text": GIVEN, "wait_s": 8}))
    assert (result["outcome"], result["status"]) == ("waiting", "awaiting_review")
    item = await open_item(api)
    assert result["review_id"] == item["id"]
    assert item["id"] in result["review_url"]
    assert "get_run" in result["message"]
    assert result["output"] is None


async def test_a_bad_text_is_refused_before_any_run_starts(url, api):
    async with mcp_over_http(url, ADMIN_TOKEN) as client:
        empty = await client.call_tool("request_review", {"text": ""})
        assert empty.is_error
        blank = await client.call_tool("request_review", {"text": "   "})
        assert blank.is_error
        assert "given_output" in str(blank.content)
        assert "blank" in str(blank.content)
    assert (await api.get("/v1/runs")).json()["items"] == []


async def test_a_decision_that_lands_between_reading_the_run_and_its_items_is_reported():
    """The tool reads the run, then its review items: a decision made in between is found
    with the run as it was before it. The result describes the run as the decision left it
    (under load this answered "failed" for an approved text)."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from crosscheck.mcp_server import _await_decision
    from shared.orchestration import ReviewStatus, ReviewSummary, RunPublic, RunStatus, ShippedBy

    fields: dict[str, Any] = {"id": "run_1", "stop_reason": None, "final_output": None}
    waiting = RunPublic.model_construct(**fields, status=RunStatus.awaiting_review)
    fields.update(final_output=GIVEN, shipped_by=ShippedBy.person, status=RunStatus.succeeded)
    shipped = RunPublic.model_construct(**fields)
    listed: dict[str, Any] = {"id": "rev_1", "created_at": datetime.now(UTC)}
    item = ReviewSummary.model_construct(**listed, status=ReviewStatus.resolved)

    class Api:  # the run read before the decision, the items after it
        runs = [waiting, shipped]

        async def get(self, run_id: str) -> RunPublic:
            return self.runs.pop(0) if len(self.runs) > 1 else self.runs[0]

        async def reviews(self, run_id: str) -> list[ReviewSummary]:
            return [item]

        async def review(self, review_id: str) -> SimpleNamespace:
            return SimpleNamespace(decision={"action": "approve", "author": "R"})

    result = await _await_decision(Api(), "run_1", 5)  # type: ignore[arg-type]
    assert (result.outcome, result.output, result.decision) == ("approved", GIVEN, "approve")
