"""OpenAI (and any OpenAI-compatible server) through the official ``openai`` SDK."""

from __future__ import annotations

from typing import Any

import openai

from shared.providers.base import BaseProvider, ModelCall, RawReply, sdk_errors


class OpenAIProvider(BaseProvider):
    """Chat Completions with a JSON-schema ``response_format`` (strict)."""

    name = "openai"

    client: openai.AsyncOpenAI
    sdk_client = openai.AsyncOpenAI

    async def _send(
        self, call: ModelCall, schema_name: str, schema: dict[str, Any], user: str
    ) -> RawReply:
        request: dict[str, Any] = {
            "model": call.model,
            "temperature": call.temperature,
            "max_completion_tokens": call.max_tokens,
            "messages": [
                {"role": "system", "content": call.system},
                {"role": "user", "content": user},
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": schema_name, "schema": schema, "strict": True},
            },
        }
        with sdk_errors(self.name, openai):
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
