"""HTTP clients for the peers: one pooled keep-alive ``httpx.AsyncClient`` per peer.

The sandbox's own typed client (``shared.sandbox.client``) speaks through a ``Peer`` too."""

from __future__ import annotations

import asyncio
import functools
import ssl
from typing import Any, Protocol

import httpx

from orchestrator.peers.errors import PeerRejected, PeerUnavailable
from shared import deadline, tracing
from shared.contracts import (
    ActorResult,
    CritiqueRequest,
    CritiqueResult,
    DraftRequest,
    ReviseRequest,
)
from shared.errors import BudgetExceeded
from shared.sandbox.schemas import ExecuteRequest, ExecuteResult

TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
# a 504 that says the request's own time ran out: sending it again would take as long
FINAL_TIMEOUT = BudgetExceeded.__name__


class ActorPeer(Protocol):
    async def draft(self, request: DraftRequest, *, key: str) -> ActorResult: ...
    async def revise(self, request: ReviseRequest, *, key: str) -> ActorResult: ...


class CriticPeer(Protocol):
    async def critique(self, request: CritiqueRequest, *, key: str) -> CritiqueResult: ...


class SandboxPeer(Protocol):
    """The sandbox's typed client (``shared.sandbox.client.SandboxClient``) over a ``Peer``."""

    async def execute(self, request: ExecuteRequest, *, key: str) -> ExecuteResult: ...


SHARDS = 8
CONNECTIONS_PER_SHARD = 4


class Peer:
    """Keep-alive clients to one peer: a few small pools instead of one big one.

    httpcore rescans every queued request against every connection of a pool whenever a
    request finishes, which made one 200-connection pool the orchestrator's largest CPU cost
    under load. Small pools, each behind a semaphore of its size, keep every scan short.
    """

    def __init__(self, name: str, clients: list[httpx.AsyncClient]) -> None:
        self.name = name
        self.clients = clients
        self._slots = [asyncio.Semaphore(CONNECTIONS_PER_SHARD) for _ in clients]
        self._next = 0

    async def post(self, path: str, body: dict[str, Any], key: str) -> dict[str, Any]:
        free = [i for i, slot in enumerate(self._slots) if not slot.locked()]
        if free:
            index = free[0]
        else:
            index = self._next = (self._next + 1) % len(self.clients)
        async with self._slots[index]:
            return await post_json(self.clients[index], self.name, path, body, key)

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


async def post_json(
    client: httpx.AsyncClient, peer: str, path: str, body: dict[str, Any], key: str
) -> dict[str, Any]:
    """POST with an idempotency key; map failures onto the environment/logic taxonomy.

    Inside a step's deadline (``shared.deadline``) the attempt waits no longer than what is
    left of it, and tells the peer so (``X-Crosscheck-Deadline-Ms``); a peer that answers
    ``BudgetExceeded`` ran out of that time (or its own budget): final, not retried."""
    headers = {"Idempotency-Key": key}
    tracing.inject(headers)  # the peer's spans join the run's trace
    sent = deadline.header_value()
    if sent is not None:
        headers[deadline.HEADER] = sent
    timeout: Any = httpx.USE_CLIENT_DEFAULT
    left = deadline.remaining()
    if left is not None:
        configured = client.timeout.read
        timeout = max(0.001, left if configured is None else min(configured, left))
    try:
        response = await client.post(path, json=body, headers=headers, timeout=timeout)
    except httpx.TimeoutException as exc:
        raise PeerUnavailable(f"{peer} timed out on {path}", status=None) from exc
    except httpx.TransportError as exc:
        raise PeerUnavailable(
            f"{peer} unreachable on {path}: {type(exc).__name__}", status=None
        ) from exc
    if response.status_code < 400:
        payload: dict[str, Any] = response.json()
        return payload
    error, usage, exchanges = _failure(response)
    if response.status_code in TRANSIENT_STATUSES and error != FINAL_TIMEOUT:
        raise PeerUnavailable(
            f"{peer} answered {response.status_code} on {path}: {_detail(response)}",
            status=response.status_code,
            peer=peer,
            path=path,
            key=key,
            usage=usage,
            exchanges=exchanges,
        )
    raise PeerRejected(
        f"{peer} refused {path} ({response.status_code}): {_detail(response)}",
        status=response.status_code,
        error=error,
        peer=peer,
        path=path,
        key=key,
        usage=usage,
        exchanges=exchanges,
    )


def _failure(
    response: httpx.Response,
) -> tuple[str | None, dict[str, Any] | None, list[dict[str, Any]] | None]:
    """A platform peer's error body: its error class, and what its model calls cost."""
    try:
        body = response.json()
    except ValueError:
        return None, None, None
    if not isinstance(body, dict):
        return None, None, None
    error = body.get("error") if isinstance(body.get("error"), str) else None
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
    listed = body.get("exchanges")
    exchanges = [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else None
    return error, usage, exchanges


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    return str(body.get("detail", "") if isinstance(body, dict) else body)[:500]


class HttpActor:
    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    async def draft(self, request: DraftRequest, *, key: str) -> ActorResult:
        body = await self.peer.post("/v1/draft", request.model_dump(mode="json"), key)
        return ActorResult.model_validate(body)

    async def revise(self, request: ReviseRequest, *, key: str) -> ActorResult:
        body = await self.peer.post("/v1/revise", request.model_dump(mode="json"), key)
        return ActorResult.model_validate(body)


class HttpCritic:
    def __init__(self, peer: Peer) -> None:
        self.peer = peer

    async def critique(self, request: CritiqueRequest, *, key: str) -> CritiqueResult:
        body = await self.peer.post("/v1/critique", request.model_dump(mode="json"), key)
        return CritiqueResult.model_validate(body)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One verifying TLS context for every peer client: loading the CA bundle takes ~45 ms,
    and each of the 24 sharded clients would otherwise load its own at every start."""
    return httpx.create_ssl_context()  # what httpx builds by default (certifi, SSL_CERT_FILE)


def peer_clients(
    base_url: str,
    token: str,
    timeout_s: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> list[httpx.AsyncClient]:
    return [
        httpx.AsyncClient(
            base_url=base_url,
            transport=transport,
            verify=tls_context(),
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout_s, connect=5.0),
            limits=httpx.Limits(
                max_connections=CONNECTIONS_PER_SHARD,
                max_keepalive_connections=CONNECTIONS_PER_SHARD,
            ),
        )
        for _ in range(SHARDS if transport is None else 1)
    ]
