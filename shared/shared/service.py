"""The common frame of every FastAPI service: errors, limits, health, info, access log."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import structlog
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.contracts import MAX_BODY_BYTES, ServiceInfo
from shared.errors import error_body, install_error_handlers
from shared.logging import get_logger

ReadyCheck = Callable[[], Awaitable[str | None]]

log = get_logger("crosscheck.http")


class BodySizeLimit:
    """Reject bodies over ``limit`` bytes with a 413 before anything parses them."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(scope, receive, send)
            return
        seen = 0
        tripped = False

        async def limited_receive() -> Message:
            nonlocal seen, tripped
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    tripped = True
                    raise _TooLarge
            return message

        async def guarded_send(message: Message) -> None:
            if not tripped:  # once the limit tripped, the app's own error reply is dropped
                await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _TooLarge:
            pass
        if tripped:
            await self._reject(scope, receive, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            error_body("PayloadTooLarge", f"request body exceeds the limit of {self.limit} bytes"),
            status_code=413,
        )
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass


def build_service_app(
    *,
    title: str,
    info: Callable[[], ServiceInfo],
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
    ready: ReadyCheck | None = None,
    body_limit: int = MAX_BODY_BYTES,
    version: str = "0.1.0",
) -> FastAPI:
    """A FastAPI app with the platform's error shape, body limit, health and info routes."""
    app = FastAPI(title=title, version=version, lifespan=lifespan)
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, limit=body_limit)

    @app.middleware("http")
    async def access_log(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        start = time.perf_counter()
        with structlog.contextvars.bound_contextvars(request_id=request_id):
            response = await call_next(request)
            response.headers["x-request-id"] = request_id
            if request.url.path not in ("/healthz", "/readyz"):
                log.info(
                    "request",
                    method=request.method,
                    path=request.url.path,
                    status=response.status_code,
                    duration_ms=round((time.perf_counter() - start) * 1000, 2),
                )
        return response

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], responses={503: {"description": "not ready"}})
    async def readyz() -> Any:
        """Readiness: dependencies are configured and reachable."""
        problem = await ready() if ready is not None else None
        if problem:
            return JSONResponse(error_body("NotReady", problem), status_code=503)
        return {"status": "ready"}

    @app.get("/v1/info", tags=["ops"], response_model=ServiceInfo)
    async def service_info() -> ServiceInfo:
        """Role, provider and models of this service (never a key)."""
        return info()

    return app
