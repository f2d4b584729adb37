"""Critic settings: ``CRITIC_*`` for this service, provider variables as the SDKs name them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.providers import ProviderSettings
from shared.settings import ReplaySettings


class CriticSettings(ReplaySettings, ProviderSettings):
    model_config = SettingsConfigDict(env_prefix="CRITIC_", extra="ignore", env_file=None)

    port: int = Field(default=8002, ge=1, le=65535)
    replay_db: Path = Field(
        default=Path("var/replays/critic.sqlite"),
        description="SQLite file of the Idempotency-Key replay store (CRITIC_REPLAY_DB).",
    )
    model: str | None = Field(
        default=None, description="Model for critiques; default depends on the provider."
    )
    temperature: float = Field(default=0.2, ge=0.0, le=2.0)
