"""OpenAI (and any OpenAI-compatible server) through the official ``openai`` SDK."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import openai

from shared.providers.base import BaseProvider, ModelCall, RawReply, sdk_errors


class OpenAIProvider(BaseProvider):
    """Chat Completions; the model's family decides the parameters and the output mode
    (strict ``json_schema`` by default, a forced function call, or JSON mode)."""

    name = "openai"
    wire = "openai"
    droppable: ClassVar[dict[str, str | None]] = {
        "temperature": None,
        "top_p": None,
        "reasoning_effort": None,
        "max_tokens": "max_completion_tokens",
        "max_completion_tokens": "max_tokens",
    }

    client: openai.AsyncOpenAI
    sdk_client = openai.AsyncOpenAI

    def build_request(
        self, call: ModelCall, schema_name: str, schema: dict[str, Any], user: str
    ) -> dict[str, Any]:
        """The Chat Completions body for ``call``, shaped by the model's capabilities."""
        caps = self.capabilities(call.model)
        system = call.system
        request: dict[str, Any] = {"model": call.model}
        if caps.send_temperature:
            request["temperature"] = call.temperature
        request[caps.token_param] = call.max_tokens
        if caps.reasoning_effort is not None:
            request["reasoning_effort"] = caps.reasoning_effort
        if caps.output_mode == "json_schema":
            request["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": schema, "strict": True},
            }
        elif caps.output_mode == "tool":
            request["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": schema_name,
                        "description": f"Submit your answer as a {schema_name} object.",
                        "parameters": schema,
                        "strict": True,
                    },
                }
            ]
            request["tool_choice"] = {"type": "function", "function": {"name": schema_name}}
        else:  # JSON mode: valid JSON is enforced, the schema only asked for in the prompt
            request["response_format"] = {"type": "json_object"}
            system = (
                f"{system}\n\nAnswer with one JSON object (a {schema_name}) that follows this "
                f"JSON schema:\n{json.dumps(schema, ensure_ascii=False)}"
            )
        request["messages"] = [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ]
        return self.without_refused(call.model, request)

    async def _send(
        self, call: ModelCall, schema_name: str, schema: dict[str, Any], user: str
    ) -> RawReply:
        request = self.build_request(call, schema_name, schema, user)
        with sdk_errors(self.name, openai, request, self.droppable):
            response = await self.client.chat.completions.create(**request)
        choice = response.choices[0] if response.choices else None
        payload: Any = ""
        if choice is not None:
            message = choice.message
            if message.content:
                payload = message.content
            elif message.tool_calls:
                call0 = message.tool_calls[0]
                payload = getattr(getattr(call0, "function", None), "arguments", "") or ""
        usage = response.usage
        return RawReply(
            payload=payload,
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            request=request,
            response=response.model_dump(mode="json", exclude_none=True),
            finish_reason=choice.finish_reason if choice is not None else None,
        )
