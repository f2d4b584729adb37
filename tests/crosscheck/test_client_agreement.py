"""The sync and async clients agree: the same scripted server answers give the same value, or
the same exception with the same message and fields, and the server sees the same requests,
from :class:`Crosscheck` and :class:`AsyncCrosscheck`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from crosscheck import _core
from crosscheck import client as client_module
from crosscheck.client import (
    ApiError,
    AsyncCrosscheck,
    BadRequest,
    Conflict,
    Crosscheck,
    CrosscheckError,
    NeedHumanIntervention,
    NotFound,
    RunFailed,
    RunTimeout,
    ServerError,
    Unauthorized,
    UpstreamError,
    UpstreamUnavailable,
    ValidationFailed,
)
from shared.orchestration import ReviewSummary, RunCreated, RunPublic
from tests.support.servers import free_port

TOKEN = "cc_agreement-token-0123456789abcdef"
CONSOLE = "http://console.test:9000"
KEY = "same-run"
SKY = "Explain why the sky is blue."
WHEN = "2026-01-02T03:04:05Z"

Answer = Callable[[], httpx.Response]


def run_json(
    *,
    run_id: str = "run_1",
    status: str = "succeeded",
    stop_reason: str | None = None,
    detail: str | None = None,
) -> dict[str, Any]:
    return {
        "id": run_id,
        "status": status,
        "kind": "text",
        "task": SKY,
        "evaluator": "none",
        "policy": {},
        "stop_reason": stop_reason,
        "detail": detail,
        "final_output": "Rayleigh scattering." if status == "succeeded" else None,
        "created_at": WHEN,
        "updated_at": WHEN,
        "rounds": [],
    }


def review_json(review_id: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": review_id,
        "run_id": "run_1",
        "round": 1,
        "kind": "escalation",
        "status": status,
        "task": SKY,
        "created_at": WHEN,
        **extra,
    }


def reply(status: int = 200, body: Any = None, *, text: str = "", **headers: str) -> Answer:
    def answer() -> httpx.Response:
        if body is None:
            return httpx.Response(status, text=text, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return answer


def held(run: dict[str, Any]) -> Answer:
    """A create answer after the server held the request (``Prefer: wait`` applied)."""
    return reply(200, run, **{"Preference-Applied": "wait"})


def error(status: int, name: str, detail: Any) -> Answer:
    return reply(status, {"error": name, "detail": detail})


def broken(kind: type[httpx.TransportError]) -> Answer:
    def answer() -> httpx.Response:
        raise kind("scripted transport failure")

    return answer


class ScriptedServer:
    """Answers each ``"METHOD /path"`` in order, the last one again and again; anything else is
    the server's 404. Records what it was sent."""

    def __init__(self, script: dict[str, list[Answer]]) -> None:
        self._script = {route: list(answers) for route, answers in script.items()}
        self.seen: list[tuple[str, str, tuple[tuple[str, str], ...], bytes]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        headers = tuple(sorted(request.headers.items()))
        self.seen.append((request.method, str(request.url), headers, request.read()))
        answers = self._script.get(f"{request.method} {request.url.path}")
        if not answers:
            return httpx.Response(404, json={"error": "NotFound", "detail": "no such route"})
        return answers.pop(0)() if len(answers) > 1 else answers[0]()


@dataclass(frozen=True)
class Call:
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def call(method: str, *args: Any, **kwargs: Any) -> Call:
    return Call(method, args, kwargs)


@dataclass(frozen=True)
class Outcome:
    """What a user of either client sees: the type, then the value or the error's message and
    fields (and what it was raised from); ``requests`` is what the server saw."""

    kind: type
    seen: Any
    requests: list[Any]


def returned(value: Any, requests: list[Any]) -> Outcome:
    if isinstance(value, list):
        return Outcome(list, [(type(v), v.model_dump()) for v in value], requests)
    assert isinstance(value, BaseModel)
    return Outcome(type(value), value.model_dump(), requests)


def raised(exc: Exception, requests: list[Any]) -> Outcome:
    cause = type(exc.__cause__) if exc.__cause__ else None
    return Outcome(type(exc), (str(exc), vars(exc), cause), requests)


def sync_outcome(url: str, script: dict[str, list[Answer]], what: Call) -> Outcome:
    server = ScriptedServer(script)
    transport = httpx.MockTransport(server)
    with Crosscheck(url, TOKEN, console_url=CONSOLE, transport=transport) as cc:
        try:
            value = getattr(cc, what.method)(*what.args, **what.kwargs)
        except Exception as exc:
            return raised(exc, server.seen)
    return returned(value, server.seen)


async def async_outcome(url: str, script: dict[str, list[Answer]], what: Call) -> Outcome:
    server = ScriptedServer(script)
    transport = httpx.MockTransport(server)
    async with AsyncCrosscheck(url, TOKEN, console_url=CONSOLE, transport=transport) as cc:
        try:
            value = await getattr(cc, what.method)(*what.args, **what.kwargs)
        except Exception as exc:
            return raised(exc, server.seen)
    return returned(value, server.seen)


@pytest.fixture
def url() -> str:
    """Nothing listens here: a websocket is refused at once, so ``wait`` polls."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def agree(url, monkeypatch):
    """Run one call on both clients against the same script; they must agree. Returns the
    (shared) outcome for the test's own expectations."""
    monkeypatch.setattr(_core, "WAIT_POLL_S", 0.01)

    def both(script: dict[str, list[Answer]], what: Call, *, polls: bool = False) -> Outcome:
        sync = sync_outcome(url, script, what)
        in_asyncio = asyncio.run(async_outcome(url, script, what))
        if polls:  # how often a poll fits before a deadline is the clock's: compare which
            assert replace(in_asyncio, requests=[]) == replace(sync, requests=[])
            assert dict.fromkeys(in_asyncio.requests) == dict.fromkeys(sync.requests)
        else:
            assert in_asyncio == sync
        return sync

    return both


def routes(outcome: Outcome) -> list[str]:
    return [f"{method} {target.split('?')[0]}" for method, target, _, _ in outcome.requests]


class TestValues:
    def test_run_returns_the_run_the_server_held(self, agree, url):
        outcome = agree(
            {"POST /v1/runs": [held(run_json())]},
            call("run", SKY, policy={"max_rounds": 2}, idempotency_key=KEY, timeout=30.5),
        )
        assert outcome.kind is RunPublic
        assert outcome.seen["final_output"] == "Rayleigh scattering."
        ((method, target, headers, body),) = outcome.requests
        assert (method, target) == ("POST", f"{url}/v1/runs")
        assert ("idempotency-key", KEY) in headers
        assert ("prefer", "wait=30") in headers
        assert ("authorization", f"Bearer {TOKEN}") in headers
        assert json.loads(body) == {"task": SKY, "kind": "text", "policy": {"max_rounds": 2}}

    def test_run_without_prefer_wait_follows_the_run(self, agree, url):
        outcome = agree(
            {
                "POST /v1/runs": [reply(202, {"id": "run_1", "status": "queued"})],
                "GET /v1/runs/run_1": [
                    reply(200, run_json(status="drafting")),
                    reply(200, run_json()),
                ],
            },
            call("run", SKY, idempotency_key=KEY, timeout=30),
        )
        assert (outcome.kind, outcome.seen["status"]) == (RunPublic, "succeeded")
        assert routes(outcome) == [
            f"POST {url}/v1/runs",
            f"GET {url}/v1/runs/run_1",
            f"GET {url}/v1/runs/run_1",
        ]

    def test_run_without_waiting_returns_id_and_status(self, agree):
        outcome = agree(
            {"POST /v1/runs": [reply(202, {"id": "run_1", "status": "queued"})]},
            call("run", SKY, wait=False, idempotency_key=KEY),
        )
        assert outcome.kind is RunCreated
        assert outcome.seen == {"id": "run_1", "status": "queued"}
        headers = dict(outcome.requests[0][2])
        assert "prefer" not in headers

    def test_get_cancel_and_reviews(self, agree):
        script = {
            "GET /v1/runs/run_1": [reply(200, run_json())],
            "POST /v1/runs/run_1/cancel": [reply(202, {"id": "run_1", "status": "cancelled"})],
            "GET /v1/reviews": [reply(200, {"items": [review_json("rev_1", "pending")]})],
        }
        assert agree(script, call("get", "run_1")).kind is RunPublic
        assert agree(script, call("cancel", "run_1")).seen["status"] == "cancelled"
        reviews = agree(script, call("reviews", run_id="run_1", status="pending", limit=5))
        assert reviews.seen[0][0] is ReviewSummary
        assert reviews.requests[0][1].endswith("/v1/reviews?limit=5&run_id=run_1&status=pending")


class TestOutcomes:
    def test_an_escalated_run_names_the_open_review(self, agree):
        context = {"task": SKY, "stop_reason": "max_rounds"}
        outcome = agree(
            {
                "POST /v1/runs": [held(run_json(status="escalated", stop_reason="max_rounds"))],
                "GET /v1/reviews": [
                    reply(
                        200,
                        {
                            "items": [
                                review_json("rev_2", "resolved"),
                                review_json("rev_1", "pending"),
                            ]
                        },
                    )
                ],
                "GET /v1/reviews/rev_1": [
                    reply(200, review_json("rev_1", "pending", context=context))
                ],
            },
            call("run", SKY, idempotency_key=KEY, timeout=30),
        )
        assert outcome.kind is NeedHumanIntervention
        message, fields, _ = outcome.seen
        assert fields["review_id"] == "rev_1"
        assert fields["console_url"] == f"{CONSOLE}/review?review=rev_1"
        assert fields["context"] == context
        assert "escalated (max_rounds)" in message

    def test_a_failed_run_raises_run_failed(self, agree):
        failed = run_json(status="failed", stop_reason="internal_error", detail="the sandbox broke")
        outcome = agree(
            {"GET /v1/runs/run_1": [reply(200, failed)]}, call("wait", "run_1", timeout=5)
        )
        assert outcome.kind is RunFailed
        assert outcome.seen[0] == "run run_1 failed (internal_error): the sandbox broke"

    def test_a_run_that_does_not_end_times_out(self, agree):
        outcome = agree(
            {"GET /v1/runs/run_1": [reply(200, run_json(status="drafting"))]},
            call("wait", "run_1", timeout=0.2),
            polls=True,
        )
        assert outcome.kind is RunTimeout
        message, fields, _ = outcome.seen
        assert message == "run run_1 did not end within 0.2 s (still drafting)"
        assert (fields["timeout"], fields["last_status"]) == (0.2, "drafting")
        assert len(outcome.requests) > 2  # it polled until the deadline

    def test_the_websocket_wakes_a_wait_and_is_closed(self, agree, monkeypatch):
        finished = json.dumps(
            {"seq": 3, "run_id": "run_1", "type": "run.finished", "data": {}, "created_at": WHEN}
        )
        sockets: list[Any] = []

        class Socket:
            def __init__(self, url: str) -> None:
                self.url, self.messages, self.closed = url, [finished], False
                sockets.append(self)

            def next(self) -> str:
                if not self.messages:
                    raise TimeoutError
                return self.messages.pop(0)

        class SyncSocket(Socket):
            def recv(self, timeout: float) -> str:
                return self.next()

            def close(self) -> None:
                self.closed = True

        class AsyncSocket(Socket):
            async def recv(self) -> str:
                return self.next()

            async def close(self) -> None:
                self.closed = True

        async def async_connect(url: str, **options: Any) -> AsyncSocket:
            return AsyncSocket(url)

        monkeypatch.setattr(client_module, "ws_connect", lambda url, **options: SyncSocket(url))
        monkeypatch.setattr(client_module, "async_ws_connect", async_connect)
        outcome = agree(
            {
                "GET /v1/runs/run_1": [
                    reply(200, run_json(status="drafting")),
                    reply(200, run_json()),
                ]
            },
            call("wait", "run_1", timeout=30),
        )
        assert outcome.kind is RunPublic
        assert len(outcome.requests) == 2
        assert [type(s) for s in sockets] == [SyncSocket, AsyncSocket]
        assert all(s.closed and s.url.endswith("/v1/events?run_id=run_1&since=0") for s in sockets)


class TestApiErrors:
    @pytest.mark.parametrize(
        ("status", "answer", "expected"),
        [
            (400, error(400, "BadRequest", "bad cursor"), BadRequest),
            (401, error(401, "Unauthorized", "invalid or revoked token"), Unauthorized),
            (404, error(404, "NotFound", "run run_1 does not exist"), NotFound),
            (409, error(409, "Conflict", "key reused with another body"), Conflict),
            (
                422,
                error(422, "ValidationError", [{"loc": ["body", "task"], "msg": "too short"}]),
                ValidationFailed,
            ),
            (500, reply(500, text="Internal Server Error"), ServerError),
            (502, error(502, "UpstreamError", "the model provider said no"), UpstreamError),
            (503, error(503, "UpstreamUnavailable", "sandbox unreachable"), UpstreamUnavailable),
        ],
    )
    @pytest.mark.parametrize("method", ["run", "get"])
    def test_an_error_answer_is_the_same_typed_error(self, agree, method, status, answer, expected):
        what = (
            call("run", SKY, idempotency_key=KEY, timeout=30)
            if method == "run"
            else call("get", "run_1")
        )
        outcome = agree({"POST /v1/runs": [answer], "GET /v1/runs/run_1": [answer]}, what)
        assert outcome.kind is expected
        assert issubclass(outcome.kind, ApiError)
        message, fields, _ = outcome.seen
        assert fields["status_code"] == status
        assert message.startswith(f"{fields['error']} (HTTP {status}): ")
        assert TOKEN not in message
        assert len(outcome.requests) == 1  # an answer, even a 5xx, is not retried


class TestTransport:
    def test_an_unreachable_server_is_not_retried(self, agree, url):
        outcome = agree({"GET /v1/runs/run_1": [broken(httpx.ConnectError)]}, call("get", "run_1"))
        assert outcome.kind is CrosscheckError
        message, _, cause = outcome.seen
        assert message == f"cannot reach the orchestrator at {url}: is `crosscheck up` running?"
        assert cause is httpx.ConnectError
        assert len(outcome.requests) == 1

    def test_a_dropped_answer_is_retried_once(self, agree):
        outcome = agree(
            {"GET /v1/runs/run_1": [broken(httpx.ReadTimeout), reply(200, run_json())]},
            call("get", "run_1"),
        )
        assert outcome.kind is RunPublic
        assert len(outcome.requests) == 2

    def test_a_create_is_retried_twice_with_one_key_then_fails(self, agree, url):
        outcome = agree(
            {"POST /v1/runs": [broken(httpx.ReadTimeout)]},
            call("run", SKY, idempotency_key=KEY, timeout=30),
        )
        assert outcome.kind is CrosscheckError
        assert outcome.seen[0].startswith(f"the orchestrator at {url} did not answer: ReadTimeout")
        assert len(outcome.requests) == 3
        assert {dict(headers)["idempotency-key"] for _, _, headers, _ in outcome.requests} == {KEY}
