"""Login throttling and bounded password hashing.

Failed logins are counted per account (username) and per client (address). Past a few free
failures each further one doubles the wait before the next try, up to a cap; the answer
meanwhile is 429 with ``Retry-After``, decided before any hashing, so a flood of wrong
passwords costs almost nothing. A success clears the account's count (not the client's:
one good password must not buy a client fresh guesses at other accounts). Failures are
forgotten after ``window_s``. The counts live in the process: with several replicas each
applies the limits on its own.

Argon2 takes 64 MiB and tens of milliseconds per hash, so at most ``hash_slots`` hashes run
at once; past ``queue_limit`` waiting logins the answer is 429 at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from shared.errors import AppError

T = TypeVar("T")


class TooManyRequests(AppError):
    """429: wait ``retry_after`` seconds (also sent as ``Retry-After``)."""

    status_code = 429

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = max(1, math.ceil(retry_after))


@dataclass(frozen=True)
class Limit:
    free_failures: int
    base_s: float = 1.0
    cap_s: float = 300.0

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row: none for the free ones, then
        ``base_s``, doubling with each further failure, up to ``cap_s``."""
        over = failures - self.free_failures
        if over <= 0:
            return 0.0
        return float(min(self.cap_s, self.base_s * 2 ** min(over - 1, 32)))


@dataclass
class _Entry:
    failures: int
    last: float


class LoginThrottle:
    def __init__(
        self,
        *,
        account: Limit | None = None,
        client: Limit | None = None,
        window_s: float = 900.0,
        max_entries: int = 100_000,
        hash_slots: int = 2,
        queue_limit: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = {"account": account or Limit(5), "client": client or Limit(20)}
        self.window_s = window_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._slots = asyncio.Semaphore(hash_slots)
        self._queue_limit = queue_limit
        self._waiting = 0

    def check(self, username: str, client: str) -> None:
        """Raise 429 when the account or the client must wait before another try."""
        now = self.clock()
        for kind, key in (("account", username.lower()), ("client", client)):
            entry = self._entries.get((kind, key))
            if entry is None:
                continue
            if now - entry.last > self.window_s:
                del self._entries[(kind, key)]
                continue
            wait = entry.last + self.limits[kind].delay(entry.failures) - now
            if wait > 0:
                raise TooManyRequests(
                    f"too many failed logins for this {kind}: try again in {math.ceil(wait)} s",
                    retry_after=wait,
                )

    def failed(self, username: str, client: str) -> None:
        now = self.clock()
        for key in (("account", username.lower()), ("client", client)):
            entry = self._entries.pop(key, None)
            if entry is None or now - entry.last > self.window_s:
                entry = _Entry(0, now)
            entry.failures += 1
            entry.last = now
            self._entries[key] = entry  # most recent last: the oldest go first
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def succeeded(self, username: str) -> None:
        self._entries.pop(("account", username.lower()), None)

    async def hashing(self, work: Callable[[], T], *, login: tuple[str, str] | None = None) -> T:
        """Run one password hash or check on a thread, a bounded number at once. For a
        ``login`` (username, client) the throttle is checked before waiting and again once a
        slot is free (failures that finished meanwhile count), and the queue is bounded."""
        if login is not None:
            self.check(*login)
            if self._waiting >= self._queue_limit:
                raise TooManyRequests("too many logins at once: try again shortly", retry_after=1)
        self._waiting += 1
        try:
            async with self._slots:
                if login is not None:
                    self.check(*login)
                return await asyncio.to_thread(work)
        finally:
            self._waiting -= 1
