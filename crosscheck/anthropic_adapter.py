"""The Anthropic wire in front of a server that enforces structured output on the OpenAI wire only.

llama-server answers ``/v1/messages``, but a forced tool call (``tool_choice: {type: tool}``,
how the Critic asks for its JSON) comes back as prose: the grammar that makes a small model
keep to a schema is applied to ``response_format: json_schema`` on ``/v1/chat/completions``
only. This adapter takes the Messages request, asks ``/v1/chat/completions`` with the forced
tool's ``input_schema`` as the ``json_schema``, and answers with a ``tool_use`` block. A reply
that is not a JSON object (cut off by its cap, say) comes back as text, without the block, and
the caller says so. Run: ``python -m crosscheck.anthropic_adapter`` (``LOCALMODEL_ADAPTER_*``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fakemodel.protocol import InvalidRequest, anthropic_error, parse_anthropic
from fakemodel.settings import is_loopback

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
PASSED_THROUGH = ("temperature", "top_p", "top_k")


class AdapterSettings(BaseSettings):
    """Where the adapter listens and which OpenAI-wire server it asks."""

    model_config = SettingsConfigDict(
        env_prefix="LOCALMODEL_ADAPTER_", extra="ignore", env_file=None
    )

    host: str = Field(default="127.0.0.1", description="Listen address (loopback only).")
    port: int = Field(default=8012, ge=0, le=65535, description="Listen port.")
    upstream_url: str = Field(
        default="http://127.0.0.1:8011/v1",
        description="The OpenAI-wire base URL (with /v1) of the local model server.",
    )
    timeout_s: float = Field(
        default=1800.0,
        gt=0,
        description="How long one upstream call may take (a CPU model is slow; the caller's "
        "own SDK timeout is normally shorter and ends the call first).",
    )

    @model_validator(mode="after")
    def _loopback_only(self) -> AdapterSettings:
        host = httpx.URL(self.upstream_url).host
        if not (is_loopback(self.host) and is_loopback(host)):
            raise ValueError(
                "the local model adapter listens on and calls loopback addresses only "
                f"(LOCALMODEL_ADAPTER_HOST={self.host}, upstream host {host})"
            )
        return self


def _block_text(block: object) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return ""
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return str(block["text"])
    if kind == "tool_use":
        return json.dumps(block.get("input", {}))
    if kind == "tool_result":
        return _content_text(block.get("content"))
    return ""


def _content_text(content: object) -> str:
    if isinstance(content, list):
        return "\n".join(text for text in map(_block_text, content) if text)
    return _block_text(content)


def chat_request(body: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The ``/v1/chat/completions`` body for a Messages body, and the forced tool's name."""
    call = parse_anthropic(body)  # validates model, max_tokens, messages, tools, tool_choice
    if body.get("stream"):
        raise InvalidRequest("stream: the local model adapter does not stream", "stream")
    messages: list[dict[str, Any]] = []
    system = _content_text(body.get("system"))
    if call.mode == "tool" and call.schema_name:
        tool = next(t for t in body["tools"] if t["name"] == call.schema_name)
        described = tool.get("description") or f"a {call.schema_name} object"
        system = f"{system}\n\nAnswer with one JSON object: {described}".strip()
    if system:
        messages.append({"role": "system", "content": system})
    for message in body["messages"]:
        role = "assistant" if message.get("role") == "assistant" else "user"
        messages.append({"role": role, "content": _content_text(message.get("content"))})
    request: dict[str, Any] = {
        "model": call.model,
        "messages": messages,
        "max_tokens": body["max_tokens"],
    }
    for name in PASSED_THROUGH:
        if name in body:
            request[name] = body[name]
    if isinstance(body.get("stop_sequences"), list):
        request["stop"] = body["stop_sequences"]
    if call.mode in ("tool", "json") and call.schema is not None:
        request["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": call.schema_name or "output", "schema": call.schema},
        }
    forced = call.schema_name if call.mode == "tool" else None
    return request, forced


def message_reply(
    body: dict[str, Any], completion: dict[str, Any], forced: str | None
) -> dict[str, Any]:
    """An Anthropic ``message`` for a chat completion: a ``tool_use`` block when a tool was
    forced and the reply is a JSON object; its text otherwise."""
    choice = (completion.get("choices") or [{}])[0]
    text = (choice.get("message") or {}).get("content") or ""
    finish = choice.get("finish_reason") or "stop"
    stop_reason = STOP_REASONS.get(finish, "end_turn")
    content: list[dict[str, Any]] = []
    if forced is not None:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, dict):
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{uuid.uuid4().hex[:24]}",
                    "name": forced,
                    "input": value,
                }
            )
            if stop_reason == "end_turn":
                stop_reason = "tool_use"
    if not content:
        content.append({"type": "text", "text": text})
    usage = completion.get("usage") or {}
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ""),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0),
        },
    }


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(anthropic_error(status, message), status_code=status)


def _upstream_message(response: httpx.Response) -> str:
    try:
        detail = response.json().get("error", {})
        message = detail.get("message") if isinstance(detail, dict) else str(detail)
    except (ValueError, AttributeError):
        message = None
    return (
        f"the local model server answered {response.status_code}: {message or response.text[:200]}"
    )


def create_app(settings: AdapterSettings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with httpx.AsyncClient(
            base_url=settings.upstream_url.rstrip("/"), timeout=settings.timeout_s
        ) as client:
            app.state.upstream = client
            yield

    app = FastAPI(title="Crosscheck local model adapter (Anthropic wire)", lifespan=lifespan)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Alive (the model server has its own /health)."""
        return {"status": "ok"}

    @app.post("/v1/messages")
    async def messages(request: Request) -> JSONResponse:
        """A Messages call answered through the upstream's chat completions."""
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object")
        try:
            chat, forced = chat_request(body)
        except InvalidRequest as exc:
            return _error(400, exc.message)
        client: httpx.AsyncClient = request.app.state.upstream
        key = request.headers.get("x-api-key") or request.headers.get("authorization", "")
        key = key.removeprefix("Bearer ").strip()
        headers = {"Authorization": f"Bearer {key}"} if key else {}  # the caller's, passed on
        try:
            upstream = await client.post("/chat/completions", json=chat, headers=headers)
        except httpx.TimeoutException:
            return _error(504, "the local model server did not answer in time")
        except httpx.TransportError as exc:
            return _error(503, f"the local model server cannot be reached: {type(exc).__name__}")
        if upstream.status_code >= 400:
            status = upstream.status_code if upstream.status_code < 500 else 503
            return _error(status, _upstream_message(upstream))
        try:
            completion = upstream.json()
        except ValueError:
            return _error(503, "the local model server answered with a body that is not JSON")
        return JSONResponse(message_reply(body, completion, forced))

    return app


def main() -> None:
    settings = AdapterSettings()
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
