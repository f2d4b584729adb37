"""Settings base for every service: environment-driven, failing fast on bad secrets."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr, field_validator
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
