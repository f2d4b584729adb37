"""Turn what came back from a sandbox into the ``ExecuteResult`` a caller sees."""

from __future__ import annotations

import signal
from typing import Any

from sandbox.worker import RawOutcome
from shared.contracts import ErrorClass
from shared.sandbox.schemas import (
    ExecuteRequest,
    ExecuteResult,
    ExecutionStatus,
    IsolationMode,
    LimitKind,
    TestKind,
    TestOutcome,
    TestStatus,
)

SIGNAL_HINTS: dict[int, str] = {
    signal.SIGSEGV: "segmentation fault (a C-level crash, or a stack overflow from deep recursion)",
    signal.SIGBUS: "bus error (a C-level crash)",
    signal.SIGABRT: "aborted",
    signal.SIGKILL: "killed (out of memory or a process limit)",
    signal.SIGFPE: "arithmetic fault",
    signal.SIGILL: "illegal instruction",
}
MEMORY_EXIT = 71
MAX_TESTS = 500  # as many as the harness lists; a forged report cannot make more
DONE_STATUSES = {"passed", "failed", "error"}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tests_from_records(
    records: list[dict[str, Any]], unfinished: TestStatus
) -> list[dict[str, Any]]:
    """The report the harness streamed before it was stopped: plan, then begin/end updates."""
    tests: dict[str, dict[str, Any]] = {}
    for record in records:
        kind = record.get("t")
        if kind == "plan":
            for test in record.get("tests", []):
                if isinstance(test, dict) and "id" in test:
                    tests[str(test["id"])] = dict(test)
        elif kind == "begin" and record.get("id") in tests:
            tests[str(record["id"])]["status"] = "running"
        elif kind == "end" and record.get("id") in tests:
            test = tests[str(record["id"])]
            test["status"] = record.get("status", "error")
            if record.get("message"):
                test["message"] = record["message"]
    for test in tests.values():
        if test.get("status") == "running":
            test["status"] = unfinished.value
    listed = list(tests.values())
    if any(t.get("kind") == "assert" for t in listed):  # as the harness reports when it ends
        listed = [t for t in listed if t.get("kind") not in ("check", "module")]
    return listed


def _outcomes(raw_tests: list[dict[str, Any]]) -> list[TestOutcome]:
    outcomes = []
    for test in raw_tests[:MAX_TESTS]:
        try:
            status = TestStatus(test.get("status", "error"))
        except ValueError:
            status = TestStatus.error
        try:
            kind = TestKind(test.get("kind", "function"))
        except ValueError:
            kind = TestKind.function
        outcomes.append(
            TestOutcome(
                id=str(test.get("id", ""))[:200],
                name=str(test.get("name", ""))[:300],
                kind=kind,
                status=status,
                message=str(test.get("message") or "")[:2000],
                line=test.get("line") if isinstance(test.get("line"), int) else None,
                source=str(test["source"])[:300] if test.get("source") else None,
                runs=int(test.get("runs") or 0),
                failures=int(test.get("failures") or 0),
                duration_ms=float(test.get("duration_ms") or 0.0),
            )
        )
    return outcomes


def _first_failure(tests: list[TestOutcome]) -> TestOutcome | None:
    for test in tests:
        if test.status in (TestStatus.failed, TestStatus.error, TestStatus.timeout):
            return test
    return None


