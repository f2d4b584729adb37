"""One conformance suite for every research result cache: SQLite on disk, Redis, and the
in-memory fake. "Another process" is a second cache object over the same data: the same
SQLite file, the same Redis prefix, the same memory instance."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from research.cache import MemoryCache, RedisCache, ResultCache, SqliteCache, cache_key
from tests.research.conftest import Clock
from tests.support.databases import drop_redis_prefix, redis_keys_under, require_redis

HOUR_S = 3600.0


def evidence(n: int = 1, *, url: str = "https://example.org/golden-gate") -> list[dict]:
    return [
        {
            "url": url,
            "title": "Golden Gate Bridge",
            "snippet": f"The bridge opened in 1937 (item {n}) — « ünïcode »",
            "distilled": None,
            "retrieved_at": "2027-01-15T08:00:00+00:00",
            "source": "corpus",
            "span": [0, 42 + n],
        }
    ]


class Caches:
    """Opens caches of one kind over shared data; closes them and cleans up afterwards."""

    def __init__(self, kind: str, tmp_path, redis_url: str | None, clock: Clock) -> None:
        self.kind = kind
        self.clock = clock
        self.path = tmp_path / "research-cache.sqlite"
        self.redis_url = redis_url
        self.prefix = f"crosscheck-test:research-cache:{uuid.uuid4().hex}:"
        self.opened: list[ResultCache] = []
        self._memory: MemoryCache | None = None

    def open(self) -> ResultCache:
        cache: ResultCache
        if self.kind == "memory":
            self._memory = self._memory or MemoryCache(self.clock)
            cache = self._memory
        elif self.kind == "sqlite":
            cache = SqliteCache(self.path, self.clock)
        else:
            assert self.redis_url is not None
            cache = RedisCache(self.redis_url, self.clock, prefix=self.prefix)
        self.opened.append(cache)
        return cache

    async def close(self) -> None:
        for cache in self.opened:
            await cache.aclose()
        if self.redis_url is not None:
            await drop_redis_prefix(self.redis_url, self.prefix)


@pytest.fixture(scope="module")
def redis_server_url() -> str:
    return require_redis()  # fails, with what to do, when the test Redis is not there


@pytest.fixture(params=["sqlite", "redis", "memory"])
async def caches(request, tmp_path, clock) -> AsyncIterator[Caches]:
    url = request.getfixturevalue("redis_server_url") if request.param == "redis" else None
    opened = Caches(request.param, tmp_path, url, clock)
    yield opened
    await opened.close()


KEY = cache_key("corpus", "golden gate bridge")


class TestStoring:
    async def test_a_put_value_comes_back_as_it_was_put(self, caches):
        cache = caches.open()
        await cache.put(KEY, evidence(), HOUR_S)
        assert await cache.get(KEY) == evidence()

    async def test_a_key_never_put_is_a_miss(self, caches):
        cache = caches.open()
        await cache.put(KEY, evidence(), HOUR_S)
        assert await cache.get(cache_key("corpus", "eiffel tower")) is None
        assert await cache.get(cache_key("tavily", "golden gate bridge")) is None

    async def test_an_empty_result_is_a_hit_not_a_miss(self, caches):
        cache = caches.open()
        await cache.put(KEY, [], HOUR_S)
        assert await cache.get(KEY) == []

    async def test_keys_are_independent(self, caches):
        cache = caches.open()
        keys = [cache_key("corpus", f"query {i}") for i in range(5)]
        await asyncio.gather(*(cache.put(k, evidence(i), HOUR_S) for i, k in enumerate(keys)))
        found = await asyncio.gather(*(cache.get(k) for k in keys))
        assert found == [evidence(i) for i in range(5)]

    async def test_a_second_put_replaces_the_value(self, caches):
        cache = caches.open()
        await cache.put(KEY, evidence(1), HOUR_S)
        await cache.put(KEY, evidence(2, url="https://example.org/other"), HOUR_S)
        assert await cache.get(KEY) == evidence(2, url="https://example.org/other")

    async def test_what_comes_back_is_a_copy(self, caches):
        cache = caches.open()
        value = evidence()
        await cache.put(KEY, value, HOUR_S)
        value[0]["title"] = "changed by the caller after the put"
        first = await cache.get(KEY)
        assert first is not None
        first[0]["snippet"] = "changed by the caller after the get"
        assert await cache.get(KEY) == evidence()

    async def test_another_process_sees_the_entry(self, caches):
        writer, reader = caches.open(), caches.open()
        await writer.put(KEY, evidence(), HOUR_S)
        assert await reader.get(KEY) == evidence()

    async def test_a_cache_is_ready(self, caches):
        assert await caches.open().ready() is None


class TestLifetime:
    async def test_an_entry_lives_until_its_lifetime_ends_to_the_second(self, caches, clock):
        cache = caches.open()
        await cache.put(KEY, evidence(), HOUR_S)
        clock.now += HOUR_S - 1
        assert await cache.get(KEY) == evidence()
        clock.now += 1
        assert await cache.get(KEY) is None
        clock.now -= 1  # a lapsed entry is gone, not hidden
        assert await cache.get(KEY) is None

    async def test_another_process_sees_the_entry_lapse(self, caches, clock):
        writer, reader = caches.open(), caches.open()
        await writer.put(KEY, evidence(), HOUR_S)
        clock.now += HOUR_S
        assert await reader.get(KEY) is None

    async def test_a_second_put_replaces_the_lifetime(self, caches, clock):
        cache = caches.open()
        await cache.put(KEY, evidence(1), 7 * 24 * HOUR_S)
        await cache.put(KEY, evidence(2), HOUR_S)
        clock.now += HOUR_S
        assert await cache.get(KEY) is None

    async def test_a_put_after_the_lapse_starts_a_new_lifetime(self, caches, clock):
        cache = caches.open()
        await cache.put(KEY, evidence(1), HOUR_S)
        clock.now += 2 * HOUR_S
        await cache.put(KEY, evidence(2), HOUR_S)
        clock.now += HOUR_S - 1
        assert await cache.get(KEY) == evidence(2)

    @pytest.mark.parametrize("ttl_s", [0.0, -1.0, -math.inf])
    async def test_a_lifetime_of_zero_or_less_is_never_served(self, caches, ttl_s):
        cache = caches.open()
        await cache.put(KEY, evidence(1), HOUR_S)
        await cache.put(KEY, evidence(2), ttl_s)
        assert await cache.get(KEY) is None  # and the older value is not served either

    async def test_an_infinite_lifetime_never_lapses(self, caches, clock):
        cache = caches.open()
        await cache.put(KEY, evidence(), math.inf)
        clock.now += 100 * 365 * 24 * HOUR_S
        assert await cache.get(KEY) == evidence()

    async def test_a_lifetime_that_is_not_a_number_is_refused(self, caches):
        cache = caches.open()
        with pytest.raises(ValueError, match="NaN"):
            await cache.put(KEY, evidence(), math.nan)
        assert await cache.get(KEY) is None

    async def test_a_short_lifetime_lapses_on_the_wall_clock_too(self, caches, clock):
        """Under the real clock (and, for Redis, the server's own expiry) a lifetime of a
        fraction of a second ends."""
        import time

        caches.clock = time.time
        cache = caches.open()
        await cache.put(KEY, evidence(), 0.05)
        assert await cache.get(KEY) == evidence()
        await asyncio.sleep(0.1)
        assert await cache.get(KEY) is None


class TestRedisKeys:
    async def test_entries_live_under_the_prefix_and_redis_expires_them(
        self, redis_server_url, tmp_path, clock
    ):
        caches = Caches("redis", tmp_path, redis_server_url, clock)
        try:
            await caches.open().put(KEY, evidence(), HOUR_S)
            assert await redis_keys_under(redis_server_url, caches.prefix) == [caches.prefix + KEY]
            client = aioredis.Redis.from_url(redis_server_url)
            try:
                ttl_ms = await client.pttl(caches.prefix + KEY)
            finally:
                await client.aclose()
        finally:
            await caches.close()
        assert HOUR_S * 1000 - 5000 < ttl_ms <= HOUR_S * 1000
        assert await redis_keys_under(redis_server_url, caches.prefix) == []
