"""``FakeExecutor``: an in-memory ``CodeExecutor`` for other services' tests. Runs nothing.

By default every job passes; give ``responder`` to script results (for example, fail until
the code contains a fix), or queue results with ``push``. Every request is recorded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from shared.contracts import ErrorClass
from shared.sandbox.schemas import (
    ExecuteRequest,
    ExecuteResult,
    ExecutionStatus,
    IsolationLayer,
    IsolationMode,
    IsolationReport,
    TestKind,
    TestOutcome,
    TestStatus,
)

Responder = Callable[[ExecuteRequest], ExecuteResult]


def make_result(
    request: ExecuteRequest | None = None,
    *,
    status: ExecutionStatus = ExecutionStatus.passed,
    message: str = "",
    tests: Sequence[TestOutcome] = (),
    stdout: str = "",
    stderr: str = "",
    error_class: ErrorClass | None = None,
) -> ExecuteResult:
    """A well-formed result with the counts and error class the real service would give."""
    if error_class is None:
        error_class = ErrorClass.none if status is ExecutionStatus.passed else ErrorClass.logic
    passed = sum(1 for t in tests if t.status is TestStatus.passed)
    failed = sum(
        1
        for t in tests
        if t.status not in (TestStatus.passed, TestStatus.skipped, TestStatus.not_run)
    )
    return ExecuteResult(
        status=status,
        error_class=error_class,
        message=message
        or (f"all {passed} tests passed" if status is ExecutionStatus.passed else status.value),
        tests=list(tests),
        tests_passed=passed,
        tests_failed=failed,
        tests_total=len(tests),
        stdout=stdout,
        stderr=stderr,
        isolation=IsolationMode.full,
        job_id=request.job_id if request is not None else None,
    )


def default_responder(request: ExecuteRequest) -> ExecuteResult:
    test = TestOutcome(
        id="fake", name="fake", kind=TestKind.function, status=TestStatus.passed, runs=1
    )
    return make_result(request, tests=[test])


class FakeExecutor:
    """Implements ``CodeExecutor`` without running any code."""

    def __init__(self, responder: Responder | None = None) -> None:
        self.responder = responder or default_responder
        self.requests: list[ExecuteRequest] = []
        self._queued: deque[ExecuteResult] = deque()

    def push(self, *results: ExecuteResult) -> None:
        """Answer the next jobs with these results, in order, before using the responder."""
        self._queued.extend(results)

    async def execute(self, request: ExecuteRequest) -> ExecuteResult:
        self.requests.append(request)
        if self._queued:
            return self._queued.popleft().model_copy(update={"job_id": request.job_id})
        return self.responder(request)

    async def execute_batch(self, requests: Sequence[ExecuteRequest]) -> list[ExecuteResult]:
        return [await self.execute(r) for r in requests]

    async def isolation(self) -> IsolationReport:
        return IsolationReport(
            mode=IsolationMode.full,
            weak_isolation_allowed=False,
            layers=[IsolationLayer(name="fake", active=True, detail="FakeExecutor runs no code")],
            selftest_passed=True,
            workers=0,
            interpreter="none",
        )
