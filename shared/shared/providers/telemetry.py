"""The span of one model request, in the OpenTelemetry GenAI semantic conventions.

One span per request sent (a retry, a repair re-ask or a larger-cap retry is its own), a child
of the service's request span: ``chat <model>``, with the provider, the requested and answering
model, the token usage and why the answer ended. Prompts and output go on it only when
``CROSSCHECK_TRACE_CONTENT`` allows (``shared.tracing.content_enabled``), as the conventions'
JSON message lists; the request's headers, and so the API key, never do.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GEN_AI_INPUT_MESSAGES,
    GEN_AI_OPERATION_NAME,
    GEN_AI_OUTPUT_MESSAGES,
    GEN_AI_OUTPUT_TYPE,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_REQUEST_TEMPERATURE,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_RESPONSE_ID,
    GEN_AI_RESPONSE_MODEL,
    GEN_AI_SYSTEM,
    GEN_AI_SYSTEM_INSTRUCTIONS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
)
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from shared import tracing
from shared.providers.calls import ModelCall, RawReply

CHAT = "chat"
STAGE = "crosscheck.stage"

Answered = Callable[["RawReply"], None]


def _ignore(reply: RawReply) -> None:
    return None


def _text(content: str) -> list[dict[str, str]]:
    return [{"type": "text", "content": content}]


@contextmanager
def chat_span(provider: str, call: ModelCall, user: str) -> Iterator[Answered]:
    """A span around one request of ``call`` (``user``: its user message as sent, a repair
    included); the block reports the reply through the function it is given."""
    if not tracing.enabled():
        yield _ignore
        return
    attributes: dict[str, AttributeValue] = {
        GEN_AI_OPERATION_NAME: CHAT,
        GEN_AI_PROVIDER_NAME: provider,
        GEN_AI_SYSTEM: provider,  # the name before gen_ai.provider.name, still read by many
        GEN_AI_REQUEST_MODEL: call.model,
        GEN_AI_REQUEST_MAX_TOKENS: call.max_tokens,
        GEN_AI_REQUEST_TEMPERATURE: call.temperature,
        GEN_AI_OUTPUT_TYPE: "json",
        STAGE: call.stage.value,
    }
    content = tracing.content_enabled()
    if content:
        attributes[GEN_AI_SYSTEM_INSTRUCTIONS] = json.dumps(_text(call.system))
        attributes[GEN_AI_INPUT_MESSAGES] = json.dumps([{"role": "user", "parts": _text(user)}])
    with tracing.span(f"{CHAT} {call.model}", kind=SpanKind.CLIENT, attributes=attributes) as span:

        def answered(reply: RawReply) -> None:
            span.set_attributes(
                {
                    GEN_AI_USAGE_INPUT_TOKENS: reply.input_tokens,
                    GEN_AI_USAGE_OUTPUT_TOKENS: reply.output_tokens,
                    GEN_AI_RESPONSE_FINISH_REASONS: [reply.finish_reason or "unknown"],
                }
            )
            for key, name in ((GEN_AI_RESPONSE_MODEL, "model"), (GEN_AI_RESPONSE_ID, "id")):
                value = reply.response.get(name)
                if isinstance(value, str):
                    span.set_attribute(key, value)
            if content:
                span.set_attribute(GEN_AI_OUTPUT_MESSAGES, json.dumps([_output(reply)]))

        yield answered


def _output(reply: RawReply) -> dict[str, Any]:
    payload = reply.payload
    shown = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return {
        "role": "assistant",
        "parts": _text(shown),
        "finish_reason": reply.finish_reason or "unknown",
    }
