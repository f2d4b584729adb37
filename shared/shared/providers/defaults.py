"""Default model names per provider; every stage can override them."""

from __future__ import annotations

from shared.contracts import Provider

DEMO_MODEL = "scripted-demo"
DEFAULT_MODELS: dict[Provider, str] = {
    Provider.openai: "gpt-5-mini",
    Provider.anthropic: "claude-sonnet-4-6",
}


def model_for(provider: Provider, override: str | None, *, demo: bool) -> str:
    if override:
        return override
    return DEMO_MODEL if demo else DEFAULT_MODELS[provider]
