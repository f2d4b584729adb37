"""The two wire formats: read a provider request into a :class:`ModelCall`, render answers.

OpenAI Chat Completions (``POST /v1/chat/completions``) and Anthropic Messages
(``POST /v1/messages``) differ in how they ask for structured output and in the shape of
their answers and errors; everything past this module works on the neutral form.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import JsonValue

from fakemodel.scenarios import estimate_tokens
from fakemodel.state import Api

Mode = Literal["json", "tool", "text"]


class InvalidRequest(Exception):
    """The request body does not fit the API; answered with a 400 in the provider's shape."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class ModelCall:
    """A model request, whichever API it came through."""

    api: Api
    model: str
    temperature: float | None
    mode: Mode
    schema_name: str | None
    schema: dict[str, Any] | None
    last_user_text: str
    match_text: str
    input_tokens: int
    max_tokens: int | None = None  # the request's output-token cap


@dataclass(frozen=True)
class Answer:
    """What to send: a structured value, or a raw string verbatim, possibly made malformed."""

    value: JsonValue = None
    raw: str | None = None
    malformed: bool = False
    truncated: bool = False  # cut off by the request's output-token cap


def scripted_id(prefix: str) -> str:
    return f"scripted-{prefix}{uuid.uuid4().hex[:24]}"


# ------------------------------------------------------------------ reading requests


