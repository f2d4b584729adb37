"""Request and response DTOs of the sandbox API, with their limits.

A request beyond a limit is a 422 naming the field; nothing a caller sends can make a 500.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from shared.contracts import ErrorClass, WireModel

MAX_CODE_CHARS = 100_000
MAX_TESTS_CHARS = 100_000
MAX_PROMPT_CHARS = 20_000
MAX_BATCH_JOBS = 256
MIN_TIMEOUT_S = 0.1
MAX_TIMEOUT_S = 60.0
DEFAULT_TIMEOUT_S = 10.0
MIN_MEMORY_MB = 16
MAX_MEMORY_MB = 4096
DEFAULT_MEMORY_MB = 512

Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
]


class ExecutionStatus(StrEnum):
    passed = "passed"
    failed = "failed"  # the tests ran and at least one failed (or the code raised in one)
    error = "error"  # the code or tests could not be loaded, or the sandbox itself failed
    timeout = "timeout"  # the wall-clock or CPU limit ended the job
    killed = "killed"  # a signal or another limit (output, memory) ended the job


class TestStatus(StrEnum):
    __test__ = False  # not a pytest test class

    passed = "passed"
    failed = "failed"
    error = "error"
    skipped = "skipped"
    not_run = "not_run"
    timeout = "timeout"
    killed = "killed"


class TestKind(StrEnum):
    __test__ = False

    assertion = "assert"  # one assert statement of a HumanEval check or a script
    function = "function"  # one pytest-style test function or method (per parameter set)
    check = "check"  # a HumanEval check() as a whole, listed when it fails outside its asserts
    module = "module"  # a test script as a whole, listed when it raises outside its asserts


class LimitKind(StrEnum):
    wall_time = "wall_time"
    cpu_time = "cpu_time"
    memory = "memory"
    output = "output"
    file_size = "file_size"


class IsolationMode(StrEnum):
    full = "full"  # bubblewrap namespaces + seccomp + rlimits (+ pids cgroup where available)
    weak = "weak"  # no bubblewrap: only allowed with SANDBOX_ALLOW_WEAK_ISOLATION=1


class ExecuteRequest(WireModel):
    """One program and its tests. HumanEval jobs: ``prompt`` + ``code`` (the completion),
    ``tests`` defining ``check(candidate)``, and ``entry_point``."""

    code: Annotated[str, StringConstraints(max_length=MAX_CODE_CHARS)] = Field(
        description="The program (for HumanEval: the completion; the prompt goes first)."
    )
    tests: Annotated[str, StringConstraints(max_length=MAX_TESTS_CHARS)] = Field(
        default="",
        description="check(candidate), pytest-style test_* functions, or a script of asserts.",
    )
    prompt: Annotated[str, StringConstraints(max_length=MAX_PROMPT_CHARS)] = Field(
        default="", description="Prepended to code (HumanEval: the problem's prompt)."
    )
    entry_point: Identifier | None = Field(
        default=None, description="The function check(candidate) receives."
    )
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, ge=MIN_TIMEOUT_S, le=MAX_TIMEOUT_S)
    memory_mb: int = Field(
        default=DEFAULT_MEMORY_MB,
        ge=MIN_MEMORY_MB,
        le=MAX_MEMORY_MB,
        description="Address space the job may use beyond the interpreter it starts with.",
    )
    fail_fast: bool = Field(
        default=False, description="Stop at the first failing assertion or test."
    )
    job_id: Annotated[str, StringConstraints(max_length=200)] | None = Field(
        default=None, description="Echoed back in the result, for the caller's bookkeeping."
    )


class TestOutcome(WireModel):
    """One test: an assertion of a HumanEval check, or a pytest-style function."""

    __test__ = False

    id: str
    name: str
    kind: TestKind
    status: TestStatus
    message: str = ""
    line: int | None = None
    source: str | None = None
    runs: int = 0
    failures: int = 0
    duration_ms: float = 0.0


class ExecuteResult(WireModel):
    status: ExecutionStatus
    error_class: ErrorClass
    message: str = Field(description="One line a person or a reflection prompt can use.")
    tests: list[TestOutcome] = []
    tests_passed: int = 0
    tests_failed: int = 0
    tests_total: int = 0
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: float = 0.0
    cpu_s: float | None = None
    limit: LimitKind | None = None
    exit_code: int | None = None
    signal: str | None = None
    isolation: IsolationMode
    job_id: str | None = None


class BatchRequest(WireModel):
    jobs: Annotated[list[ExecuteRequest], Field(min_length=1, max_length=MAX_BATCH_JOBS)]


class BatchResult(WireModel):
    results: list[ExecuteResult]
    passed: int
    total: int
    duration_ms: float


class IsolationLayer(WireModel):
    name: str
    active: bool
    detail: str = ""


class SelfTestCheck(WireModel):
    name: str
    passed: bool
    required: bool = True
    detail: str = ""


class IsolationReport(WireModel):
    mode: IsolationMode
    weak_isolation_allowed: bool
    layers: list[IsolationLayer]
    selftest_passed: bool
    selftest: list[SelfTestCheck] = []
    workers: int
    interpreter: str
