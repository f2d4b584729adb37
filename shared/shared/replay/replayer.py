"""``Replayer``: run a model call at most once per ``Idempotency-Key``, whatever the store.

- A key whose result is stored is answered from the store (``exchanges`` is then ``[]``:
  only what is needed to replay is kept, ``usage`` included).
- A key already running in this process waits for that call (one shared task, shielded, so
  a caller that disconnects does not cancel the model call).
- A key running in another process (or in a process that died) is claimed in the store by
  its owner, with a lease the owner renews while its call runs; this process polls until the
  result appears, or the lease lapses and it takes the call over.
- A failed call stores nothing and releases its claim: the next try calls the model again.
- The result is written to the store before the caller gets it, so before any response.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel

from shared.errors import Conflict
from shared.logging import get_logger
from shared.replay.store import Busy, Claimed, Finished, ReplayStore, ReplayStoreUnavailable

T = TypeVar("T", bound=BaseModel)

log = get_logger("crosscheck.replay")

# Never stored: the full SDK requests and responses of each model round trip.
NOT_STORED = frozenset({"exchanges"})


def new_owner(service: str) -> str:
    """A claim owner id: unique per process start, readable in the store."""
    return f"{service}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Replayer:
    """One per service process: ``owner`` names this process's claims in the store; the
    claim is renewed every third of the store's lease, and a waiter polls every ``poll_s``
    (a tenth of the lease, at most 0.1 s)."""

    def __init__(
        self, store: ReplayStore, *, owner: str | None = None, poll_s: float | None = None
    ) -> None:
        self.store = store
        self.owner = owner or new_owner("replayer")
        self.lease_s = store.bounds.lease_s
        self.poll_s = poll_s or min(0.1, self.lease_s / 10)
        self._running: dict[str, tuple[str, asyncio.Task[BaseModel]]] = {}

    async def run(
        self,
        key: str | None,
        digest: str,
        work: Callable[[], Awaitable[T]],
        result_type: type[T],
    ) -> T:
        """``work()``'s result, or the stored one for ``key``; a new body for a used key is
        a 409 ``Conflict``. No key: ``work()`` every time."""
        if key is None:
            return await work()
        running = self._running.get(key)
        if running is not None:
            _check(key, running[0], digest)
            task = running[1]
        else:
            task = asyncio.create_task(self._resolve(key, digest, work, result_type))
            self._running[key] = (digest, task)
            task.add_done_callback(lambda done: self._settled(key, done))
        result = await asyncio.shield(task)
        if not isinstance(result, result_type):  # pragma: no cover - one type per route
            raise TypeError(f"{key!r} resolved to {type(result).__name__}")
        return result

    def _settled(self, key: str, task: asyncio.Task[BaseModel]) -> None:
        if self._running.get(key, (None, None))[1] is task:
            del self._running[key]
        if not task.cancelled():
            task.exception()  # retrieved: every caller may have gone away

    async def _resolve(
        self, key: str, digest: str, work: Callable[[], Awaitable[T]], result_type: type[T]
    ) -> T:
        while True:
            state = await self.store.begin(key, digest, self.owner)
            if isinstance(state, Finished):
                _check(key, state.digest, digest)
                return result_type.model_validate_json(state.payload)
            if isinstance(state, Claimed):
                break
            assert isinstance(state, Busy)
            _check(key, state.digest, digest)
            await asyncio.sleep(self.poll_s)
        heartbeat = asyncio.create_task(self._heartbeat(key))
        try:
            result = await work()
        except BaseException:
            heartbeat.cancel()
            try:
                await asyncio.shield(self.store.release(key, self.owner))
            except ReplayStoreUnavailable as error:
                log.warning("replay claim not released", key=key, error=error.message)
            raise
        heartbeat.cancel()
        try:
            await self.store.complete(
                key, self.owner, digest, result.model_dump_json(exclude=set(NOT_STORED))
            )
        except ReplayStoreUnavailable as error:
            # The model was paid for: answer anyway; only a repeat of this key costs again.
            log.error("replay result not stored", key=key, error=error.message)
        return result

    async def _heartbeat(self, key: str) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                if not await self.store.renew(key, self.owner):
                    log.warning("replay claim lost to another owner", key=key)
                    return
            except ReplayStoreUnavailable as error:
                log.warning("replay claim not renewed", key=key, error=error.message)

    async def check(self) -> str | None:
        return await self.store.check()

    async def aclose(self) -> None:
        """Cancel calls still running (their claims are released), then close the store."""
        tasks = [task for _, task in self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.store.aclose()


def _check(key: str, seen: str, digest: str) -> None:
    if seen != digest:
        raise Conflict(f"Idempotency-Key {key!r} was already used with a different body")
