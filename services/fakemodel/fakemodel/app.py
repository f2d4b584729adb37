"""The fake model server: OpenAI and Anthropic endpoints plus a test control API.

``create_app`` builds an independent server; all of its state (script, faults, request log,
latency) lives on ``app.state.fakemodel``, so tests can run several in one process.

Model endpoints
    ``POST /v1/chat/completions`` (OpenAI Chat Completions), ``POST /v1/messages``
    (Anthropic Messages), ``POST /v1/embeddings`` (OpenAI embeddings: deterministic hashed
    bag-of-words vectors, logged with stage ``embeddings``; faults with that stage apply),
    ``GET /v1/models``, ``GET /healthz``. Every model response carries
    ``x-crosscheck-scripted: true`` and ids prefixed ``scripted-``.

Control API (``/_control``, JSON, for tests and the demo)
    ``POST|GET|DELETE /_control/script``, ``POST|GET|DELETE /_control/faults``,
    ``GET|DELETE /_control/requests``, ``GET|POST /_control/config``, ``POST /_control/reset``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from fakemodel.embeddings import embed, encoded
from fakemodel.protocol import (
    Answer,
    InvalidRequest,
    ModelCall,
    anthropic_message,
    error_body,
    openai_completion,
    parse_anthropic,
    parse_openai,
    scripted_id,
    unsupported_parameter_error,
)
from fakemodel.scenarios import (
    detect_stage,
    parse_sections,
    role_from_schema,
    scripted_actor,
    structured_output,
)
from fakemodel.settings import FakeModelSettings
from fakemodel.state import (
    Api,
    ConfigBody,
    FakeModelState,
    Fault,
    FaultsBody,
    ScriptBody,
    ScriptItem,
)

SCRIPTED_HEADER = "x-crosscheck-scripted"
CLIENT_CLOSED = 499
_MAX_LOGGED_TEXT = 10_000


def _bearer(request: Request) -> str:
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _auth_present(request: Request, api: Api) -> bool:
    if api == "anthropic" and request.headers.get("x-api-key", "").strip():
        return True
    return bool(_bearer(request))


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}"


def _headers(api: Api, extra: dict[str, str] | None = None) -> dict[str, str]:
    request_id = scripted_id("req_")
    headers = {SCRIPTED_HEADER: "true"}
    headers["x-request-id" if api == "openai" else "request-id"] = request_id
    if extra:
        headers.update(extra)
    return headers


def _parse(api: Api, body: dict[str, Any]) -> ModelCall:
    if body.get("stream"):
        raise InvalidRequest("stream: streaming is not supported by the scripted model", "stream")
    return parse_openai(body) if api == "openai" else parse_anthropic(body)


RAMBLE_CHARS_PER_TOKEN = 3


def longest_reply(schema: dict[str, Any]) -> Any:
    """The longest value ``schema`` allows (a rambling model held to it by a grammar): strings
    at their ``maxLength`` (2,000 characters without one), arrays at ``maxItems`` (10), the
    first choice of an ``anyOf`` or ``enum``, numbers at their ``maximum``, booleans false."""
    defs = schema.get("$defs") or {}

    def build(node: Any, depth: int) -> Any:
        if not isinstance(node, dict) or depth > 8:
            return None
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            node = defs.get(ref.removeprefix("#/$defs/"), {})
        if "anyOf" in node:
            return build(node["anyOf"][0], depth + 1)
        if "const" in node:
            return node["const"]
        if node.get("enum"):
            return node["enum"][0]
        kind = node.get("type")
        if kind == "string":
            return ("on and on " * 400)[: int(node.get("maxLength", 2_000))]
        if kind == "array":
            return [
                build(node.get("items"), depth + 1) for _ in range(int(node.get("maxItems", 10)))
            ]
        if kind == "object":
            properties = node.get("properties") or {}
            return {name: build(sub, depth + 1) for name, sub in properties.items()}
        if kind == "boolean":
            return False
        if kind in ("number", "integer"):
            return node.get("maximum", 1)
        return None

    return build(schema, 0)


def fit_schema(value: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """Only the fields the caller's schema names, as a model in a strict mode answers; nested
    objects (a critique's issues) too, following ``$ref`` into the schema's ``$defs``."""
    if not isinstance(schema, dict):
        return value
    found = schema.get("$defs")
    defs: dict[str, Any] = found if isinstance(found, dict) else {}
    fitted = _fit(value, schema, defs)
    return fitted if isinstance(fitted, dict) else value


def _fit(value: Any, node: Any, defs: dict[str, Any]) -> Any:
    if not isinstance(node, dict):
        return value
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _fit(value, defs.get(ref.removeprefix("#/$defs/")), defs)
    for option in node.get("anyOf") or []:
        if isinstance(option, dict) and option.get("type") != "null":
            return _fit(value, option, defs)
    properties = node.get("properties")
    if isinstance(value, dict) and isinstance(properties, dict):
        return {k: _fit(v, properties[k], defs) for k, v in value.items() if k in properties}
    if isinstance(value, list) and "items" in node:
        return [_fit(v, node["items"], defs) for v in value]
    return value


def create_app(settings: FakeModelSettings | None = None) -> FastAPI:
    """A fresh fake model server with its own script, faults, request log and config."""
    state = FakeModelState(settings or FakeModelSettings())
    app = FastAPI(
        title="Crosscheck fake model",
        version="0.1.0",
        description="A scripted model speaking the OpenAI and Anthropic wire formats.",
    )
    app.state.fakemodel = state

    async def handle(request: Request, api: Api) -> JSONResponse:
        entry: dict[str, Any] = {
            "seq": state.next_seq(),
            "api": api,
            "stage": None,
            "model": None,
            "temperature": None,
            "auth_present": _auth_present(request, api),
            "body": None,
            "status": None,
            "response": None,
            "fault": None,
            "source": None,
        }
        state.requests.append(entry)

        def finish(status: int, body: dict[str, Any], headers: dict[str, str]) -> JSONResponse:
            entry["status"] = status
            entry["response"] = body
            return JSONResponse(body, status_code=status, headers=headers)

        def fail(
            status: int, message: str | None = None, extra: dict[str, str] | None = None
        ) -> JSONResponse:
            entry["source"] = entry["source"] or "error"
            return finish(status, error_body(api, status, message), _headers(api, extra))

        raw = await request.body()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            entry["body"] = raw.decode("utf-8", "replace")[:_MAX_LOGGED_TEXT]
            body = None
        else:
            entry["body"] = body
            if isinstance(body, dict) and isinstance(body.get("model"), str):
                entry["model"] = body["model"]

        if not entry["auth_present"]:
            if api == "openai":
                return fail(
                    401,
                    "You didn't provide an API key. You need to provide your API key in an "
                    "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                )
            return fail(401, "x-api-key header is required")
        if not isinstance(body, dict):
            return fail(400, "The request body must be a JSON object.")
        try:
            call = _parse(api, body)
        except InvalidRequest as error:
            return fail(400, error.message)

        sections = parse_sections(call.last_user_text)
        stage = detect_stage(role_from_schema(call.schema_name, call.schema), sections)
        entry.update(stage=stage, model=call.model, temperature=call.temperature)

        # Consume at arrival, so concurrent calls take queued items in arrival order. A queued
        # HTTP-error or malformed fault replaces the answer, so it leaves the script alone.
        fault: Fault | None = state.take_fault(
            api=api, stage=stage, text=call.match_text, params=list(body)
        )
        item: ScriptItem | None = None
        if fault is None or (fault.status is None and not fault.malformed and not fault.truncated):
            item = state.take_item(
                api=api, stage=stage, text=call.match_text, temperature=call.temperature
            )
        applied = [f for f in (fault, item.fault if item else None) if f is not None]
        if applied:
            entry["fault"] = applied[0].model_dump(mode="json")
        entry["source"] = "script" if item is not None else "scenario"

        delay = state.latency_ms / 1000 + sum(f.delay_s or 0.0 for f in applied)
        if delay > 0:
            try:
                await asyncio.sleep(delay)
            except asyncio.CancelledError:
                entry["status"] = CLIENT_CLOSED
                raise

        status_fault = next((f for f in applied if f.status is not None), None)
        if status_fault is not None and status_fault.status is not None:
            extra: dict[str, str] = {}
            if status_fault.retry_after is not None:
                extra["retry-after"] = _format_seconds(status_fault.retry_after)
            entry["source"] = "fault"
            if status_fault.unsupported_param is not None:
                refusal = unsupported_parameter_error(api, status_fault.unsupported_param)
                return finish(status_fault.status, refusal, _headers(api, extra))
            return fail(status_fault.status, status_fault.message, extra)

        malformed = any(f.malformed for f in applied)
        truncated = any(f.truncated for f in applied)
        if any(f.ramble for f in applied):
            value = longest_reply(call.schema or {})
            long = len(json.dumps(value)) / RAMBLE_CHARS_PER_TOKEN > (call.max_tokens or 4096)
            answer = Answer(value=value, malformed=malformed, truncated=truncated or long)
        elif item is not None and item.raw is not None:
            answer = Answer(raw=item.raw, malformed=malformed, truncated=truncated)
        elif item is not None and item.response is not None:
            value = scripted_actor(sections, stage, item.response)
            answer = Answer(value=value, malformed=malformed, truncated=truncated)
        else:
            built = structured_output(sections, stage)
            answer = Answer(
                value=fit_schema(built, call.schema), malformed=malformed, truncated=truncated
            )

        render = openai_completion if api == "openai" else anthropic_message
        return finish(200, render(call, answer), _headers(api))

    # ------------------------------------------------------------- model endpoints

    @app.post("/v1/chat/completions", tags=["openai"])
    async def chat_completions(request: Request) -> JSONResponse:
        """OpenAI Chat Completions (non-streaming)."""
        return await handle(request, "openai")

    @app.post("/v1/messages", tags=["anthropic"])
    async def messages(request: Request) -> JSONResponse:
        """Anthropic Messages (non-streaming)."""
        return await handle(request, "anthropic")

    @app.post("/v1/embeddings", tags=["openai"])
    async def embeddings(request: Request) -> JSONResponse:
        """OpenAI Embeddings: one deterministic vector per input text."""
        entry: dict[str, Any] = {
            "seq": state.next_seq(),
            "api": "openai",
            "stage": "embeddings",
            "model": None,
            "temperature": None,
            "auth_present": _auth_present(request, "openai"),
            "body": None,
            "status": None,
            "response": None,
            "fault": None,
            "source": "scenario",
        }
        state.requests.append(entry)

        def finish(status: int, body: dict[str, Any], headers: dict[str, str]) -> JSONResponse:
            entry["status"] = status
            entry["response"] = body
            return JSONResponse(body, status_code=status, headers=headers)

        def fail(status: int, message: str | None = None) -> JSONResponse:
            entry["source"] = "fault" if entry["fault"] else "error"
            return finish(status, error_body("openai", status, message), _headers("openai"))

        if not entry["auth_present"]:
            return fail(401, "You didn't provide an API key.")
        try:
            body: Any = json.loads(await request.body())
        except ValueError:
            return fail(400, "The request body must be a JSON object.")
        entry["body"] = body
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return fail(400, "model: a model name is required")
        entry["model"] = body["model"]
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return fail(400, "input: a string or a non-empty list of strings is required")
        fault = state.take_fault(api="openai", stage="embeddings", text="\n".join(texts))
        if fault is not None:
            entry["fault"] = fault.model_dump(mode="json")
            if fault.delay_s:
                await asyncio.sleep(fault.delay_s)
            if fault.status is not None:
                return fail(fault.status, fault.message)
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            return fail(400, "encoding_format: float or base64")
        tokens = sum(len(t.split()) for t in texts)
        reply = {
            "object": "list",
            "model": body["model"],
            "data": [
                {"object": "embedding", "index": i, "embedding": encoded(embed(t), encoding)}
                for i, t in enumerate(texts)
            ],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return finish(200, reply, _headers("openai"))

    @app.get("/v1/models", tags=["openai"])
    async def models() -> JSONResponse:
        """A tiny OpenAI-style model list."""
        body = {
            "object": "list",
            "data": [
                {
                    "id": "scripted-model",
                    "object": "model",
                    "created": 0,
                    "owned_by": "crosscheck-fakemodel",
                }
            ],
        }
        return JSONResponse(body, headers={SCRIPTED_HEADER: "true"})

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    # ------------------------------------------------------------- control API

    @app.post("/_control/script", tags=["control"])
    async def add_script(body: ScriptBody) -> dict[str, int]:
        """Queue scripted answers; each is consumed by the first call it fits."""
        state.script.extend(body.items)
        return {"added": len(body.items), "queued": len(state.script)}

    @app.get("/_control/script", tags=["control"])
    async def list_script() -> dict[str, list[dict[str, Any]]]:
        return {"items": [item.model_dump(mode="json") for item in state.script]}

    @app.delete("/_control/script", tags=["control"])
    async def clear_script() -> dict[str, int]:
        cleared = len(state.script)
        state.script.clear()
        return {"cleared": cleared}

    @app.post("/_control/faults", tags=["control"])
    async def add_faults(body: FaultsBody) -> dict[str, int]:
        """Queue faults; each is consumed by exactly one model call (FIFO among those it fits)."""
        state.faults.extend(body.faults)
        return {"added": len(body.faults), "queued": len(state.faults)}

    @app.get("/_control/faults", tags=["control"])
    async def list_faults() -> dict[str, list[dict[str, Any]]]:
        return {"faults": [fault.model_dump(mode="json") for fault in state.faults]}

    @app.delete("/_control/faults", tags=["control"])
    async def clear_faults() -> dict[str, int]:
        cleared = len(state.faults)
        state.faults.clear()
        return {"cleared": cleared}

    @app.get("/_control/requests", tags=["control"])
    async def list_requests() -> list[dict[str, Any]]:
        """Every model call in arrival order, failed ones included; never a key."""
        return list(state.requests)

    @app.delete("/_control/requests", tags=["control"])
    async def clear_requests() -> dict[str, int]:
        cleared = len(state.requests)
        state.requests.clear()
        return {"cleared": cleared}

    def config_view() -> dict[str, Any]:
        return {
            "latency_ms": state.latency_ms,
            "latency_ms_override": state.latency_override_ms,
            "log_limit": state.settings.log_limit,
        }

    @app.get("/_control/config", tags=["control"])
    async def get_config() -> dict[str, Any]:
        return config_view()

    @app.post("/_control/config", tags=["control"])
    async def set_config(body: ConfigBody) -> dict[str, Any]:
        """Change the latency at run time; ``{"latency_ms": null}`` restores the setting."""
        state.latency_override_ms = body.latency_ms
        return config_view()

    @app.post("/_control/reset", tags=["control"])
    async def reset() -> dict[str, str]:
        """Clear script, faults, request log and config overrides."""
        state.reset()
        return {"status": "reset"}

    return app
