"""The orchestrator's code evaluator against a sandbox that is down, slow, refusing or
answering junk: through ``shared.sandbox.client`` over the orchestrator's pooled ``Peer``, and
through whole runs. Environment failures are retried and never cost a round; a refusal is
final. (A sandbox that works: tests/sandbox/test_conformance.py.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from orchestrator.evaluators.base import EvaluationJob, PythonTestsEvaluator
from orchestrator.peers.errors import PeerRejected, PeerUnavailable
from orchestrator.peers.http import Peer, peer_clients
from sandbox.fake import make_result
from shared.contracts import ErrorClass
from shared.sandbox.client import SandboxClient
from shared.sandbox.schemas import ExecutionStatus
from tests.orchestrator.conftest import start, wait_for
from tests.orchestrator.test_budgets import events_of
from tests.support.apps import uvicorn_serving
from tests.support.servers import free_port

TOKEN = "test-service-token-0123456789"
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
JOB = EvaluationJob("code", "def add(a, b):\n    return a + b\n", CHECK, "add", None)
PASSED = make_result(status=ExecutionStatus.passed).model_dump(mode="json")
ENVIRONMENT = make_result(
    status=ExecutionStatus.error,
    message="sandbox unavailable: no sandbox came free in 120 s",
    error_class=ErrorClass.environment,
).model_dump(mode="json")

Handler = Callable[[httpx.Request], httpx.Response]


@asynccontextmanager
async def evaluator_on(
    url: str = "http://sandbox", transport: httpx.AsyncBaseTransport | None = None
) -> AsyncIterator[PythonTestsEvaluator]:
    peer = Peer("sandbox", peer_clients(url, TOKEN, 0.5, transport))
    try:
        yield PythonTestsEvaluator(SandboxClient(peer))
    finally:
        await peer.aclose()


async def evaluate_with(handler: Handler, job: EvaluationJob = JOB) -> None:
    async with evaluator_on(transport=httpx.MockTransport(handler)) as evaluator:
        await evaluator.evaluate(job, key="run-1:1:evaluator")


class TestTheRequest:
    async def test_it_sends_the_job_as_before_with_its_key(self) -> None:
        seen: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, json=PASSED)

        await evaluate_with(record)
        [request] = seen
        assert request.url.path == "/v1/execute"
        assert request.headers["Idempotency-Key"] == "run-1:1:evaluator"
        assert json.loads(request.content) == {
            "code": JOB.output,
            "tests": CHECK,
            "entry_point": "add",
            "timeout_s": 10.0,
        }

    async def test_an_entry_point_the_sandbox_cannot_call_is_refused_unsent(self) -> None:
        seen: list[httpx.Request] = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(request)
            return httpx.Response(200, json=PASSED)

        unicode_name = EvaluationJob("code", "def añadir(a, b): ...", CHECK, "añadir", None)
        with pytest.raises(PeerRejected, match="entry_point") as refused:
            await evaluate_with(record, unicode_name)
        assert (refused.value.status, seen) == (422, [])


class TestFailures:
    @pytest.mark.parametrize("status", [429, 500, 502, 503])
    async def test_a_transient_status_is_retried(self, status: int) -> None:
        with pytest.raises(PeerUnavailable) as failed:
            await evaluate_with(lambda _: httpx.Response(status, json={"error": "Busy"}))
        assert failed.value.status == status

    @pytest.mark.parametrize("status", [400, 401, 413, 422])
    async def test_a_refusal_is_final(self, status: int) -> None:
        body = {"error": "ValidationError", "detail": "timeout_s too large"}
        with pytest.raises(PeerRejected, match="timeout_s too large") as refused:
            await evaluate_with(lambda _: httpx.Response(status, json=body))
        assert (refused.value.status, refused.value.error) == (status, "ValidationError")

    async def test_a_sandbox_that_cannot_run_the_job_is_retried(self) -> None:
        with pytest.raises(PeerUnavailable, match="no sandbox came free in 120 s"):
            await evaluate_with(lambda _: httpx.Response(200, json=ENVIRONMENT))

    @pytest.mark.parametrize(
        ("body", "says"),
        [
            (b"<html>502 Bad Gateway</html>", "not JSON"),
            (b'{"ok": true}', "field error(s), first status: Field required"),
            (b'["passed"]', "first (root)"),
        ],
    )
    async def test_a_malformed_body_is_retried_and_says_so(self, body: bytes, says: str) -> None:
        with pytest.raises(PeerUnavailable, match="malformed body on /v1/execute") as failed:
            await evaluate_with(lambda _: httpx.Response(200, content=body))
        assert says in str(failed.value)

    async def test_a_sandbox_that_is_down_is_unreachable(self) -> None:
        async with evaluator_on(f"http://127.0.0.1:{free_port()}") as evaluator:
            with pytest.raises(PeerUnavailable, match="unreachable") as failed:
                await evaluator.evaluate(JOB, key="k")
        assert failed.value.status is None

    async def test_a_sandbox_slower_than_the_timeout_times_out(self) -> None:
        async def slow(scope, receive, send) -> None:
            if scope["type"] == "http":
                await asyncio.sleep(5)

        async with uvicorn_serving(slow) as url, evaluator_on(url) as evaluator:
            with pytest.raises(PeerUnavailable, match="timed out"):
                await evaluator.evaluate(JOB, key="k")


CODE_RUN = {"task": "Write add(a, b).", "kind": "code", "tests": CHECK, "entry_point": "add"}
STOPPED_BY_ENVIRONMENT = ("escalated", "environment", "environment")


async def code_run(api: httpx.AsyncClient) -> dict[str, Any]:
    """A code run with tests, once it has stopped."""
    return await wait_for(api, await start(api, **CODE_RUN))


@pytest.mark.sqlite_only
class TestARunWhoseSandboxAnswersJunk:
    @pytest.fixture
    def sandbox_url(self) -> str:
        return "http://sandbox.test"

    @pytest.fixture
    def calls(self) -> list[httpx.Request]:
        return []

    @pytest.fixture
    async def peers(self, peers, calls):
        def junk(request: httpx.Request) -> httpx.Response:
            calls.append(request)
            return httpx.Response(200, content=b"<html>upgrading</html>")

        return {**peers, "sandbox": httpx.MockTransport(junk)}

    async def test_it_escalates_as_environment_after_the_retries(self, api, calls) -> None:
        run = await code_run(api)
        assert (run["status"], run["stop_reason"], run["error_class"]) == STOPPED_BY_ENVIRONMENT
        assert "sandbox answered a malformed body on /v1/execute: not JSON" in run["detail"]
        assert len(calls) == 3  # peer_max_attempts
        retries = await events_of(api, run["id"], "peer.retry")
        assert [(r["peer"], r["attempt"]) for r in retries] == [("sandbox", 2), ("sandbox", 3)]
        assert all(r["evaluation"] is None for r in run["rounds"])  # no round was judged


@pytest.mark.sqlite_only
class TestARunWhoseSandboxIsDown:
    @pytest.fixture
    def sandbox_url(self) -> str:
        return f"http://127.0.0.1:{free_port()}"

    async def test_it_escalates_as_environment(self, api) -> None:
        run = await code_run(api)
        assert (run["status"], run["stop_reason"], run["error_class"]) == STOPPED_BY_ENVIRONMENT
        assert "sandbox unreachable on /v1/execute" in run["detail"]
