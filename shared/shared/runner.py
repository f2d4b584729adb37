"""Run a service app under uvicorn with the platform's logging."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI

from shared.logging import configure_logging
from shared.settings import ServiceSettings

S = TypeVar("S", bound=ServiceSettings)


def freeze_after_startup(app: FastAPI) -> FastAPI:
    """Once the app has started, move every object alive then (modules, classes, the
    engine, the clients: nearly the whole heap, nearly all of it alive until shutdown) out
    of the cyclic garbage collector's sight with ``gc.freeze()``.

    Without it each full collection walks that whole heap, about 100 ms with the
    Orchestrator's imports, holding the interpreter lock: every request waits it out. The
    first came during the first burst of runs after start-up. Garbage made later is still
    collected; frozen objects are still freed by reference counting when they die (a frozen
    object that later ends up in a reference cycle is not: the price of the freeze)."""
    started = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[Any]:
        async with started(app) as state:
            gc.collect()  # what is garbage now is not frozen
            gc.freeze()
            yield state

    app.router.lifespan_context = lifespan
    return app


def serve(service: str, settings: S, factory: Callable[[S], FastAPI]) -> None:
    configure_logging(
        service, level=settings.log_level, json=settings.log_json, secrets=settings.secrets()
    )
    uvicorn.run(
        freeze_after_startup(factory(settings)),
        host=settings.host,
        port=settings.port,
        log_config=None,  # keep our redacting handler on uvicorn's loggers
        access_log=False,  # the app logs each request itself
        timeout_graceful_shutdown=5,
    )
