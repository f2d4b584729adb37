"""The sandbox's interface: what runs untrusted code against tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sandbox.schemas import ExecuteRequest, ExecuteResult, IsolationReport


class CodeExecutor(Protocol):
    """Runs untrusted code against tests. Implemented by ``SandboxService`` (real, isolated),
    ``FakeExecutor`` (in memory, for other services' tests) and ``SandboxClient`` (HTTP)."""

    async def execute(self, request: ExecuteRequest) -> ExecuteResult: ...

    async def execute_batch(self, requests: Sequence[ExecuteRequest]) -> list[ExecuteResult]: ...

    async def isolation(self) -> IsolationReport: ...