def _text_of_content(content: object) -> str:
    """The text of a message content: a string, or the text of its text blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            if isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif block.get("type") == "tool_result":
                parts.append(_text_of_content(block.get("content")))
    return "\n".join(part for part in parts if part)


def _require_model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model: a non-empty string is required", "model")
    return model


def _require_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: a non-empty list is required", "messages")
    if not all(isinstance(message, dict) for message in messages):
        raise InvalidRequest("messages: every message must be an object", "messages")
    return messages


def _temperature(body: dict[str, Any]) -> float | None:
    value = body.get("temperature")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest("temperature: a number is required", "temperature")
    return float(value)


def _schema_dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def parse_openai(body: dict[str, Any]) -> ModelCall:
    """Read a Chat Completions request."""
    model = _require_model(body)
    messages = _require_messages(body)
    temperature = _temperature(body)

    all_texts: list[str] = []
    match_texts: list[str] = []
    last_user = ""
    for message in messages:
        text = _text_of_content(message.get("content"))
        all_texts.append(text)
        role = message.get("role")
        if role in ("system", "developer", "user"):
            match_texts.append(text)
        if role == "user":
            last_user = text

    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise InvalidRequest("tools: a list is required", "tools")
    functions: dict[str, dict[str, Any]] = {}
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidRequest("tools: each tool needs function.name", "tools")
        functions[function["name"]] = function

    tool_choice = body.get("tool_choice")
    forced: str | None = None
    if isinstance(tool_choice, dict):
        choice_function = tool_choice.get("function")
        if isinstance(choice_function, dict) and isinstance(choice_function.get("name"), str):
            forced = choice_function["name"]
            if forced not in functions:
                raise InvalidRequest(
                    f"tool_choice: no tool named {forced!r} in tools", "tool_choice"
                )

    response_format = body.get("response_format")
    mode: Mode = "text"
    name: str | None = None
    schema: dict[str, Any] | None = None
    if forced is not None:
        mode, name, schema = "tool", forced, _schema_dict(functions[forced].get("parameters"))
    elif isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        json_schema = response_format.get("json_schema")
        if not isinstance(json_schema, dict) or not isinstance(json_schema.get("name"), str):
            raise InvalidRequest(
                "response_format.json_schema: an object with a name is required",
                "response_format",
            )
        mode, name, schema = "json", json_schema["name"], _schema_dict(json_schema.get("schema"))
    elif isinstance(response_format, dict) and response_format.get("type") == "json_object":
        mode = "json"
    elif functions and tool_choice != "none":
        first = next(iter(functions.values()))
        mode, name, schema = "tool", first["name"], _schema_dict(first.get("parameters"))

    return ModelCall(
        api="openai",
        model=model,
        temperature=temperature,
        mode=mode,
        schema_name=name,
        schema=schema,
        last_user_text=last_user,
        match_text="\n".join(match_texts),
        input_tokens=estimate_tokens("\n".join(all_texts)),
        max_tokens=_cap(body.get("max_completion_tokens", body.get("max_tokens"))),
    )


def _cap(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_anthropic(body: dict[str, Any]) -> ModelCall:
    """Read a Messages request."""
    model = _require_model(body)
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidRequest("max_tokens: Field required (a positive integer)", "max_tokens")
    messages = _require_messages(body)
    temperature = _temperature(body)

    system = _text_of_content(body.get("system"))
    all_texts = [system] if system else []
    match_texts = [system] if system else []
    last_user = ""
    for message in messages:
        text = _text_of_content(message.get("content"))
        all_texts.append(text)
        if message.get("role") == "user":
            match_texts.append(text)
            last_user = text

    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise InvalidRequest("tools: a list is required", "tools")
    named: dict[str, dict[str, Any]] = {}
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise InvalidRequest("tools: each tool needs a name", "tools")
        named[tool["name"]] = tool

    tool_choice = body.get("tool_choice")
    choice_type = tool_choice.get("type") if isinstance(tool_choice, dict) else None
    forced: str | None = None
    if choice_type == "tool" and isinstance(tool_choice, dict):
        forced = tool_choice.get("name")
        if not isinstance(forced, str) or forced not in named:
            raise InvalidRequest(f"tool_choice: no tool named {forced!r} in tools", "tool_choice")

    output_config = body.get("output_config")
    output_format = output_config.get("format") if isinstance(output_config, dict) else None

    mode: Mode = "text"
    name: str | None = None
    schema: dict[str, Any] | None = None
    if forced is not None:
        mode, name, schema = "tool", forced, _schema_dict(named[forced].get("input_schema"))
    elif isinstance(output_format, dict) and output_format.get("type") == "json_schema":
        mode, schema = "json", _schema_dict(output_format.get("schema"))
    elif named and choice_type != "none":
        first = next(iter(named.values()))
        mode, name, schema = "tool", first["name"], _schema_dict(first.get("input_schema"))

    return ModelCall(
        api="anthropic",
        model=model,
        temperature=temperature,
        mode=mode,
        schema_name=name,
        schema=schema,
        last_user_text=last_user,
        match_text="\n".join(match_texts),
        input_tokens=estimate_tokens("\n".join(all_texts)),
        max_tokens=max_tokens,
    )


# ------------------------------------------------------------------ rendering answers


def truncate_json(text: str) -> str:
    """Cut a JSON document in half: still a string, no longer parseable."""
    return text[: max(1, len(text) // 2)]


def _plain_text(value: JsonValue) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "verdict" not in value:
        output = value.get("output")
        if isinstance(output, str):
            return output
    return json.dumps(value)


def answer_text(mode: Mode, answer: Answer) -> str:
    """The string to send as content (or OpenAI tool arguments)."""
    if answer.raw is not None:
        return answer.raw
    text = _plain_text(answer.value) if mode == "text" else json.dumps(answer.value)
    return truncate_json(text) if answer.malformed else text


def tool_input(schema: dict[str, Any] | None, answer: Answer) -> dict[str, Any]:
    """The Anthropic ``tool_use`` input: always an object, so the wire stays valid."""
    if answer.raw is not None:
        try:
            parsed = json.loads(answer.raw)
        except ValueError:
            parsed = None
        return parsed if isinstance(parsed, dict) else {"raw": answer.raw}
    value: dict[str, Any] = (
        dict(answer.value) if isinstance(answer.value, dict) else {"value": answer.value}
    )
    if answer.malformed:
        required = schema.get("required") if isinstance(schema, dict) else None
        missing = [key for key in (required or []) if key in value] or list(value)[:1]
        for key in missing[:1]:
            del value[key]
        if not value:
            value = {"unexpected": "scripted malformed output"}
    return value


def openai_completion(call: ModelCall, answer: Answer) -> dict[str, Any]:
    """A ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    text = answer_text(call.mode, answer)
    if answer.truncated:
        text = truncate_json(text)
    if call.mode == "tool":
        message["tool_calls"] = [
            {
                "id": scripted_id("call_"),
                "type": "function",
                "function": {"name": call.schema_name or "", "arguments": text},
            }
        ]
        finish_reason = "tool_calls"
    else:
        message["content"] = text
        finish_reason = "stop"
    output_tokens = estimate_tokens(text)
    if answer.truncated:
        finish_reason = "length"
        output_tokens = call.max_tokens or output_tokens
    body = {
        "id": scripted_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": call.model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        ],
        "usage": {
            "prompt_tokens": call.input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": call.input_tokens + output_tokens,
        },
        "system_fingerprint": "scripted",
    }
    return body


