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
from typing import Annotated

from fastapi import Depends, Header, Request
from pydantic import BaseModel

from shared.errors import ConfigurationError
from shared.replay import MemoryReplayStore, Replayer, ReplayStore, open_replayer

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]

__all__ = [
    "IdempotencyKey",
    "MemoryReplayStore",
    "ReplayStore",
    "Replayer",
    "ReplayerDep",
    "body_digest",
    "open_replayer",
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
