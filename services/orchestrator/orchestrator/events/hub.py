"""Wakes websocket subscribers when new events are committed.

The database is the source of truth: a woken subscriber reads every event after the last
sequence number it sent, so nothing is lost or duplicated, whoever wrote the events.

Writers in this process wake the hub directly. On Postgres a listener (``events.listener``)
also wakes it for every ``NOTIFY crosscheck_events``, so events written by another replica
reach this replica's clients at once; subscribers then poll only as a slow safety net.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from shared.aio import call_on_loop

# How often a subscriber polls when nothing wakes it: the only path for writers in other
# processes when no listener runs (SQLite, or the Postgres listener is reconnecting).
POLL_S = 1.0


class EventHub:
    def __init__(self, *, safety_poll_s: float = POLL_S) -> None:
        # each waiter with the event types it follows (None: every type)
        self._waiters: dict[asyncio.Event, frozenset[str] | None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listening = False
        self._safety_poll_s = safety_poll_s
        # bumped whenever tokens may have been revoked (here, or on another replica): every
        # open websocket checks its token again before it sends anything more
        self.tokens_generation = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def poll_s(self) -> float:
        """How long a subscriber may wait for a wake-up before it reads anyway."""
        return self._safety_poll_s if self._listening else POLL_S

    @property
    def listening(self) -> bool:
        return self._listening

    def set_listening(self, listening: bool) -> None:
        """Whether a cross-replica listener is connected (it wakes the hub for every writer)."""
        self._listening = listening

    def subscribe(self, types: Iterable[str] | None = None) -> asyncio.Event:
        """A waiter woken by commits that may have added events of ``types`` (or any)."""
        waiter = asyncio.Event()
        self._waiters[waiter] = frozenset(types) if types else None
        return waiter

    def unsubscribe(self, waiter: asyncio.Event) -> None:
        self._waiters.pop(waiter, None)

    def notify(self, types: Iterable[str] | None = None) -> None:
        """Safe to call from any thread after a commit that added events. ``types``, when
        the writer knows them, wakes only the waiters that follow one of them (an empty set:
        no events were added); None wakes every waiter."""
        kinds = None if types is None else frozenset(types)
        if kinds is not None and not kinds:
            return
        self._on_loop(self._wake, kinds)

    def tokens_changed(self) -> None:
        """Tokens were revoked (this replica's revocation, or another's notification): wake
        every subscriber so each websocket checks its token now. Safe from any thread."""
        self._on_loop(self._revoked)

    def _on_loop(self, work: Callable[..., None], *args: Any) -> None:
        """Run ``work`` on the hub's loop: now when called there, else scheduled on it from
        this thread; nothing before the hub has a loop."""
        call_on_loop(self._loop, work, *args)

    def _revoked(self) -> None:
        self.tokens_generation += 1
        self._wake(None)

    def _wake(self, kinds: frozenset[str] | None) -> None:
        for waiter, wanted in self._waiters.items():
            if wanted is None or kinds is None or not wanted.isdisjoint(kinds):
                waiter.set()
