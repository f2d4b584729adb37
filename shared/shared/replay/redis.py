"""The Redis replay store: for several processes of one service, or a shared deployment.

Keys, under ``<prefix>`` (``crosscheck:replay:<service>:`` by default):
``done:<key>`` the finished result (expires after ``ttl_s``), ``claim:<key>`` the owner and
digest of a running call (expires after ``lease_s`` unless renewed), and ``index``, a sorted
set of finished keys by time, which evicts the oldest past ``max_entries``. Each operation is
one Lua script, so it is atomic against every other process. Standalone Redis (the scripts
touch keys they compute, which Redis Cluster does not allow).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from shared.replay.store import (
    Begin,
    Bounds,
    Busy,
    Claimed,
    Finished,
    ReplayStoreUnavailable,
)

T = TypeVar("T")

CHECK_TIMEOUT_S = 2.0

# KEYS: done, claim. ARGV: owner, digest, lease_ms.
_BEGIN = """
local done = redis.call('GET', KEYS[1])
if done then return {'done', done} end
local claim = redis.call('GET', KEYS[2])
if claim and string.sub(claim, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\\n' then
  return {'busy', claim}
end
redis.call('SET', KEYS[2], ARGV[1] .. '\\n' .. ARGV[2], 'PX', ARGV[3])
return {'claimed'}
"""

# KEYS: claim. ARGV: owner, lease_ms.
_RENEW = """
local claim = redis.call('GET', KEYS[1])
if claim and string.sub(claim, 1, #ARGV[1] + 1) == ARGV[1] .. '\\n' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: claim. ARGV: owner.
_RELEASE = """
local claim = redis.call('GET', KEYS[1])
if claim and string.sub(claim, 1, #ARGV[1] + 1) == ARGV[1] .. '\\n' then
  redis.call('DEL', KEYS[1])
end
return 0
"""

# KEYS: done, claim, index. ARGV: owner, value, ttl_ms, now_ms, max_entries, key, done prefix.
_COMPLETE = """
if redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3], 'NX') then
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[6])
end
local claim = redis.call('GET', KEYS[2])
if claim and string.sub(claim, 1, #ARGV[1] + 1) == ARGV[1] .. '\\n' then
  redis.call('DEL', KEYS[2])
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', tonumber(ARGV[4]) - tonumber(ARGV[3]))
local excess = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[5])
if excess > 0 then
  local oldest = redis.call('ZPOPMIN', KEYS[3], excess)
  for i = 1, #oldest, 2 do redis.call('DEL', ARGV[7] .. oldest[i]) end
end
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return 0
"""


REDIS_SCHEMES = ("redis", "rediss", "unix")


def redis_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a Redis URL, in words that never repeat it; None if it can."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return "REDIS_URL is not a valid URL (expected redis://[user:password@]host:port/db)"
    if parts.scheme not in REDIS_SCHEMES:
        got = f"{parts.scheme}://" if parts.scheme else "no scheme"
        return f"REDIS_URL must start with redis://, rediss:// or unix:// (got {got})"
    if parts.scheme != "unix" and not parts.hostname:
        return "REDIS_URL has no host (expected redis://host:port/db)"
    return None


def describe_redis_url(url: str) -> str:
    """``redis at host:port/db``: where, never who or with which password."""
    try:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            return f"redis at unix:{parts.path}"
        return f"redis at {parts.hostname or '?'}:{parts.port or 6379}{parts.path or '/0'}"
    except ValueError:
        return "redis at an unparsable URL"


class RedisReplayStore:
    def __init__(self, url: str, *, prefix: str, bounds: Bounds | None = None) -> None:
        self.bounds = bounds or Bounds()
        self.prefix = prefix
        self.description = describe_redis_url(url)
        problem = redis_url_problem(url)
        if problem:
            raise ReplayStoreUnavailable(f"replay store: {problem}")
        self._password = urlsplit(url).password or ""
        try:
            self._client = aioredis.Redis.from_url(
                url,
                decode_responses=True,
                socket_timeout=CHECK_TIMEOUT_S,
                socket_connect_timeout=CHECK_TIMEOUT_S,
            )
        except ValueError as error:
            raise ReplayStoreUnavailable(
                f"replay store {self.description}: bad REDIS_URL: {self._hide(str(error))}"
            ) from error
        self._begin = self._client.register_script(_BEGIN)
        self._renew = self._client.register_script(_RENEW)
        self._release = self._client.register_script(_RELEASE)
        self._complete = self._client.register_script(_COMPLETE)

    def _hide(self, text: str) -> str:
        return text.replace(self._password, "***") if self._password else text

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except (RedisError, OSError) as error:
            reason = self._hide(f"{type(error).__name__}: {error}")
            raise ReplayStoreUnavailable(f"replay store {self.description}: {reason}") from error

    def _keys(self, key: str) -> tuple[str, str]:
        return f"{self.prefix}done:{key}", f"{self.prefix}claim:{key}"

    async def begin(self, key: str, digest: str, owner: str) -> Begin:
        lease_ms = max(1, int(self.bounds.lease_s * 1000))
        answer: list[Any] = await self._call(
            self._begin(keys=self._keys(key), args=[owner, digest, lease_ms])
        )
        if answer[0] == "done":
            seen_digest, payload = json.loads(answer[1])
            return Finished(digest=seen_digest, payload=payload)
        if answer[0] == "busy":
            seen_owner, _, seen_digest = str(answer[1]).partition("\n")
            return Busy(digest=seen_digest, owner=seen_owner)
        return Claimed()

    async def renew(self, key: str, owner: str) -> bool:
        lease_ms = max(1, int(self.bounds.lease_s * 1000))
        renewed = await self._call(self._renew(keys=[self._keys(key)[1]], args=[owner, lease_ms]))
        return bool(renewed)

    async def complete(self, key: str, owner: str, digest: str, payload: str) -> None:
        done, claim = self._keys(key)
        await self._call(
            self._complete(
                keys=[done, claim, f"{self.prefix}index"],
                args=[
                    owner,
                    json.dumps([digest, payload]),
                    max(1, int(self.bounds.ttl_s * 1000)),
                    int(time.time() * 1000),
                    self.bounds.max_entries,
                    key,
                    f"{self.prefix}done:",
                ],
            )
        )

    async def release(self, key: str, owner: str) -> None:
        await self._call(self._release(keys=[self._keys(key)[1]], args=[owner]))

    async def check(self) -> str | None:
        try:
            await self._call(self._client.ping())
        except ReplayStoreUnavailable as error:
            return f"{error.message} (is Redis running? check REDIS_URL)"
        return None

    async def aclose(self) -> None:
        await self._client.aclose()
