"""One typed error tree for every service, and the one handler that renders it.

Domain code raises these; only the handler turns them into HTTP responses, always as
``{"error": <ClassName>, "detail": <message or structure>}``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class AppError(Exception):
    """Base of every expected failure. ``status_code`` is what a client sees."""

    status_code: int = 500

    def __init__(self, message: str, *, detail: Any = None, status_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.detail = detail if detail is not None else message
        if status_code is not None:
            self.status_code = status_code
        # JSON-safe keys rendered beside ``error`` and ``detail`` (e.g. the ``usage`` of
        # model calls a failed request paid for, so the caller can bill them)
        self.extra: dict[str, Any] = {}


class BadRequest(AppError):
    status_code = 400


class Unauthorized(AppError):
    status_code = 401


class Forbidden(AppError):
    status_code = 403


class NotFound(AppError):
    status_code = 404


class Conflict(AppError):
    status_code = 409


class PayloadTooLarge(AppError):
    status_code = 413


class InvalidModelOutput(AppError):
    """The model's structured output stayed invalid after the repair re-ask."""

    status_code = 422


class OutputTruncated(InvalidModelOutput):
    """The model's reply was cut off by its output-token cap, even on the larger retry cap.

    A 422 like any unusable model output (the same request cannot do better): the caller
    stops the run as ``invalid_model_output``."""


class ConfigurationError(AppError):
    """Settings that cannot work; raised at start-up, before a service serves."""

    status_code = 500


class UpstreamError(AppError):
    """A peer (model provider, sandbox, another service) answered with an error."""

    status_code = 502


class UpstreamUnavailable(UpstreamError):
    """A peer could not be reached or kept failing past the retry budget."""

    status_code = 503


class UpstreamTimeout(UpstreamError):
    status_code = 504


class BudgetExceeded(UpstreamTimeout):
    """The time this request may take is spent: a Critic depth's own budget, or the deadline
    its caller passed down (``shared.deadline``). Final for the request: the same one sent
    again would take as long, so callers do not retry it."""


class NeedHumanIntervention(AppError):
    """The machines cannot finish this run; a person must look at the whole context."""

    status_code = 409

    def __init__(
        self,
        message: str,
        *,
        stop_reason: str,
        error_class: str = "logic",
        context: dict[str, Any] | None = None,
    ):
        super().__init__(message, detail={"stop_reason": stop_reason, "error_class": error_class})
        self.stop_reason = stop_reason
        self.error_class = error_class
        self.context = context or {}


def error_body(error: str, detail: Any) -> dict[str, Any]:
    return {"error": error, "detail": detail}


def _validation_detail(exc: RequestValidationError) -> list[dict[str, Any]]:
    """Readable, JSON-safe validation errors: where, what, and the limit that was broken."""
    out: list[dict[str, Any]] = []
    for err in exc.errors():
        item: dict[str, Any] = {
            "loc": [str(part) for part in err.get("loc", ())],
            "msg": str(err.get("msg", "invalid value")),
            "type": str(err.get("type", "value_error")),
        }
        ctx = err.get("ctx")
        if ctx:
            item["ctx"] = {
                k: v if isinstance(v, int | float | str) else str(v) for k, v in ctx.items()
            }
        out.append(item)
    return out


def install_error_handlers(app: FastAPI) -> None:
    """Render the error tree, request validation and routing errors in one shape."""

    async def app_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AppError)
        body = {**exc.extra, **error_body(type(exc).__name__, exc.detail)}
        return JSONResponse(body, status_code=exc.status_code)

    async def validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse(error_body("ValidationError", _validation_detail(exc)), status_code=422)

    async def http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        name = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed"}
        return JSONResponse(
            error_body(name.get(exc.status_code, "HTTPError"), exc.detail),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    app.add_exception_handler(AppError, app_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)


class EmbeddingUnavailable(Exception):
    """The embeddings provider did not answer usably (down, refused, or a malformed reply)."""
