"""One interface for every evaluator, and the ones that need no peer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import ValidationError

from orchestrator.evaluators.pool import SchemaPool, SchemaTimeout, SchemaUnusable
from orchestrator.peers.errors import PeerRejected
from orchestrator.peers.http import SandboxPeer
from shared.sandbox.client import EXECUTE, invalid_fields
from shared.sandbox.schemas import ExecuteRequest, ExecutionStatus, TestStatus


@dataclass
class EvaluationResult:
    passed: bool
    summary: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "summary": self.summary, **self.details}


@dataclass(frozen=True)
class EvaluationJob:
    kind: str
    output: str
    tests: str | None
    entry_point: str | None
    json_schema: dict[str, Any] | None
    owner: str = ""  # who created the run: evaluations share workers fairly between owners


class Evaluator(Protocol):
    name: str

    async def evaluate(self, job: EvaluationJob, *, key: str) -> EvaluationResult: ...


class JsonSchemaEvaluator:
    """The output must be JSON that validates against the run's schema (in a worker process,
    bounded in time and memory: see ``evaluators.pool``)."""

    name = "json_schema"

    def __init__(self, pool: SchemaPool) -> None:
        self.pool = pool

    async def evaluate(self, job: EvaluationJob, *, key: str) -> EvaluationResult:
        try:
            document = json.loads(job.output)
        except json.JSONDecodeError as exc:
            return EvaluationResult(
                False, f"the output is not JSON: {exc.msg} at line {exc.lineno}"
            )
        try:
            evaluated = await self.pool.evaluate(job.owner, job.json_schema or {}, document)
        except SchemaTimeout as exc:
            return EvaluationResult(False, str(exc), {"timed_out": True})
        except SchemaUnusable as exc:
            return EvaluationResult(False, str(exc))
        if not evaluated.count:
            return EvaluationResult(True, "the output is valid against the schema")
        listed = "; ".join(
            f"{'/'.join(str(p) for p in path) or '(root)'}: {message}"
            for path, message in evaluated.violations[:10]
        )
        return EvaluationResult(
            False,
            f"{evaluated.count} schema violation(s): {listed}",
            {"errors": evaluated.count},
        )


class PythonTestsEvaluator:
    """Runs the output against the run's tests in the sandbox service."""

    name = "python_tests"

    def __init__(self, sandbox: SandboxPeer, *, timeout_s: float = 10.0) -> None:
        self.sandbox = sandbox
        self.timeout_s = timeout_s

    async def evaluate(self, job: EvaluationJob, *, key: str) -> EvaluationResult:
        result = await self.sandbox.execute(self._request(job, key), key=key)
        failed = [
            t for t in result.tests if t.status not in (TestStatus.passed, TestStatus.skipped)
        ]
        ran = [t for t in result.tests if t.status is not TestStatus.skipped]
        passed = result.status is ExecutionStatus.passed
        if passed:
            summary = f"all {len(ran)} test(s) passed"
        else:
            lines = [f"{t.name}: {t.status.value} {t.message}".strip() for t in failed[:10]]
            if result.message:
                lines.insert(0, result.message[:500])
            head = f"{result.status.value}: {len(ran) - len(failed)}/{len(ran)} test(s) passed"
            stderr = result.stderr.strip()
            summary = "\n".join([head, *lines] + ([f"stderr: {stderr[-1500:]}"] if stderr else []))
        return EvaluationResult(
            passed,
            summary,
            {
                "status": result.status.value,
                "tests": [t.model_dump(mode="json") for t in result.tests],
                "stdout": result.stdout[-4000:],
                "stderr": result.stderr[-4000:],
                "duration_ms": result.duration_ms,
            },
        )

    def _request(self, job: EvaluationJob, key: str) -> ExecuteRequest:
        """The job as the sandbox takes it; one it would refuse (an entry point it cannot
        call) is refused here as the sandbox would: a 422, final for the run."""
        fields: dict[str, Any] = {
            "code": job.output,
            "tests": job.tests or "",
            "timeout_s": self.timeout_s,
        }
        if job.entry_point:
            fields["entry_point"] = job.entry_point
        try:
            return ExecuteRequest.model_validate(fields)
        except ValidationError as exc:
            raise PeerRejected(
                f"sandbox refuses the job: {invalid_fields(exc)}",
                status=422,
                error="ValidationError",
                peer="sandbox",
                path=EXECUTE,
                key=key,
            ) from exc
