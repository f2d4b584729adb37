"""The common frame of every FastAPI service: errors, limits, health, info, access log."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import structlog
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from opentelemetry.semconv.attributes.http_attributes import (
    HTTP_REQUEST_METHOD,
    HTTP_RESPONSE_STATUS_CODE,
    HTTP_ROUTE,
)
from opentelemetry.semconv.attributes.url_attributes import URL_PATH
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared import deadline, tracing
from shared.contracts import MAX_BODY_BYTES, ServiceInfo
from shared.errors import AppError, error_body, install_error_handlers
from shared.logging import enabled, get_logger
from shared.settings import ServiceSettings

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


QUIET_PATHS = frozenset({"/healthz", "/readyz"})


def _request_id(scope: Scope) -> str:
    """The caller's ``x-request-id`` when it is a sane token, else a new one."""
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            text = bytes(value).decode("latin-1")
            if 0 < len(text) <= 128 and text.isascii() and text.isprintable():
                return text
            break
    return uuid.uuid4().hex


class AccessLog:
    """One log line per request, with a request id that is echoed back in ``x-request-id``.

    Plain ASGI on purpose: Starlette's ``@app.middleware("http")`` wraps every request in a
    task group and memory streams, which cost these services more CPU than their handlers.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not enabled(logging.INFO):  # no access line to write: only the request id
            await self._untimed(scope, receive, send)
            return
        request_id = _request_id(scope)
        header = (b"x-request-id", request_id.encode())
        start = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=request_id):
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                if scope["path"] not in QUIET_PATHS:
                    log.info(
                        "request",
                        method=scope["method"],
                        path=scope["path"],
                        status=status,
                        duration_ms=round((time.perf_counter() - start) * 1000, 2),
                    )

    async def _untimed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Below INFO: echo the request id and bind it for the lines that are written."""
        request_id = _request_id(scope)
        header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=request_id):
            await self.app(scope, receive, send_with_id)


class DeadlineScope:
    """A request's deadline (``X-Crosscheck-Deadline-Ms``) as the context of its handler:
    model calls and their retries fit inside it (``shared.deadline``). A malformed value is
    a 400 before the handler runs."""

    header = deadline.HEADER.lower().encode()

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope.get("headers", []):
                if name == self.header:
                    try:
                        seconds = deadline.parse_header(bytes(value).decode("latin-1"))
                    except AppError as exc:
                        body = error_body(type(exc).__name__, exc.detail)
                        await JSONResponse(body, status_code=exc.status_code)(scope, receive, send)
                        return
                    with deadline.scope(seconds):
                        await self.app(scope, receive, send)
                    return
        await self.app(scope, receive, send)


class TraceRequests:
    """A server span per request, child of the caller's ``traceparent``: a peer's spans join
    the trace of the orchestrator's run that called it. Tracing off: one flag checked."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not tracing.enabled() or scope["path"] in QUIET_PATHS:
            await self.app(scope, receive, send)
            return
        method = scope["method"]
        carrier: dict[str, str] = {}
        for name, value in scope.get("headers", []):
            if name == b"traceparent" or name == b"tracestate":
                carrier[name.decode()] = bytes(value).decode("latin-1")
        status = 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        attributes = {HTTP_REQUEST_METHOD: method, URL_PATH: scope["path"]}
        with tracing.span(
            method, kind=SpanKind.SERVER, attributes=attributes, context=tracing.extract(carrier)
        ) as span:
            try:
                await self.app(scope, receive, sent)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route:  # the template, not the path: ids make no span name
                    span.update_name(f"{method} {route}")
                    span.set_attribute(HTTP_ROUTE, route)
                span.set_attribute(HTTP_RESPONSE_STATUS_CODE, status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))


def build_service_app(
    *,
    title: str,
    info: Callable[[], ServiceInfo],
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
    ready: ReadyCheck | None = None,
    body_limit: int = MAX_BODY_BYTES,
    version: str = "0.1.0",
    honours_deadline: bool = True,
    settings: ServiceSettings | None = None,
) -> FastAPI:
    """A FastAPI app with the platform's error shape, body limit, health and info routes.
    A peer (``honours_deadline``) works within the deadline its caller sends. With
    ``settings`` naming an OTLP endpoint, the process exports traces (``shared.tracing``)."""
    if settings is not None:
        tracing.configure(settings, service=title.lower().replace(" ", "-"))
    app = FastAPI(title=title, version=version, lifespan=lifespan)
    install_error_handlers(app)
    if honours_deadline:
        app.add_middleware(DeadlineScope)
    app.add_middleware(BodySizeLimit, limit=body_limit)
    app.add_middleware(TraceRequests)
    app.add_middleware(AccessLog)  # added last: outermost, so it times and logs everything

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
