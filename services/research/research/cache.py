"""The result cache: keyed by backend and normalised query, living as long as the query's
time sensitivity allows. SQLite by default, Redis when ``REDIS_URL`` is set, memory as the
fake for tests. The clock is injectable, so a test can step past a lifetime.

What every cache promises (tests/research/test_cache_conformance.py runs it on all three):
a value comes back as it was put (a copy: changing either afterwards changes nothing else),
an empty list is a hit, not a miss; an entry lives while ``clock() < put time + ttl_s`` (a
lifetime of zero or less is never served, an infinite one never lapses); a second put
replaces value and lifetime; caches over the same data (the same file, the same Redis
prefix, the same memory instance) see each other's entries.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from research.corpus import private_db

Clock = Callable[[], float]
Value = list[dict[str, Any]]


def cache_key(backend: str, normalised_query: str) -> str:
    digest = hashlib.sha256(normalised_query.encode()).hexdigest()
    return f"research:{backend}:{digest}"


def _expiry(now: float, ttl_s: float) -> float:
    if math.isnan(ttl_s):
        raise ValueError("a cache lifetime must be a number of seconds, not NaN")
    return now + ttl_s


class ResultCache(Protocol):
    async def get(self, key: str) -> Value | None: ...

    async def put(self, key: str, value: Value, ttl_s: float) -> None: ...

    async def ready(self) -> str | None: ...

    async def aclose(self) -> None: ...


class MemoryCache:
    """Dicts in this process: the fake. Values are kept as JSON text, so what comes back is
    a copy with the types the durable caches give (a tuple comes back a list)."""

    def __init__(self, clock: Clock = time.time) -> None:
        self.clock = clock
        self._entries: dict[str, tuple[str, float]] = {}

    async def get(self, key: str) -> Value | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= self.clock():
            del self._entries[key]
            return None
        value: Value = json.loads(entry[0])
        return value

    async def put(self, key: str, value: Value, ttl_s: float) -> None:
        now = self.clock()
        self._entries[key] = (json.dumps(value), _expiry(now, ttl_s))
        for lapsed in [k for k, (_, expires_at) in self._entries.items() if expires_at <= now]:
            del self._entries[lapsed]

    async def ready(self) -> str | None:
        return None

    async def aclose(self) -> None:
        return None


class SqliteCache:
    def __init__(self, path: Path, clock: Clock = time.time) -> None:
        self.path = path
        self.clock = clock
        self._db = sqlite3.connect(private_db(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS research_cache "
            "(key TEXT PRIMARY KEY, value TEXT NOT NULL, expires_at REAL NOT NULL)"
        )
        # every put deletes the lapsed entries: without this index, a scan of the whole cache
        self._db.execute(
            "CREATE INDEX IF NOT EXISTS research_cache_expires_at ON research_cache (expires_at)"
        )
        self._lock = threading.Lock()

    def _get(self, key: str) -> Value | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value, expires_at FROM research_cache WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            if row[1] <= self.clock():
                self._db.execute("DELETE FROM research_cache WHERE key = ?", (key,))
                return None
        value: Value = json.loads(row[0])
        return value

    def _put(self, key: str, value: Value, ttl_s: float) -> None:
        now = self.clock()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO research_cache (key, value, expires_at) VALUES (?, ?, ?)",
                (key, json.dumps(value), _expiry(now, ttl_s)),
            )
            self._db.execute("DELETE FROM research_cache WHERE expires_at <= ?", (now,))

    async def get(self, key: str) -> Value | None:
        return await asyncio.to_thread(self._get, key)

    async def put(self, key: str, value: Value, ttl_s: float) -> None:
        await asyncio.to_thread(self._put, key, value, ttl_s)

    async def ready(self) -> str | None:
        return None

    async def aclose(self) -> None:
        self._db.close()


class RedisCache:
    """Redis expires entries itself; the stored expiry is checked against the clock too,
    so the injected clock decides in tests as it does for SQLite. Keys are stored under
    ``prefix`` (none by default), so that tests sharing a server do not meet."""

    def __init__(self, url: str, clock: Clock = time.time, *, prefix: str = "") -> None:
        import redis.asyncio as redis

        self.clock = clock
        self.prefix = prefix
        self._redis = redis.Redis.from_url(url)

    async def get(self, key: str) -> Value | None:
        raw = await self._redis.get(self.prefix + key)
        if raw is None:
            return None
        entry = json.loads(raw)
        if entry["expires_at"] <= self.clock():
            await self._redis.delete(self.prefix + key)
            return None
        value: Value = entry["value"]
        return value

    async def put(self, key: str, value: Value, ttl_s: float) -> None:
        expires_at = _expiry(self.clock(), ttl_s)
        if ttl_s <= 0:  # never served: the put only removes what was there
            await self._redis.delete(self.prefix + key)
            return
        raw = json.dumps({"value": value, "expires_at": expires_at})
        # Redis's own expiry, in whole milliseconds, never before the clock's
        px = math.ceil(ttl_s * 1000) if math.isfinite(ttl_s) else None
        await self._redis.set(self.prefix + key, raw, px=px)

    async def ready(self) -> str | None:
        try:
            await self._redis.ping()
        except Exception as exc:  # redis errors carry no URL
            return f"the research cache's Redis is unreachable: {type(exc).__name__}"
        return None

    async def aclose(self) -> None:
        await self._redis.aclose()
