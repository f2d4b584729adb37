"""Critic settings: ``CRITIC_*`` for this service, provider variables as the SDKs name them."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.providers import ProviderSettings
from shared.settings import ServiceSettings


class CriticSettings(ServiceSettings, ProviderSettings):
    model_config = SettingsConfigDict(env_prefix="CRITIC_", extra="ignore", env_file=None)

    port: int = Field(default=8002, ge=1, le=65535)
    model: str | None = Field(
        default=None, description="Model for critiques; default depends on the provider."
    )
    temperature: float = Field(default=0.2, ge=0.0, le=2.0)
