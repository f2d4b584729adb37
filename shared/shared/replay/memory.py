"""The in-memory replay store: the fake for tests, and a store that a restart forgets."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from shared.replay.store import Begin, Bounds, Busy, Claimed, Finished


@dataclass(slots=True)
class _Claim:
    owner: str
    digest: str
    until: float


class MemoryReplayStore:
    """Dicts in this process. Two ``Replayer``s sharing one instance behave like two
    processes sharing a durable store, which is how the cross-process tests use it."""

    def __init__(self, bounds: Bounds | None = None) -> None:
        self.bounds = bounds or Bounds()
        self.description = "memory (not durable)"
        self._done: OrderedDict[str, tuple[float, Finished]] = OrderedDict()
        self._claims: dict[str, _Claim] = {}

    async def begin(self, key: str, digest: str, owner: str) -> Begin:
        now = time.time()
        self._expire(now)
        if key in self._done:
            return self._done[key][1]
        claim = self._claims.get(key)
        if claim is not None and claim.until > now and claim.owner != owner:
            return Busy(digest=claim.digest, owner=claim.owner)
        self._claims[key] = _Claim(owner, digest, now + self.bounds.lease_s)
        return Claimed()

    async def renew(self, key: str, owner: str) -> bool:
        claim = self._claims.get(key)
        if claim is None or claim.owner != owner:
            return False
        claim.until = time.time() + self.bounds.lease_s
        return True

    async def complete(self, key: str, owner: str, digest: str, payload: str) -> None:
        now = time.time()
        self._expire(now)
        if key not in self._done:
            self._done[key] = (now, Finished(digest=digest, payload=payload))
        await self.release(key, owner)
        while len(self._done) > self.bounds.max_entries:
            self._done.popitem(last=False)
        for lapsed in [k for k, c in self._claims.items() if c.until <= now]:
            del self._claims[lapsed]

    async def release(self, key: str, owner: str) -> None:
        claim = self._claims.get(key)
        if claim is not None and claim.owner == owner:
            del self._claims[key]

    async def check(self) -> str | None:
        return None

    async def aclose(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._done)

    def _expire(self, now: float) -> None:
        cutoff = now - self.bounds.ttl_s
        while self._done:
            at, _ = next(iter(self._done.values()))
            if at >= cutoff:
                break
            self._done.popitem(last=False)
