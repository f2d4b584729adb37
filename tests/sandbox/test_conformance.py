"""The ``CodeExecutor`` contract, run against every implementation: the in-memory fake, the
real service, and the HTTP client talking to the real app in-process."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from sandbox.app import create_app
from sandbox.client import SandboxClient
from sandbox.executor import CodeExecutor
from sandbox.fake import FakeExecutor
from sandbox.schemas import ExecuteRequest, ExecutionStatus, IsolationMode
from sandbox.service import SandboxService
from shared.errors import UpstreamError, UpstreamUnavailable
from tests.sandbox.conftest import TOKEN, require_bwrap, sandbox_settings
from tests.support.apps import serving

PASSING = ExecuteRequest(
    code="def add(a, b):\n    return a + b\n",
    tests="def check(candidate):\n    assert candidate(1, 2) == 3\n",
    entry_point="add",
    job_id="job-1",
)


@pytest.fixture(params=["fake", "service", "client"])
async def executor(request: pytest.FixtureRequest) -> AsyncIterator[CodeExecutor]:
    if request.param == "fake":
        yield FakeExecutor()
        return
    require_bwrap()
    settings = sandbox_settings(workers=1)
    if request.param == "service":
        service = await SandboxService.start(settings)
        try:
            yield service
        finally:
            await service.close()
        return
    async with serving(create_app(settings), TOKEN) as http:
        yield SandboxClient(http, TOKEN)


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


async def test_the_app_serves_a_fake_executor_for_other_services_tests() -> None:
    fake = FakeExecutor()
    app = create_app(sandbox_settings(), executor=fake)
    async with serving(app, TOKEN) as http:
        result = await SandboxClient(http, TOKEN).execute(PASSING)
    assert result.status is ExecutionStatus.passed
    assert fake.requests == [PASSING]


class TestClientErrors:
    @pytest.mark.parametrize(
        ("status", "error"),
        [(503, UpstreamUnavailable), (500, UpstreamUnavailable), (422, UpstreamError)],
    )
    async def test_http_errors_become_upstream_errors(
        self, status: int, error: type[Exception]
    ) -> None:
        transport = httpx.MockTransport(lambda _: httpx.Response(status, json={"error": "x"}))
        async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as http:
            with pytest.raises(error):
                await SandboxClient(http, TOKEN).execute(PASSING)

    async def test_an_unreachable_sandbox_is_unavailable(self) -> None:
        def refuse(request: httpx.Request) -> httpx.Response:
            raise httpx.ConnectError("connection refused", request=request)

        transport = httpx.MockTransport(refuse)
        async with httpx.AsyncClient(transport=transport, base_url="http://sandbox") as http:
            with pytest.raises(UpstreamUnavailable):
                await SandboxClient(http, TOKEN).execute(PASSING)
