"""``SandboxClient``: the ``CodeExecutor`` other services use, over HTTP with a shared client."""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from sandbox.schemas import (
    BatchRequest,
    BatchResult,
    ExecuteRequest,
    ExecuteResult,
    IsolationReport,
)
from shared.auth import auth_headers
from shared.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable


class SandboxClient:
    """Talks to a sandbox service through an injected ``httpx.AsyncClient`` (base URL set)."""

    def __init__(self, http: httpx.AsyncClient, token: str) -> None:
        self.http = http
        self.headers = auth_headers(token)

    async def _post(self, path: str, body: dict[str, object], timeout: float) -> httpx.Response:
        try:
            response = await self.http.post(path, json=body, headers=self.headers, timeout=timeout)
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"sandbox timed out on {path}") from exc
        except httpx.TransportError as exc:
            raise UpstreamUnavailable(f"sandbox unreachable: {exc}") from exc
        if response.status_code >= 500:
            raise UpstreamUnavailable(f"sandbox answered {response.status_code} on {path}")
        if response.status_code >= 400:
            raise UpstreamError(
                f"sandbox rejected {path}: {response.status_code} {response.text[:500]}",
                status_code=502,
            )
        return response

    async def execute(self, request: ExecuteRequest) -> ExecuteResult:
        response = await self._post(
            "/v1/execute", request.model_dump(mode="json"), timeout=request.timeout_s + 30
        )
        return ExecuteResult.model_validate(response.json())

    async def execute_batch(self, requests: Sequence[ExecuteRequest]) -> list[ExecuteResult]:
        body = BatchRequest(jobs=list(requests))
        budget = sum(r.timeout_s for r in requests) + 60
        response = await self._post("/v1/execute/batch", body.model_dump(mode="json"), budget)
        return BatchResult.model_validate(response.json()).results

    async def isolation(self) -> IsolationReport:
        try:
            response = await self.http.get("/v1/isolation", headers=self.headers, timeout=10)
        except httpx.TransportError as exc:
            raise UpstreamUnavailable(f"sandbox unreachable: {exc}") from exc
        if response.status_code != 200:
            raise UpstreamError(f"sandbox answered {response.status_code} on /v1/isolation")
        return IsolationReport.model_validate(response.json())