def anthropic_message(call: ModelCall, answer: Answer) -> dict[str, Any]:
    """A Messages ``message`` object."""
    content: list[dict[str, Any]]
    if answer.truncated:  # cut off mid-answer: what there was of it, as text
        text = truncate_json(answer_text(call.mode, answer))
        content = [{"type": "text", "text": text}]
        stop_reason = "max_tokens"
        output_tokens = call.max_tokens or estimate_tokens(text)
    elif call.mode == "tool":
        arguments = tool_input(call.schema, answer)
        content = [
            {
                "type": "tool_use",
                "id": scripted_id("toolu_"),
                "name": call.schema_name or "",
                "input": arguments,
            }
        ]
        stop_reason = "tool_use"
        output_tokens = estimate_tokens(json.dumps(arguments))
    else:
        text = answer_text(call.mode, answer)
        content = [{"type": "text", "text": text}]
        stop_reason = "end_turn"
        output_tokens = estimate_tokens(text)
    body = {
        "id": scripted_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": call.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": call.input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    return body


# ------------------------------------------------------------------ errors

_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Forbidden."),
    404: ("invalid_request_error", "model_not_found", "Not found."),
    429: (
        "rate_limit_exceeded",
        "rate_limit_exceeded",
        "Rate limit reached (scripted fault). Please try again later.",
    ),
    500: (
        "server_error",
        None,
        "The server had an error while processing your request (scripted fault).",
    ),
    503: ("server_error", "service_unavailable", "Service unavailable (scripted fault)."),
    529: ("server_error", "overloaded", "The engine is overloaded (scripted fault)."),
}

_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Forbidden."),
    404: ("not_found_error", "Not found."),
    408: ("timeout_error", "Request timed out (scripted fault)."),
    413: ("request_too_large", "Request exceeds the maximum allowed size."),
    429: ("rate_limit_error", "Rate limit reached (scripted fault). Please try again later."),
    500: ("api_error", "Internal server error (scripted fault)."),
    503: ("api_error", "Service unavailable (scripted fault)."),
    504: ("timeout_error", "Request timed out (scripted fault)."),
    529: ("overloaded_error", "Overloaded (scripted fault)."),
}


def openai_error(
    status: int, message: str | None = None, *, param: str | None = None
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    default_type = "server_error" if status >= 500 else "invalid_request_error"
    kind, code, default_message = _OPENAI_ERRORS.get(status, (default_type, None, "Error."))
    return {
        "error": {"message": message or default_message, "type": kind, "param": param, "code": code}
    }


def anthropic_error(status: int, message: str | None = None) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}, "request_id"}``."""
    default_type = "api_error" if status >= 500 else "invalid_request_error"
    kind, default_message = _ANTHROPIC_ERRORS.get(status, (default_type, "Error."))
    return {
        "type": "error",
        "error": {"type": kind, "message": message or default_message},
        "request_id": scripted_id("req_"),
    }


def error_body(api: Api, status: int, message: str | None = None) -> dict[str, Any]:
    if api == "openai":
        return openai_error(status, message)
    return anthropic_error(status, message)


def unsupported_parameter_error(api: Api, param: str) -> dict[str, Any]:
    """A 400 body refusing ``param`` the way each provider words it."""
    if api == "openai":
        body = openai_error(
            400,
            f"Unsupported parameter: '{param}' is not supported with this model.",
            param=param,
        )
        body["error"]["code"] = "unsupported_parameter"
        return body
    return anthropic_error(400, f"{param}: Extra inputs are not permitted")
