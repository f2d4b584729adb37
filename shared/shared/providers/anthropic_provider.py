"""Anthropic through the official ``anthropic`` SDK: structured output by a forced tool call."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import anthropic

from shared.providers.base import BaseProvider, ModelCall, RawReply, sdk_errors

# Wire fields the SDK (2.x) has no argument for: they travel in `extra_body`.
_EXTRA_BODY = ("temperature", "top_p")


class AnthropicProvider(BaseProvider):
    """Messages API; the answer is the ``input`` of a tool the model is forced to call (or,
    by the model's capabilities, an ``output_config.format`` schema or a prompt-only schema)."""

    name = "anthropic"
    wire = "anthropic"
    # `max_tokens` is required on this wire: never dropped.
    droppable: ClassVar[dict[str, str | None]] = {"temperature": None, "top_p": None}

    client: anthropic.AsyncAnthropic
    sdk_client = anthropic.AsyncAnthropic

    def build_request(
        self, call: ModelCall, schema_name: str, schema: dict[str, Any], user: str
    ) -> dict[str, Any]:
        """The Messages body for ``call``, shaped by the model's capabilities. Extended
        thinking and reasoning effort are not used on this wire."""
        caps = self.capabilities(call.model)
        system = call.system
        # Anthropic names the token cap `max_tokens` whatever the family; it is required.
        request: dict[str, Any] = {"model": call.model, "max_tokens": call.max_tokens}
        if caps.output_mode == "tool":
            request["tools"] = [
                {
                    "name": schema_name,
                    "description": f"Submit your answer as a {schema_name} object.",
                    "input_schema": schema,
                }
            ]
            request["tool_choice"] = {"type": "tool", "name": schema_name}
        elif caps.output_mode == "json_schema":
            request["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        else:
            system = (
                f"{system}\n\nAnswer with only one JSON object (a {schema_name}) that follows "
                f"this JSON schema:\n{json.dumps(schema, ensure_ascii=False)}"
            )
        request["system"] = system
        request["messages"] = [{"role": "user", "content": user}]
        if caps.send_temperature:
            request["temperature"] = call.temperature
        return self.without_refused(call.model, request)

    async def _send(
        self, call: ModelCall, schema_name: str, schema: dict[str, Any], user: str
    ) -> RawReply:
        request = self.build_request(call, schema_name, schema, user)
        params = {k: v for k, v in request.items() if k not in _EXTRA_BODY}
        extra = {k: request[k] for k in _EXTRA_BODY if k in request} or None
        with sdk_errors(self.name, anthropic, request, self.droppable):
            response: anthropic.types.Message = await self.client.messages.create(
                **params, extra_body=extra
            )
        payload: Any = None
        text = " ".join(b.text for b in response.content if b.type == "text")
        for block in response.content:
            if block.type == "tool_use" and block.name == schema_name:
                payload = block.input
                break
        problem = None
        if payload is None:
            payload = text
            if "tools" in request:
                # Prose where a tool was forced (or a reply cut off before its JSON closed):
                # say what came back, not a JSON parse error of the prose.
                problem = (
                    f"the {self.name} model '{call.model}' did not call the '{schema_name}' "
                    f"tool: the reply has no tool_use block"
                )
        return RawReply(
            payload=payload,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            request=request,
            response=response.model_dump(mode="json", exclude_none=True),
            finish_reason=response.stop_reason,
            problem=problem,
        )
