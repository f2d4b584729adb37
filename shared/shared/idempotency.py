"""Replay the result of a repeated ``Idempotency-Key`` instead of doing the work again.

The Orchestrator keys every peer call by (run, round, role, attempt). When it crashes after
a model call finished but before it recorded the result, the resumed step sends the same
key and gets the stored answer: the model is not called, and not billed, twice. The store
is durable (SQLite on disk by default, Redis when ``REDIS_URL`` is set): see
``shared.replay``. A replayed result has ``exchanges: []``; everything else, ``usage``
included, is as first answered.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, FastAPI, Header, Request
from pydantic import BaseModel

from shared.errors import ConfigurationError
from shared.logging import get_logger
from shared.replay import MemoryReplayStore, Replayer, ReplayStore, open_replayer

if TYPE_CHECKING:
    from shared.settings import ReplaySettings

log = get_logger("crosscheck.replay")

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]

__all__ = [
    "IdempotencyKey",
    "MemoryReplayStore",
    "ReplayStore",
    "Replayer",
    "ReplayerDep",
    "body_digest",
    "open_replayer",
    "replay_ready",
    "replay_store",
]


def body_digest(body: BaseModel) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def get_replayer(request: Request) -> Replayer:
    """The service's ``Replayer``, opened in its ``lifespan`` as ``app.state.replays``."""
    replayer = getattr(request.app.state, "replays", None)
    if not isinstance(replayer, Replayer):
        raise ConfigurationError("the replay store is not open")
    return replayer


ReplayerDep = Annotated[Replayer, Depends(get_replayer)]


@asynccontextmanager
async def replay_store(
    app: FastAPI, settings: ReplaySettings, service: str
) -> AsyncIterator[Replayer]:
    """The service's replay store, open for the app's lifetime as ``app.state.replays``. A
    store that is not ready yet (Redis down) is logged and reported by ``/readyz``."""
    replayer = await open_replayer(settings, service)
    app.state.replays = replayer
    log.info("replay store open", store=replayer.store.description)
    problem = await replayer.check()
    if problem:
        log.error("replay store not ready", reason=problem)
    try:
        yield replayer
    finally:
        await replayer.aclose()


async def replay_ready(app: FastAPI) -> str | None:
    """The ``/readyz`` check of a service with a replay store: None when it answers."""
    replayer = getattr(app.state, "replays", None)
    if not isinstance(replayer, Replayer):
        return "the replay store is not open"
    return await replayer.check()
