"""HTTP routes: execute one job, a batch, and report the isolation in force."""

from __future__ import annotations

import time

from fastapi import APIRouter

from sandbox.deps import ExecutorDep
from shared.sandbox.schemas import (
    BatchRequest,
    BatchResult,
    ExecuteRequest,
    ExecuteResult,
    ExecutionStatus,
    IsolationReport,
)

router = APIRouter(prefix="/v1", tags=["sandbox"])


@router.post("/execute", response_model=ExecuteResult)
async def execute(body: ExecuteRequest, executor: ExecutorDep) -> ExecuteResult:
    """Run code against its tests in an isolated sandbox."""
    return await executor.execute(body)


@router.post("/execute/batch", response_model=BatchResult)
async def execute_batch(body: BatchRequest, executor: ExecutorDep) -> BatchResult:
    """Run many jobs on the warm pool; results come back in request order."""
    start = time.perf_counter()
    results = await executor.execute_batch(body.jobs)
    return BatchResult(
        results=results,
        passed=sum(1 for r in results if r.status is ExecutionStatus.passed),
        total=len(results),
        duration_ms=round((time.perf_counter() - start) * 1000, 3),
    )


@router.get("/isolation", response_model=IsolationReport)
async def isolation(executor: ExecutorDep) -> IsolationReport:
    """Which isolation layers are active, and the start-up self-test."""
    return await executor.isolation()
