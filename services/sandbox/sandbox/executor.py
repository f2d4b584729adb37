"""The sandbox's interface: what runs untrusted code against tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from shared.sandbox.schemas import ExecuteRequest, ExecuteResult, IsolationReport


class CodeExecutor(Protocol):
    """Runs untrusted code against tests. Implemented by ``SandboxService`` (real, isolated)
    and ``FakeExecutor`` (in memory: ``create_app(settings, executor=...)`` serves it to other
    services' tests). Other services call either over HTTP with ``shared.sandbox.client``."""

    async def execute(self, request: ExecuteRequest) -> ExecuteResult: ...

    async def execute_batch(self, requests: Sequence[ExecuteRequest]) -> list[ExecuteResult]: ...

    async def isolation(self) -> IsolationReport: ...
