"""Service-to-service bearer-token auth (one shared token, compared in constant time)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request

from shared.errors import Unauthorized


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def require_service_token(expected: str) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency that admits only callers presenting ``expected``."""
    expected_bytes = expected.encode()

    async def dependency(request: Request) -> None:
        token = bearer_token(request)
        if token is None:
            raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
        if not hmac.compare_digest(token.encode(), expected_bytes):
            raise Unauthorized("invalid bearer token")

    return dependency


def auth_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
