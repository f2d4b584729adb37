"""Dependency aliases for the sandbox's routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from sandbox.executor import CodeExecutor
from shared.errors import AppError


class SandboxNotReady(AppError):
    status_code = 503


def get_executor(request: Request) -> CodeExecutor:
    executor: CodeExecutor | None = getattr(request.app.state, "executor", None)
    if executor is None:
        raise SandboxNotReady("the sandbox is not started")
    return executor


ExecutorDep = Annotated[CodeExecutor, Depends(get_executor)]
