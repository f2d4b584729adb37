"""Build the configured provider; the only place that knows the concrete classes."""

from __future__ import annotations

import httpx2

from shared.contracts import Provider
from shared.errors import ConfigurationError
from shared.providers.anthropic_provider import AnthropicProvider
from shared.providers.base import BaseProvider
from shared.providers.openai_provider import OpenAIProvider
from shared.providers.pricing import PriceTable
from shared.providers.settings import ProviderSettings, RoleProviderSettings

KEY_VARS = {Provider.openai: "OPENAI_API_KEY", Provider.anthropic: "ANTHROPIC_API_KEY"}


def build_provider(
    provider: Provider,
    settings: ProviderSettings,
    *,
    http_client: httpx2.AsyncClient | None = None,
) -> BaseProvider:
    """The provider for ``provider``; a role's settings that are ``RoleProviderSettings``
    (the Actor's, the Critic's) override what the model family table decides."""
    api_key = settings.api_key(provider)
    if not api_key:
        raise ConfigurationError(
            f"{KEY_VARS[provider]} is not set. Set it (and optionally "
            f"{KEY_VARS[provider].replace('API_KEY', 'BASE_URL')}), or start the platform with "
            "`crosscheck up` and no keys to use the scripted demo model."
        )
    try:
        prices = PriceTable.from_json(settings.prices_json)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from exc
    cls: type[OpenAIProvider] | type[AnthropicProvider] = (
        OpenAIProvider if provider is Provider.openai else AnthropicProvider
    )
    return cls(
        api_key=api_key,
        base_url=settings.base_url(provider),
        timeout_s=settings.model_timeout_s,
        prices=prices,
        http_client=http_client,
        max_attempts=settings.model_max_attempts,
        retry_initial_s=settings.retry_initial_s,
        retry_max_wait_s=settings.retry_max_wait_s,
        overrides=(
            settings.capability_overrides() if isinstance(settings, RoleProviderSettings) else None
        ),
    )
