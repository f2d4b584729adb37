"""The sandbox as a service class: the real ``CodeExecutor`` (:mod:`sandbox.executor`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence

from sandbox.isolation.plan import IsolationPlan, close_quietly, plan_isolation
from sandbox.outcome import environment_failure, interpret
from sandbox.pool import PoolUnavailable, WorkerPool
from sandbox.selftest import run_selftest
from sandbox.settings import SandboxSettings
from sandbox.worker import JobSpec
from shared.errors import ConfigurationError
from shared.logging import get_logger
from shared.sandbox.schemas import (
    ExecuteRequest,
    ExecuteResult,
    IsolationReport,
    SelfTestCheck,
)

log = get_logger("crosscheck.sandbox")


class SelfTestFailed(ConfigurationError):
    """A control job failed or an escape succeeded: the sandbox must not serve."""


class SandboxService:
    """Owns the isolation plan and the warm pool; build with ``await SandboxService.start()``."""

    def __init__(self, settings: SandboxSettings, plan: IsolationPlan, pool: WorkerPool) -> None:
        self.settings = settings
        self.plan = plan
        self.pool = pool
        self.selftest: list[SelfTestCheck] = []
        self.selftest_passed = False

    @classmethod
    async def start(cls, settings: SandboxSettings) -> SandboxService:
        plan = await asyncio.to_thread(plan_isolation, settings)
        pool = WorkerPool(plan, settings)
        try:
            await pool.start()
        except PoolUnavailable as exc:
            await pool.close()
            close_quietly(plan)
            raise ConfigurationError(f"could not start the sandboxes: {exc}") from exc
        service = cls(settings, plan, pool)
        try:
            service.selftest = await run_selftest(service, plan)
        except BaseException:
            await service.close()
            raise
        service.selftest_passed = all(c.passed for c in service.selftest if c.required)
        if not service.selftest_passed:
            failed = [
                f"{c.name}: {c.detail}" for c in service.selftest if c.required and not c.passed
            ]
            await service.close()
            raise SelfTestFailed(
                "sandbox self-test failed, refusing to serve: " + "; ".join(failed)
            )
        log.info(
            "sandbox ready",
            isolation=plan.mode.value,
            workers=settings.workers,
            layers={layer.name: layer.active for layer in plan.layers},
        )
        return service

    async def close(self) -> None:
        await self.pool.close()
        close_quietly(self.plan)

    async def execute(self, request: ExecuteRequest) -> ExecuteResult:
        payload = json.dumps(
            {
                "code": request.code,
                "prompt": request.prompt,
                "tests": request.tests,
                "entry_point": request.entry_point,
                "fail_fast": request.fail_fast,
            }
        ).encode()
        job = JobSpec(
            id=uuid.uuid4().hex,
            payload=payload,
            timeout_s=request.timeout_s,
            memory_mb=request.memory_mb,
        )
        try:
            raw = await self.pool.run(job)
        except PoolUnavailable as exc:
            return environment_failure(request, self.plan.mode, str(exc))
        return interpret(raw, request, self.plan.mode)

    async def execute_batch(self, requests: Sequence[ExecuteRequest]) -> list[ExecuteResult]:
        return list(await asyncio.gather(*(self.execute(r) for r in requests)))

    async def isolation(self) -> IsolationReport:
        return IsolationReport(
            mode=self.plan.mode,
            weak_isolation_allowed=self.settings.allow_weak_isolation,
            layers=self.plan.layers,
            selftest_passed=self.selftest_passed,
            selftest=self.selftest,
            workers=self.pool.live,
            interpreter=f"{self.plan.python} -I",
        )

    def problem(self) -> str | None:
        """Why the service is not ready, or None."""
        if self.pool.live == 0:
            return "no live sandbox" + (f": {self.pool.last_error}" if self.pool.last_error else "")
        return None
