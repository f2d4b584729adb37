"""Run a service app under uvicorn with the platform's logging."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import uvicorn
from fastapi import FastAPI

from shared.logging import configure_logging
from shared.settings import ServiceSettings

S = TypeVar("S", bound=ServiceSettings)


def serve(service: str, settings: S, factory: Callable[[S], FastAPI]) -> None:
    configure_logging(
        service, level=settings.log_level, json=settings.log_json, secrets=settings.secrets()
    )
    uvicorn.run(
        factory(settings),
        host=settings.host,
        port=settings.port,
        log_config=None,  # keep our redacting handler on uvicorn's loggers
        access_log=False,  # the app logs each request itself
        timeout_graceful_shutdown=5,
    )
