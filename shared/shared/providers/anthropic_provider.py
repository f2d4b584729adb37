"""Anthropic through the official ``anthropic`` SDK: structured output by a forced tool call."""

from __future__ import annotations

from typing import Any

import anthropic

from shared.errors import InvalidModelOutput
from shared.logging import get_logger
from shared.providers.base import BaseProvider, ModelCall, RawReply, sdk_errors

log = get_logger("crosscheck.providers.anthropic")


class AnthropicProvider(BaseProvider):
    """Messages API; the answer is the ``input`` of a tool the model is forced to call."""

    name = "anthropic"

    client: anthropic.AsyncAnthropic
    sdk_client = anthropic.AsyncAnthropic
    # SDK 2.x has no `temperature` argument: the wire field goes in `extra_body` until the
    # API refuses it once; from then on this provider stops sending it (and says so).
    send_temperature = True

    async def _create(self, request: dict[str, Any]) -> anthropic.types.Message:
        params = {k: v for k, v in request.items() if k != "temperature"}
        extra = {"temperature": request["temperature"]} if "temperature" in request else None
        try:
            message: anthropic.types.Message = await self.client.messages.create(
                **params, extra_body=extra
            )
            return message
        except anthropic.BadRequestError as exc:
            if extra is None or "temperature" not in exc.message.lower():
                raise
            log.warning("the Anthropic API refused `temperature`; sending requests without it")
            self.send_temperature = False
            request.pop("temperature", None)
            retried: anthropic.types.Message = await self.client.messages.create(**params)
            return retried

    async def _send(
        self, call: ModelCall, schema_name: str, schema: dict[str, Any], user: str
    ) -> RawReply:
        request: dict[str, Any] = {
            "model": call.model,
            "max_tokens": call.max_tokens,
            "system": call.system,
            "messages": [{"role": "user", "content": user}],
            "tools": [
                {
                    "name": schema_name,
                    "description": f"Submit your answer as a {schema_name} object.",
                    "input_schema": schema,
                }
            ],
            "tool_choice": {"type": "tool", "name": schema_name},
        }
        if self.send_temperature:
            request["temperature"] = call.temperature
        with sdk_errors(self.name, anthropic):
            response = await self._create(request)
        payload: Any = None
        for block in response.content:
            if block.type == "tool_use" and block.name == schema_name:
                payload = block.input
                break
        if payload is None:
            # Prose where a tool was forced (or a reply cut off before its JSON closed): no
            # repair request can parse what is not there; say what came back instead.
            text = " ".join(b.text for b in response.content if b.type == "text")
            raise InvalidModelOutput(
                f"the {self.name} model '{call.model}' did not call the '{schema_name}' tool: "
                f"the reply has no tool_use block (stop_reason: {response.stop_reason}, "
                f"{response.usage.output_tokens} of {call.max_tokens} output tokens; "
                f"text begins {text[:80]!r})"
            )
        return RawReply(
            payload=payload,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
            request=request,
            response=response.model_dump(mode="json", exclude_none=True),
        )
