"""Settings of the fake model server, read from ``FAKEMODEL_*`` environment variables."""

from __future__ import annotations

import ipaddress
from typing import Self

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class FakeModelSettings(BaseSettings):
    """Where to listen, how slow every model call is, and how many calls the log keeps."""

    model_config = SettingsConfigDict(env_prefix="FAKEMODEL_", extra="ignore", env_file=None)

    host: str = "127.0.0.1"
    port: int = Field(default=8009, ge=0, le=65535)
    latency_ms: int = Field(default=0, ge=0, le=600_000)
    log_limit: int = Field(default=10_000, ge=1)
    allow_non_loopback: bool = Field(
        default=False,
        description="Listen on a non-loopback address. Its /_control API scripts every answer "
        "and reads every request, with no token: only inside an isolated network (the "
        "compose demo's).",
    )

    @model_validator(mode="after")
    def _loopback_only(self) -> Self:
        if self.allow_non_loopback or is_loopback(self.host):
            return self
        raise ValueError(
            f"FAKEMODEL_HOST={self.host} is not a loopback address: the fake model's control "
            "API has no token, so it listens on 127.0.0.1, ::1 or localhost only (set "
            "FAKEMODEL_ALLOW_NON_LOOPBACK=1 inside an isolated container network)"
        )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
