"""Actor settings: ``ACTOR_*`` for this service, provider variables as the SDKs name them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from shared.providers.settings import RoleProviderSettings
from shared.settings import ReplaySettings


class ActorSettings(ReplaySettings, RoleProviderSettings):
    model_config = SettingsConfigDict(env_prefix="ACTOR_", extra="ignore", env_file=None)

    port: int = Field(default=8001, ge=1, le=65535)
    replay_db: Path = Field(
        default=Path("var/replays/actor.sqlite"),
        description="SQLite file of the Idempotency-Key replay store (ACTOR_REPLAY_DB).",
    )
    draft_model: str | None = Field(
        default=None, description="Model for drafts; default depends on the provider."
    )
    revise_model: str | None = Field(default=None, description="Model for revisions.")
    draft_temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    revise_temperature: float = Field(default=0.4, ge=0.0, le=2.0)
