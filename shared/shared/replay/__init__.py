"""The durable ``Idempotency-Key`` replay store of the Actor and the Critic.

``ReplayStore`` is the protocol; ``SqliteReplayStore`` (the default, a file per service),
``RedisReplayStore`` (when ``REDIS_URL`` is set) and ``MemoryReplayStore`` (tests) implement
it; ``Replayer`` puts one in front of a model call. ``open_replayer`` builds the configured
one in a service's ``lifespan``. Redis is imported only when it is configured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.replay.memory import MemoryReplayStore
from shared.replay.replayer import NOT_STORED, Replayer, new_owner
from shared.replay.sqlite import SqliteReplayStore
from shared.replay.store import (
    Begin,
    Bounds,
    Busy,
    Claimed,
    Finished,
    ReplayStore,
    ReplayStoreUnavailable,
    UnusableReplayStore,
)

if TYPE_CHECKING:
    from shared.settings import ReplaySettings

__all__ = [
    "NOT_STORED",
    "Begin",
    "Bounds",
    "Busy",
    "Claimed",
    "Finished",
    "MemoryReplayStore",
    "ReplayStore",
    "ReplayStoreUnavailable",
    "Replayer",
    "SqliteReplayStore",
    "UnusableReplayStore",
    "new_owner",
    "open_replayer",
    "redis_prefix",
]


def redis_prefix(service: str) -> str:
    return f"crosscheck:replay:{service}:"


async def open_replayer(settings: ReplaySettings, service: str) -> Replayer:
    """The store the settings choose, opened, behind a ``Replayer`` owned by this process."""
    bounds = Bounds(
        max_entries=settings.replay_max_entries,
        ttl_s=settings.replay_ttl_s,
        lease_s=settings.replay_lease_s,
    )
    kind = settings.replay_store_kind
    store: ReplayStore
    if kind == "redis":
        from shared.replay.redis import RedisReplayStore

        assert settings.redis_url is not None  # the settings refuse redis without a URL
        try:
            store = RedisReplayStore(
                settings.redis_url.get_secret_value(), prefix=redis_prefix(service), bounds=bounds
            )
        except ReplayStoreUnavailable as error:
            store = UnusableReplayStore(error.message)
    elif kind == "memory":
        store = MemoryReplayStore(bounds)
    else:
        store = await SqliteReplayStore(settings.replay_db, bounds).open()
    return Replayer(store, owner=new_owner(service))
