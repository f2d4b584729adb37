"""The result cache: keyed by backend and normalised query, living as long as the query's
time sensitivity allows. SQLite by default, Redis when ``REDIS_URL`` is set. The clock is
injectable, so a test can step past a lifetime."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from research.corpus import private_db

Clock = Callable[[], float]


def cache_key(backend: str, normalised_query: str) -> str:
    digest = hashlib.sha256(normalised_query.encode()).hexdigest()
    return f"research:{backend}:{digest}"


class ResultCache(Protocol):
    async def get(self, key: str) -> list[dict[str, Any]] | None: ...

    async def put(self, key: str, value: list[dict[str, Any]], ttl_s: float) -> None: ...

    async def ready(self) -> str | None: ...

    async def aclose(self) -> None: ...


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
        self._lock = threading.Lock()

    def _get(self, key: str) -> list[dict[str, Any]] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT value, expires_at FROM research_cache WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                return None
            if row[1] <= self.clock():
                self._db.execute("DELETE FROM research_cache WHERE key = ?", (key,))
                return None
        value: list[dict[str, Any]] = json.loads(row[0])
        return value

    def _put(self, key: str, value: list[dict[str, Any]], ttl_s: float) -> None:
        now = self.clock()
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO research_cache (key, value, expires_at) VALUES (?, ?, ?)",
                (key, json.dumps(value), now + ttl_s),
            )
            self._db.execute("DELETE FROM research_cache WHERE expires_at <= ?", (now,))

    async def get(self, key: str) -> list[dict[str, Any]] | None:
        return await asyncio.to_thread(self._get, key)

    async def put(self, key: str, value: list[dict[str, Any]], ttl_s: float) -> None:
        await asyncio.to_thread(self._put, key, value, ttl_s)

    async def ready(self) -> str | None:
        return None

    async def aclose(self) -> None:
        self._db.close()


class RedisCache:
    """Redis expires entries itself; the stored expiry is checked against the clock too,
    so the injected clock decides in tests as it does for SQLite."""

    def __init__(self, url: str, clock: Clock = time.time) -> None:
        import redis.asyncio as redis

        self.clock = clock
        self._redis = redis.Redis.from_url(url)

    async def get(self, key: str) -> list[dict[str, Any]] | None:
        raw = await self._redis.get(key)
        if raw is None:
            return None
        entry = json.loads(raw)
        if entry["expires_at"] <= self.clock():
            await self._redis.delete(key)
            return None
        value: list[dict[str, Any]] = entry["value"]
        return value

    async def put(self, key: str, value: list[dict[str, Any]], ttl_s: float) -> None:
        entry = {"value": value, "expires_at": self.clock() + ttl_s}
        await self._redis.set(key, json.dumps(entry), px=max(1, int(ttl_s * 1000)))

    async def ready(self) -> str | None:
        try:
            await self._redis.ping()
        except Exception as exc:  # redis errors carry no URL
            return f"the research cache's Redis is unreachable: {type(exc).__name__}"
        return None

    async def aclose(self) -> None:
        await self._redis.aclose()
