"""Critic settings: ``CRITIC_*`` for this service, provider variables as the SDKs name them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.providers.settings import RoleProviderSettings
from shared.settings import ReplaySettings


class CriticSettings(ReplaySettings, RoleProviderSettings):
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
    profiles_dir: Path | None = Field(
        default=None,
        description="A folder of extra profile files (*.toml) beside the shipped ones "
        "(CRITIC_PROFILES_DIR).",
    )
    l1_max_tokens: int = Field(default=256, ge=64, le=32_768)
    l2_max_tokens: int = Field(default=512, ge=64, le=32_768)
    l3_max_tokens: int = Field(default=512, ge=64, le=32_768)
    l1_budget_s: float = Field(default=60.0, gt=0, le=3600)
    l2_budget_s: float = Field(default=90.0, gt=0, le=3600)
    l3_budget_s: float = Field(default=180.0, gt=0, le=3600)
