"""ConsoleClient against an in-process httpx transport: headers, bodies and typed errors."""

from __future__ import annotations

import json

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
