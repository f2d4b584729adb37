"""A client of the Research service for the orchestrator (or anyone holding the service
token). It never raises for an unavailable service: research that cannot be done comes back
``degraded`` with every query in ``failed_queries``, so a caller goes on without evidence
instead of stalling. It lives in ``shared`` so the orchestrator can use it without depending
on the service's package (its backends, parsers and model SDKs)."""

from __future__ import annotations

import httpx

from shared.auth import auth_headers
from shared.contracts import (
    FailedQuery,
    ResearchRequest,
    ResearchResult,
    ResearchStatus,
)


class ResearchClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = auth_headers(token)
        self._client = client or httpx.AsyncClient(timeout=timeout_s)
        self._own = client is None

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def research(self, request: ResearchRequest) -> ResearchResult:
        """Evidence for ``request``. Unreachable, slow, 5xx, or a gate refusing every query
        (422): a ``degraded`` result naming each query and the reason."""
        try:
            response = await self._client.post(
                f"{self.base_url}/v1/research",
                json=request.model_dump(mode="json"),
                headers=self._headers,
            )
        except httpx.TimeoutException:
            return self._degraded(request, "the research service did not answer in time")
        except httpx.HTTPError as exc:
            return self._degraded(
                request, f"the research service is unreachable: {type(exc).__name__}"
            )
        if response.status_code == 200:
            return ResearchResult.model_validate_json(response.content)
        if response.status_code == 422:
            detail = _json(response).get("detail")
            if isinstance(detail, dict) and isinstance(detail.get("failed_queries"), list):
                return ResearchResult(
                    status=ResearchStatus.degraded,
                    failed_queries=[
                        FailedQuery.model_validate(f) for f in detail["failed_queries"]
                    ],
                )
        return self._degraded(request, f"the research service answered HTTP {response.status_code}")

    @staticmethod
    def _degraded(request: ResearchRequest, reason: str) -> ResearchResult:
        return ResearchResult(
            status=ResearchStatus.degraded,
            failed_queries=[FailedQuery(query=q, reason=reason) for q in request.queries],
        )


def _json(response: httpx.Response) -> dict[str, object]:
    try:
        value = response.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
