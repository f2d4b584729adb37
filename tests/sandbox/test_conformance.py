"""The sandbox's contracts, each run against the real sandbox and the in-memory fake.

``CodeExecutor``: the service class and ``FakeExecutor`` directly. Over HTTP: the sandbox's
app (serving the real pool, or the fake as other services' tests use it) reached the way
production reaches it: ``shared.sandbox.client.SandboxClient`` over the orchestrator's pooled
``Peer``, behind its code evaluator."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from orchestrator.evaluators.base import EvaluationJob, PythonTestsEvaluator
from orchestrator.peers.errors import PeerRejected
from orchestrator.peers.http import Peer, peer_clients
from sandbox.app import create_app
from sandbox.executor import CodeExecutor
from sandbox.fake import FakeExecutor, make_result
from sandbox.service import SandboxService
from shared.sandbox.client import SandboxClient
from shared.sandbox.schemas import (
    ExecuteRequest,
    ExecuteResult,
    ExecutionStatus,
    IsolationMode,
    TestKind,
    TestOutcome,
    TestStatus,
)
from tests.sandbox.conftest import TOKEN, require_bwrap, sandbox_settings

RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n"
PASSING = ExecuteRequest(code=RIGHT, tests=CHECK, entry_point="add", job_id="job-1")


def adds(request: ExecuteRequest) -> ExecuteResult:
    """The fake, scripted as the real sandbox answers ``CHECK``: it runs nothing."""
    right = "a + b" in request.code
    test = TestOutcome(
        id="L2",
        name="check:2",
        kind=TestKind.assertion,
        status=TestStatus.passed if right else TestStatus.failed,
        message="" if right else "assert candidate(1, 2) == 3: left was -1, right was 3",
        runs=1,
        failures=0 if right else 1,
    )
    status = ExecutionStatus.passed if right else ExecutionStatus.failed
    return make_result(request, status=status, tests=[test])


@pytest.fixture(params=["fake", "service"])
async def executor(request: pytest.FixtureRequest) -> AsyncIterator[CodeExecutor]:
    if request.param == "fake":
        yield FakeExecutor()
        return
    require_bwrap()
    service = await SandboxService.start(sandbox_settings(workers=1))
    try:
        yield service
    finally:
        await service.close()


class TestCodeExecutorContract:
    async def test_a_passing_job_passes_and_echoes_its_id(self, executor: CodeExecutor) -> None:
        result = await executor.execute(PASSING)
        assert result.status is ExecutionStatus.passed
        assert result.error_class.value == "none"
        assert result.job_id == "job-1"
        assert result.tests_total == len(result.tests) >= 1
        assert result.tests_passed == result.tests_total

    async def test_a_batch_keeps_length_and_order(self, executor: CodeExecutor) -> None:
        jobs = [PASSING.model_copy(update={"job_id": f"job-{i}"}) for i in range(5)]
        results = await executor.execute_batch(jobs)
        assert [r.job_id for r in results] == [f"job-{i}" for i in range(5)]

    async def test_the_isolation_report_names_its_mode(self, executor: CodeExecutor) -> None:
        report = await executor.isolation()
        assert report.mode in set(IsolationMode)
        assert report.layers
        assert report.selftest_passed is True


@asynccontextmanager
async def client_of(
    transport: httpx.AsyncBaseTransport, token: str = TOKEN
) -> AsyncIterator[SandboxClient]:
    """The sandbox's client over the orchestrator's pooled ``Peer``, as its app builds it."""
    peer = Peer("sandbox", peer_clients("http://sandbox", token, 30.0, transport))
    try:
        yield SandboxClient(peer)
    finally:
        await peer.aclose()


@pytest.fixture(params=["fake", "sandbox"])
async def sandbox_app(request: pytest.FixtureRequest) -> AsyncIterator[httpx.ASGITransport]:
    """The sandbox's app, in-process: serving the scripted fake, or the real pool."""
    if request.param == "fake":
        app = create_app(sandbox_settings(), executor=FakeExecutor(adds))
    else:
        require_bwrap()
        app = create_app(sandbox_settings(workers=1))
    async with app.router.lifespan_context(app):
        yield httpx.ASGITransport(app=app)


@pytest.fixture
async def sandbox(sandbox_app: httpx.ASGITransport) -> AsyncIterator[SandboxClient]:
    async with client_of(sandbox_app) as client:
        yield client


def code_job(output: str) -> EvaluationJob:
    return EvaluationJob("code", output, CHECK, "add", None)


class TestOverHttp:
    """What the orchestrator relies on, through what it runs in production."""

    async def test_a_passing_job_passes_and_echoes_its_id(self, sandbox: SandboxClient) -> None:
        result = await sandbox.execute(PASSING, key="k-1")
        assert (result.status, result.error_class.value) == (ExecutionStatus.passed, "none")
        assert result.job_id == "job-1"
        assert result.tests_passed == result.tests_total == len(result.tests) == 1

    async def test_right_code_passes_its_evaluation(self, sandbox: SandboxClient) -> None:
        evaluator = PythonTestsEvaluator(sandbox)
        evaluation = await evaluator.evaluate(code_job(RIGHT), key="k-2")
        assert evaluation.passed is True
        assert evaluation.summary == "all 1 test(s) passed"
        assert [(t["name"], t["status"]) for t in evaluation.details["tests"]] == [
            ("check:2", "passed")
        ]

    async def test_wrong_code_fails_naming_the_assertion(self, sandbox: SandboxClient) -> None:
        evaluator = PythonTestsEvaluator(sandbox)
        evaluation = await evaluator.evaluate(code_job(WRONG), key="k-3")
        assert evaluation.passed is False
        head, *lines = evaluation.summary.splitlines()
        assert head == "failed: 0/1 test(s) passed"
        assert "check:2: failed assert candidate(1, 2) == 3: left was -1, right was 3" in lines
        assert evaluation.details["status"] == "failed"

    async def test_a_wrong_token_is_refused_for_good(
        self, sandbox_app: httpx.ASGITransport
    ) -> None:
        async with client_of(sandbox_app, token="not-the-service-token-0123456789") as intruder:
            with pytest.raises(PeerRejected) as refused:
                await intruder.execute(PASSING, key="k-4")
        assert refused.value.status == 401


async def test_the_app_serves_a_fake_executor_for_other_services_tests() -> None:
    fake = FakeExecutor()
    app = create_app(sandbox_settings(), executor=fake)
    async with app.router.lifespan_context(app), client_of(httpx.ASGITransport(app=app)) as client:
        result = await client.execute(PASSING, key="k-5")
    assert result.status is ExecutionStatus.passed
    assert fake.requests == [PASSING]
