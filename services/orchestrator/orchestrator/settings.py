"""Orchestrator settings: ``ORCHESTRATOR_*`` plus the platform-wide names."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from shared.settings import MIN_TOKEN_CHARS, WEAK_TOKENS, ServiceSettings


class OrchestratorSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="ORCHESTRATOR_", extra="ignore", env_file=None)

    port: int = Field(default=8000, ge=1, le=65535)
    database_url: str = Field(
        default="sqlite:///var/crosscheck.sqlite",
        validation_alias=AliasChoices("DATABASE_URL", "database_url"),
        description="SQLAlchemy URL of the read model and the DBOS system tables.",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("CROSSCHECK_ADMIN_TOKEN", "admin_token"),
        description="Bootstrap admin bearer token (stored hashed); mints the other tokens.",
    )
    actor_url: str = Field(
        default="http://127.0.0.1:8001", validation_alias=AliasChoices("ACTOR_URL", "actor_url")
    )
    critic_url: str = Field(
        default="http://127.0.0.1:8002", validation_alias=AliasChoices("CRITIC_URL", "critic_url")
    )
    sandbox_url: str = Field(
        default="http://127.0.0.1:8003",
        validation_alias=AliasChoices("SANDBOX_URL", "sandbox_url"),
    )
    peer_timeout_s: float = Field(default=300.0, gt=0)
    peer_max_attempts: int = Field(default=6, ge=1, le=50)
    peer_retry_initial_s: float = Field(default=0.5, ge=0)
    peer_retry_backoff: float = Field(default=2.0, ge=1)
    executor_id: str = Field(default="local", min_length=1, max_length=100)
    application_version: str = Field(
        default="crosscheck-1", description="Pinned so pending runs recover across deploys."
    )
    executor_threads: int = Field(default=8, ge=1, le=256)
    run_migrations: bool = Field(default=True)
    review_sweep_s: float = Field(
        default=1.0, gt=0, description="How often review deadlines are checked."
    )
    dbos_poll_s: float = Field(
        default=1.0,
        ge=0.001,
        le=60,
        description="DBOS's notification-listener poll interval; shutdown waits up to this long.",
    )

    @field_validator("admin_token")
    @classmethod
    def _strong_admin(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        raw = value.get_secret_value()
        if raw.lower() in WEAK_TOKENS or len(raw) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"CROSSCHECK_ADMIN_TOKEN must be a random string of at least {MIN_TOKEN_CHARS} "
                "characters"
            )
        return value

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")
