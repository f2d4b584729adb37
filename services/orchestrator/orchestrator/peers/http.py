"""HTTP clients for the peers: one pooled keep-alive ``httpx.AsyncClient`` per peer."""

from __future__ import annotations

from typing import Any, Protocol

import httpx

from orchestrator.peers.errors import PeerRejected, PeerUnavailable
from shared.contracts import (
    ActorResult,
    CritiqueRequest,
    CritiqueResult,
    DraftRequest,
    ReviseRequest,
)

TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class ActorPeer(Protocol):
    async def draft(self, request: DraftRequest, *, key: str) -> ActorResult: ...
    async def revise(self, request: ReviseRequest, *, key: str) -> ActorResult: ...


class CriticPeer(Protocol):
    async def critique(self, request: CritiqueRequest, *, key: str) -> CritiqueResult: ...


class SandboxPeer(Protocol):
    async def execute(self, job: dict[str, Any], *, key: str) -> dict[str, Any]: ...


async def post_json(
    client: httpx.AsyncClient, peer: str, path: str, body: dict[str, Any], key: str
) -> dict[str, Any]:
    """POST with an idempotency key; map failures onto the environment/logic taxonomy."""
    try:
        response = await client.post(path, json=body, headers={"Idempotency-Key": key})
    except httpx.TimeoutException as exc:
        raise PeerUnavailable(f"{peer} timed out on {path}") from exc
    except httpx.TransportError as exc:
        raise PeerUnavailable(f"{peer} unreachable on {path}: {type(exc).__name__}") from exc
    if response.status_code in TRANSIENT_STATUSES:
        raise PeerUnavailable(
            f"{peer} answered {response.status_code} on {path}: {_detail(response)}"
        )
    if response.status_code >= 400:
        error = None
        try:
            error = response.json().get("error")
        except ValueError:
            pass
        raise PeerRejected(
            f"{peer} refused {path} ({response.status_code}): {_detail(response)}",
            status=response.status_code,
            error=error,
        )
    payload: dict[str, Any] = response.json()
    return payload


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", ""))[:500]
    except ValueError:
        return response.text[:500]


class HttpActor:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def draft(self, request: DraftRequest, *, key: str) -> ActorResult:
        body = await post_json(
            self.client, "actor", "/v1/draft", request.model_dump(mode="json"), key
        )
        return ActorResult.model_validate(body)

    async def revise(self, request: ReviseRequest, *, key: str) -> ActorResult:
        body = await post_json(
            self.client, "actor", "/v1/revise", request.model_dump(mode="json"), key
        )
        return ActorResult.model_validate(body)


class HttpCritic:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def critique(self, request: CritiqueRequest, *, key: str) -> CritiqueResult:
        body = await post_json(
            self.client, "critic", "/v1/critique", request.model_dump(mode="json"), key
        )
        return CritiqueResult.model_validate(body)


class HttpSandbox:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def execute(self, job: dict[str, Any], *, key: str) -> dict[str, Any]:
        result = await post_json(self.client, "sandbox", "/v1/execute", job, key)
        if result.get("error_class") == "environment":
            raise PeerUnavailable(
                f"sandbox could not run the job: {result.get('stderr', '')[:300]}"
            )
        return result


def peer_client(
    base_url: str,
    token: str,
    timeout_s: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base_url,
        transport=transport,
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx.Timeout(timeout_s, connect=5.0),
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=100),
    )