def interpret(raw: RawOutcome, request: ExecuteRequest, isolation: IsolationMode) -> ExecuteResult:
    exited = raw.exited or {}
    done = next((r for r in reversed(raw.records) if r.get("t") == "done"), None)
    limit: LimitKind | None = None
    signal_name: str | None = None
    exit_code = exited.get("exit_code")
    number = exited.get("signal")
    error_class = ErrorClass.logic

    if raw.worker_error:
        status, error_class = ExecutionStatus.error, ErrorClass.environment
        message = f"sandbox failure: {raw.worker_error}"
    elif exited.get("outcome") == "timeout":
        status, limit = ExecutionStatus.timeout, LimitKind.wall_time
        message = f"timed out after {request.timeout_s:g} s"
    elif exited.get("outcome") == "killed":
        status, limit = ExecutionStatus.killed, LimitKind.output
        if exited.get("reason") == "results":
            message = "killed: the job flooded the test-result channel"
        else:
            message = "killed: the job wrote more output than the sandbox allows"
    elif isinstance(number, int):
        signal_name = _signal_name(number)
        if number == signal.SIGXCPU:
            status, limit = ExecutionStatus.timeout, LimitKind.cpu_time
            message = "killed by SIGXCPU: CPU time limit reached"
        elif number == signal.SIGXFSZ:
            status, limit = ExecutionStatus.killed, LimitKind.file_size
            message = "killed by SIGXFSZ: file size limit reached"
        else:
            status = ExecutionStatus.killed
            hint = SIGNAL_HINTS.get(number)
            message = f"killed by {signal_name}" + (f": {hint}" if hint else "")
    elif done is not None:
        reported = done.get("status")
        status = ExecutionStatus(reported) if reported in DONE_STATUSES else ExecutionStatus.error
        message = str(done.get("message") or "")
        if done.get("memory_error"):
            limit = LimitKind.memory
    elif exit_code == MEMORY_EXIT:
        status, limit = ExecutionStatus.killed, LimitKind.memory
        message = f"ran out of memory (memory_mb={request.memory_mb})"
    else:
        status = ExecutionStatus.error
        message = (
            f"the process exited with code {exit_code} before the tests finished "
            "(did the code call exit() or os._exit()?)"
        )

    if done is not None and status not in (ExecutionStatus.timeout, ExecutionStatus.killed):
        raw_tests = [t for t in done.get("tests", []) if isinstance(t, dict)]
    else:
        unfinished = TestStatus.timeout if status is ExecutionStatus.timeout else TestStatus.killed
        if status is ExecutionStatus.error:
            unfinished = TestStatus.error
        raw_tests = _tests_from_records(raw.records, unfinished)
    tests = _outcomes(raw_tests)
    passed = sum(1 for t in tests if t.status is TestStatus.passed)
    failed = sum(
        1
        for t in tests
        if t.status in (TestStatus.failed, TestStatus.error, TestStatus.timeout, TestStatus.killed)
    )
    if status is ExecutionStatus.passed:
        error_class = ErrorClass.none
        message = f"all {passed} tests passed" if tests else "the code ran without error"
    elif status is ExecutionStatus.failed:
        first = _first_failure(tests)
        message = f"{failed} of {len(tests)} tests failed" + (
            f"; first: {first.name}: {first.message}" if first is not None else ""
        )
    elif status is ExecutionStatus.timeout:
        running = [t for t in tests if t.status is TestStatus.timeout]
        if running:
            message += f" (while running {running[0].name})"
    if isolation is IsolationMode.weak:
        message += " [weak isolation]"

    return ExecuteResult(
        status=status,
        error_class=error_class,
        message=message[:4000],
        tests=tests,
        tests_passed=passed,
        tests_failed=failed,
        tests_total=len(tests),
        stdout=raw.stdout.decode("utf-8", errors="replace"),
        stderr=raw.stderr.decode("utf-8", errors="replace"),
        stdout_truncated=raw.stdout_total > len(raw.stdout),
        stderr_truncated=raw.stderr_total > len(raw.stderr),
        duration_ms=round(raw.duration_ms, 3),
        cpu_s=exited.get("cpu_s") if isinstance(exited.get("cpu_s"), int | float) else None,
        limit=limit,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        signal=signal_name,
        isolation=isolation,
        job_id=request.job_id,
    )


def environment_failure(
    request: ExecuteRequest, isolation: IsolationMode, detail: str
) -> ExecuteResult:
    message = f"sandbox unavailable: {detail}"
    if isolation is IsolationMode.weak:
        message += " [weak isolation]"
    return ExecuteResult(
        status=ExecutionStatus.error,
        error_class=ErrorClass.environment,
        message=message[:4000],
        isolation=isolation,
        job_id=request.job_id,
    )
