"""Settings base for every service: environment-driven, failing fast on bad secrets."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

WEAK_TOKENS = frozenset({"", "changeme", "change-me", "secret", "token", "password", "test"})
MIN_TOKEN_CHARS = 16


class ServiceSettings(BaseSettings):
    """What every deployable needs. Subclasses set ``env_prefix`` (``ACTOR_``, ...)."""

    model_config = SettingsConfigDict(extra="ignore", env_file=None)

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    log_level: str = Field(
        default="INFO", validation_alias=AliasChoices("CROSSCHECK_LOG_LEVEL", "log_level")
    )
    log_json: bool = Field(
        default=True, validation_alias=AliasChoices("CROSSCHECK_LOG_JSON", "log_json")
    )
    service_token: SecretStr = Field(
        validation_alias=AliasChoices("CROSSCHECK_SERVICE_TOKEN", "service_token"),
        description="Shared bearer token for service-to-service calls.",
    )
    otlp_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT", "otlp_endpoint"),
        description="Base URL of an OpenTelemetry collector's OTLP/HTTP receiver (e.g. "
        "`http://127.0.0.1:4318`): set, the service exports its traces to `<it>/v1/traces`; "
        "unset, tracing is off and costs nothing. The exporter's other `OTEL_EXPORTER_OTLP_*` "
        "variables (headers, timeout, compression) apply as OpenTelemetry defines them.",
    )
    trace_content: bool = Field(
        default=False,
        validation_alias=AliasChoices("CROSSCHECK_TRACE_CONTENT", "trace_content"),
        description="Record prompts and model outputs on the model-call spans "
        "(`gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages`). "
        "Off by default: they hold what tasks say. Keys and tokens are never recorded.",
    )

    @field_validator("service_token")
    @classmethod
    def _strong_token(cls, value: SecretStr) -> SecretStr:
        raw = value.get_secret_value()
        if raw.lower() in WEAK_TOKENS or len(raw) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"CROSSCHECK_SERVICE_TOKEN must be a random string of at least "
                f"{MIN_TOKEN_CHARS} characters (for example: python -c "
                f"'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return value

    @field_validator("otlp_endpoint")
    @classmethod
    def _collector_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "OTEL_EXPORTER_OTLP_ENDPOINT must be an http(s) URL, e.g. http://127.0.0.1:4318"
            )
        return value.strip()

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("log level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return level

    def secrets(self) -> list[str]:
        """Every secret value this service holds, so the logger can redact them verbatim."""
        found: list[str] = []
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr) and value.get_secret_value():
                found.append(value.get_secret_value())
        return found


ReplayStoreKind = Literal["sqlite", "redis", "memory"]


class ReplaySettings(ServiceSettings):
    """A service that replays repeated ``Idempotency-Key``s (the Actor, the Critic).

    The store is SQLite at ``replay_db`` (``<PREFIX>REPLAY_DB``; each service sets its own
    default), Redis when ``REDIS_URL`` is set, or memory when ``CROSSCHECK_REPLAY_STORE``
    says so (not durable: for tests).
    """

    replay_db: Path = Field(
        default=Path("var/replays/service.sqlite"),
        description="SQLite file of the replay store (relative to the working directory).",
    )
    replay_store: ReplayStoreKind | None = Field(
        default=None,
        validation_alias=AliasChoices("CROSSCHECK_REPLAY_STORE", "replay_store"),
        description="sqlite, redis or memory; unset: redis when REDIS_URL is set, else sqlite.",
    )
    redis_url: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("REDIS_URL", "redis_url"),
        description="redis://[user:password@]host:port/db; the replay store lives there.",
    )
    replay_ttl_s: float = Field(
        default=6 * 3600.0,
        gt=0,
        validation_alias=AliasChoices("CROSSCHECK_REPLAY_TTL_S", "replay_ttl_s"),
        description="How long a finished result can be replayed.",
    )
    replay_max_entries: int = Field(
        default=10_000,
        ge=1,
        le=10_000_000,
        validation_alias=AliasChoices("CROSSCHECK_REPLAY_MAX_ENTRIES", "replay_max_entries"),
        description="How many finished results are kept; the oldest go first.",
    )
    replay_lease_s: float = Field(
        default=10.0,
        gt=0,
        le=300,
        validation_alias=AliasChoices("CROSSCHECK_REPLAY_LEASE_S", "replay_lease_s"),
        description="Lease of a running call's claim, renewed every third of it.",
    )

    @field_validator("replay_ttl_s", "replay_lease_s")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value

    @field_validator("redis_url", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        """An empty ``REDIS_URL`` means no Redis. A malformed one is not refused here (the
        error would print the URL, password included): ``/readyz`` reports it instead."""
        raw = value.get_secret_value() if isinstance(value, SecretStr) else value
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            return None
        return raw.strip() if isinstance(raw, str) else value

    @model_validator(mode="after")
    def _store_has_what_it_needs(self) -> ReplaySettings:
        if self.replay_store == "redis" and self.redis_url is None:
            raise ValueError("CROSSCHECK_REPLAY_STORE=redis needs REDIS_URL")
        return self

    @property
    def replay_store_kind(self) -> ReplayStoreKind:
        if self.replay_store is not None:
            return self.replay_store
        return "redis" if self.redis_url is not None else "sqlite"

    def secrets(self) -> list[str]:
        """Also the password inside ``REDIS_URL`` on its own, as it may be logged apart."""
        found = super().secrets()
        if self.redis_url is not None:
            password = urlsplit(self.redis_url.get_secret_value()).password
            if password:
                found.extend({password, unquote(password)})
        return found
