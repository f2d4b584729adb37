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
    l1_max_tokens: int = Field(
        default=1024,
        ge=64,
        le=32_768,
        description="Most output tokens an L1 critique call asks for; the cap sent is what "
        "the request needs (3 issues, its reviewer points), at most this and "
        "CROSSCHECK_MAX_OUTPUT_TOKENS (CRITIC_L1_MAX_TOKENS).",
    )
    l2_max_tokens: int = Field(
        default=2048,
        ge=64,
        le=32_768,
        description="The same for L2 (5 issues) (CRITIC_L2_MAX_TOKENS).",
    )
    l3_max_tokens: int = Field(
        default=2048,
        ge=64,
        le=32_768,
        description="The same for L3 (8 issues, and the second round's re-tested issues) "
        "(CRITIC_L3_MAX_TOKENS).",
    )
    l1_budget_s: float = Field(default=60.0, gt=0, le=3600)
    l2_budget_s: float = Field(default=90.0, gt=0, le=3600)
    l3_budget_s: float = Field(default=180.0, gt=0, le=3600)
