"""What each model family takes: sampling parameters, the token-limit name, reasoning effort
and the structured-output mode.

Providers' parameter rules differ by model, not by SDK: OpenAI's reasoning models (gpt-5, o1,
o3, o4) refuse ``temperature`` (unless 1) and ``max_tokens``, and take ``max_completion_tokens``
and ``reasoning_effort``; OpenAI-compatible local servers (llama.cpp, vLLM, Ollama) take the
classic ``temperature`` and ``max_tokens``. The first family whose pattern matches the model
name decides; per-role settings (``ACTOR_SEND_TEMPERATURE``, ``CRITIC_TOKEN_PARAM``, ...)
override it; a parameter a server still refuses is dropped by the provider on the fly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

TokenParam = Literal["max_tokens", "max_completion_tokens"]
OutputMode = Literal["json_schema", "tool", "json_object"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high"]
Wire = Literal["openai", "anthropic"]


@dataclass(frozen=True)
class Capabilities:
    """How to ask one model: what is sent and how structured output is requested."""

    family: str
    send_temperature: bool
    token_param: TokenParam
    output_mode: OutputMode
    # Sent only when set (by a role's setting): None leaves the model's own default
    # (medium for the reasoning families), the cost and latency OpenAI documents.
    reasoning_effort: ReasoningEffort | None = None
    # The server turns the schema into a grammar (llama.cpp, vLLM): the schema sent is fitted
    # to the output-token cap, so that the longest reply it allows closes within the cap
    # (shared.providers.fitting).
    fit_to_cap: bool = False


@dataclass(frozen=True)
class CapabilityOverrides:
    """Per-role settings; each field that is set wins over the family's value."""

    send_temperature: bool | None = None
    token_param: TokenParam | None = None
    output_mode: OutputMode | None = None
    reasoning_effort: ReasoningEffort | None = None
    fit_to_cap: bool | None = None

    def apply(self, caps: Capabilities) -> Capabilities:
        changed = {k: v for k, v in vars(self).items() if v is not None}
        return replace(caps, **changed) if changed else caps


@dataclass(frozen=True)
class Family:
    wire: Wire
    pattern: re.Pattern[str]
    capabilities: Capabilities


def _family(wire: Wire, pattern: str, caps: Capabilities) -> Family:
    return Family(wire, re.compile(pattern, re.IGNORECASE), caps)


_OPENAI_REASONING = Capabilities(
    family="openai-reasoning",
    send_temperature=False,
    token_param="max_completion_tokens",
    output_mode="json_schema",
)
_OPENAI_CHAT = Capabilities(
    family="openai-chat",
    send_temperature=True,
    token_param="max_completion_tokens",
    output_mode="json_schema",
)

# First match wins. Names are matched after any router prefix ("openai/gpt-5-mini").
FAMILIES: tuple[Family, ...] = (
    # gpt-5-chat-latest is the non-reasoning chat model of the gpt-5 generation.
    _family("openai", r"gpt-5(\.\d+)?-chat", _OPENAI_CHAT),
    _family("openai", r"(gpt-5|o[134])\b", _OPENAI_REASONING),
    _family("openai", r"(gpt-4o|gpt-4\.1|chatgpt-4o)", _OPENAI_CHAT),
    _family(
        "anthropic",
        r"claude-",
        Capabilities(
            family="anthropic-claude",
            send_temperature=True,
            token_param="max_tokens",
            output_mode="tool",
        ),
    ),
)

# An unknown name on the OpenAI wire is most likely a local or hosted OpenAI-compatible
# server (llama.cpp, vLLM, Ollama, a gateway): they all take the classic `temperature` and
# `max_tokens`, and the first two enforce `json_schema` with a grammar. OpenAI's own newer
# models are named above; one that is not yet gets the 400 once and the provider switches.
UNKNOWN: dict[Wire, Capabilities] = {
    "openai": Capabilities(
        family="openai-compatible",
        send_temperature=True,
        token_param="max_tokens",
        output_mode="json_schema",
        fit_to_cap=True,
    ),
    "anthropic": Capabilities(
        family="anthropic-compatible",
        send_temperature=True,
        token_param="max_tokens",
        output_mode="tool",
        fit_to_cap=True,  # a stricter schema costs a real model nothing
    ),
}


def capabilities_for(
    wire: Wire, model: str, overrides: CapabilityOverrides | None = None
) -> Capabilities:
    """The family's capabilities for ``model`` on ``wire``, with the role's overrides."""
    name = model.rsplit("/", 1)[-1]
    found = next(
        (f.capabilities for f in FAMILIES if f.wire == wire and f.pattern.match(name)),
        UNKNOWN[wire],
    )
    return overrides.apply(found) if overrides is not None else found
