"""Replay the result of a repeated ``Idempotency-Key`` instead of doing the work again.

The Orchestrator keys every peer call by (run, round, role, attempt). When it crashes after
a model call finished but before it recorded the result, the resumed step sends the same
key and gets the stored answer: the model is not called, and not billed, twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Header
from pydantic import BaseModel

from shared.errors import Conflict

T = TypeVar("T", bound=BaseModel)

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)]


def body_digest(body: BaseModel) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


class IdempotencyCache:
    """In-memory, bounded, with expiry. Concurrent repeats share the first call.

    The work runs as its own task, shielded from the request: when a caller disconnects (it
    crashed), the model call still finishes and its result waits for the caller's retry.
    """

    def __init__(self, *, max_entries: int = 10_000, ttl_s: float = 6 * 3600) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._done: OrderedDict[str, tuple[float, str, Any]] = OrderedDict()
        self._running: dict[str, tuple[str, asyncio.Future[Any]]] = {}

    async def run(self, key: str | None, digest: str, work: Callable[[], Awaitable[T]]) -> T:
        if key is None:
            return await work()
        self._expire()
        if key in self._done:
            _, seen_digest, result = self._done[key]
            self._check(key, seen_digest, digest)
            self._done.move_to_end(key)
            replay: T = result
            return replay
        if key in self._running:
            seen_digest, pending = self._running[key]
            self._check(key, seen_digest, digest)
        else:
            pending = asyncio.ensure_future(work())
            self._running[key] = (digest, pending)
            pending.add_done_callback(lambda task: self._settle(key, digest, task))
        shared: T = await asyncio.shield(pending)
        return shared

    def _settle(self, key: str, digest: str, task: asyncio.Future[Any]) -> None:
        self._running.pop(key, None)
        if task.cancelled() or task.exception() is not None:
            return  # a failure is not replayed: the next try runs the work again
        self._done[key] = (time.monotonic(), digest, task.result())
        while len(self._done) > self.max_entries:
            self._done.popitem(last=False)

    @staticmethod
    def _check(key: str, seen: str, digest: str) -> None:
        if seen != digest:
            raise Conflict(f"Idempotency-Key {key!r} was already used with a different body")

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.ttl_s
        while self._done:
            key, (at, _, _) = next(iter(self._done.items()))
            if at >= cutoff:
                break
            self._done.popitem(last=False)
