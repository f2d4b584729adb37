"""ConsoleClient against an in-process httpx transport: headers, bodies and typed errors."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import pytest

from console.client import ApiError, ConsoleClient


def make(handler) -> ConsoleClient:
    return ConsoleClient("http://orch", "s3cret", transport=httpx.MockTransport(handler))


def test_bearer_header_and_clean_params():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["auth"] = request.headers.get("authorization")
        seen["url"] = str(request.url)
        return httpx.Response(200, json={"items": [], "next_cursor": None})

    make(handler).list_reviews(status="pending", kind=None, limit=5)
    assert seen["auth"] == "Bearer s3cret"
    assert seen["url"] == "http://orch/v1/reviews?status=pending&limit=5"
    assert "s3cret" not in repr(make(handler))


def test_decision_sends_idempotency_key_and_only_fitting_fields():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["key"] = request.headers.get("idempotency-key")
        seen["body"] = json.loads(request.content)
        body = {"review_id": "r", "run_id": "u", "action": "comment", "run_status": "revising"}
        return httpx.Response(200, json=body)

    make(handler).decide("r", action="comment", idempotency_key="k1", comment="hi", rounds=2)
    assert seen == {"key": "k1", "body": {"action": "comment", "comment": "hi"}}
    make(handler).decide("r", action="edit", idempotency_key="k2", output="new", finish=True)
    assert seen["body"] == {"action": "edit", "output": "new", "finish": True}
    make(handler).decide(
        "r", action="comment", idempotency_key="k3", comment="x", lesson=True, lesson_scope="poetry"
    )
    assert seen["body"] == {
        "action": "comment",
        "comment": "x",
        "lesson": True,
        "lesson_scope": "poetry",
    }


def test_errors_carry_the_server_detail():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"error": "Conflict", "detail": "held by bob"})

    with pytest.raises(ApiError) as info:
        make(handler).claim("r")
    assert (info.value.status, info.value.error, info.value.detail) == (
        409,
        "Conflict",
        "held by bob",
    )


def test_unreachable_server_is_an_api_error():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(ApiError) as info:
        make(handler).events(since=3)
    assert info.value.status == 0


def recorder(body) -> tuple[list[httpx.Request], object]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=body)

    return seen, handler


def test_list_runs_sends_a_trimmed_search_and_omits_a_blank_one():
    seen, handler = recorder({"items": [], "next_cursor": None})
    client = make(handler)
    client.list_runs(status="escalated", limit=50, q="  tides 100% ")
    client.list_runs(q="   ")
    assert seen[0].method == "GET"
    assert seen[0].url.path == "/v1/runs"
    assert dict(seen[0].url.params) == {"status": "escalated", "limit": "50", "q": "tides 100%"}
    assert dict(seen[1].url.params) == {}


def test_stats_sends_since_as_iso_8601():
    body = {"runs_total": 0, "providers": []}
    seen, handler = recorder(body)
    client = make(handler)
    assert client.stats() == body
    since = datetime(2025, 1, 31, 12, 30, tzinfo=UTC)
    client.stats(since=since)
    assert seen[0].url.path == "/v1/stats"
    assert dict(seen[0].url.params) == {}
    assert seen[1].url.params["since"] == "2025-01-31T12:30:00+00:00"
    assert seen[1].headers["authorization"] == "Bearer s3cret"


def test_list_lessons_filters_by_scope_and_retired():
    seen, handler = recorder([{"id": "les-1"}])
    client = make(handler)
    assert client.list_lessons() == [{"id": "les-1"}]
    client.list_lessons(scope=" poetry ", include_retired=True)
    assert seen[0].url.path == "/v1/lessons"
    assert dict(seen[0].url.params) == {}
    assert dict(seen[1].url.params) == {"scope": "poetry", "include_retired": "true"}


def test_retire_lesson_posts_and_surfaces_a_refusal():
    seen, handler = recorder({"id": "les-1", "retired": True})
    assert make(handler).retire_lesson("les-1")["retired"] is True
    assert (seen[0].method, seen[0].url.path) == ("POST", "/v1/lessons/les-1/retire")

    def forbidden(request: httpx.Request) -> httpx.Response:
        detail = "this needs the role reviewer; your token has service"
        return httpx.Response(403, json={"error": "Forbidden", "detail": detail})

    with pytest.raises(ApiError) as info:
        make(forbidden).retire_lesson("les-1")
    assert (info.value.status, info.value.error) == (403, "Forbidden")
    assert "needs the role reviewer" in info.value.detail


def test_who_am_i_asks_whose_token_it_is():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if request.headers["authorization"] == "Bearer s3cret":
            return httpx.Response(200, json={"id": "tok_1", "name": "ci", "role": "reviewer"})
        return httpx.Response(401, json={"error": "Unauthorized", "detail": "bad token"})

    assert make(handler).who_am_i() == {"id": "tok_1", "name": "ci", "role": "reviewer"}
    assert seen == ["/v1/auth/me"]
    refused = ConsoleClient("http://orch", "wrong", transport=httpx.MockTransport(handler))
    with pytest.raises(ApiError) as info:
        refused.who_am_i()
    assert (info.value.status, info.value.detail) == (401, "bad token")


def test_a_read_on_a_connection_the_server_closed_is_sent_again_a_write_is_not():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if len(calls) == 1 or request.method == "POST":
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, json={"items": [], "next_cursor": None})

    client = make(handler)
    assert client.list_reviews() == {"items": [], "next_cursor": None}
    assert calls == ["GET", "GET"]
    with pytest.raises(ApiError):
        client.login("ana", "pw")
    assert calls[2:] == ["POST"]


def test_knowledge_calls_send_what_the_api_reads():
    seen, handler = recorder([])
    client = make(handler)
    client.list_knowledge()
    client.list_knowledge(kind="lesson", profile=" legal ", include_retired=True, limit=50)
    client.search_knowledge("cite the statute", profile="legal")
    client.create_knowledge(kind="rule_anchor", title="T", body="B")
    client.update_knowledge("kn_1", retired=False)
    client.retire_knowledge("kn_1")
    assert [(r.method, r.url.path) for r in seen] == [
        ("GET", "/v1/knowledge"),
        ("GET", "/v1/knowledge"),
        ("GET", "/v1/knowledge/search"),
        ("POST", "/v1/knowledge"),
        ("PATCH", "/v1/knowledge/kn_1"),
        ("DELETE", "/v1/knowledge/kn_1"),
    ]
    assert dict(seen[0].url.params) == {}
    assert dict(seen[1].url.params) == {
        "kind": "lesson",
        "profile": "legal",
        "include_retired": "true",
        "limit": "50",
    }
    assert dict(seen[2].url.params) == {"q": "cite the statute", "profile": "legal"}
    assert json.loads(seen[3].content) == {
        "kind": "rule_anchor",
        "title": "T",
        "body": "B",
        "profiles": [],
        "weight": 1.0,
    }
    assert json.loads(seen[4].content) == {"retired": False}


def test_a_validation_error_names_its_field_even_one_called_body():
    def handler(request: httpx.Request) -> httpx.Response:
        detail = [
            {"loc": ["body", "body"], "msg": "String should have at least 1 character"},
            {"loc": ["body", "title"], "msg": "Field required"},
            {"loc": ["body"], "msg": "Value error, send at least one field to change"},
        ]
        return httpx.Response(422, json={"error": "ValidationError", "detail": detail})

    with pytest.raises(ApiError) as info:
        make(handler).create_knowledge(kind="lesson", title="", body="")
    assert info.value.detail == (
        "body: String should have at least 1 character; title: Field required; "
        "Value error, send at least one field to change"
    )


def test_latest_evaluation_is_none_until_one_is_published():
    answers = [
        httpx.Response(404, json={"error": "NotFound", "detail": "no evaluation yet"}),
        httpx.Response(200, json={"id": "eval_1", "modes": []}),
        httpx.Response(403, json={"error": "Forbidden", "detail": "needs a reviewer"}),
    ]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[len(seen) - 1]

    client = make(handler)
    assert client.latest_evaluation() is None
    assert client.latest_evaluation() == {"id": "eval_1", "modes": []}
    with pytest.raises(ApiError) as info:
        client.latest_evaluation()
    assert (info.value.status, info.value.detail) == (403, "needs a reviewer")
    assert {r.url.path for r in seen} == {"/v1/evaluations/latest"}
    # the loop's evaluation: the Critic's intercept results have a tab of their own
    assert {r.url.params.get("exclude") for r in seen} == {"intercept"}


def test_the_intercept_history_is_the_intercept_dataset_newest_first():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=[{"id": "eval_2"}, {"id": "eval_1"}])

    assert make(handler).intercept_history(limit=30) == [{"id": "eval_2"}, {"id": "eval_1"}]
    [request] = seen
    assert request.url.path == "/v1/evaluations"
    assert dict(request.url.params) == {"dataset": "intercept", "limit": "30"}
