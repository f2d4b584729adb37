"""Settings of the fake model server, read from ``FAKEMODEL_*`` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class FakeModelSettings(BaseSettings):
    """Where to listen, how slow every model call is, and how many calls the log keeps."""

    model_config = SettingsConfigDict(env_prefix="FAKEMODEL_", extra="ignore", env_file=None)

    host: str = "127.0.0.1"
    port: int = Field(default=8009, ge=0, le=65535)
    latency_ms: int = Field(default=0, ge=0, le=600_000)
    log_limit: int = Field(default=10_000, ge=1)
