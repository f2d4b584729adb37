"""Wakes websocket subscribers when new events are committed.

The database is the source of truth: a woken subscriber reads every event after the last
sequence number it sent, so nothing is lost or duplicated, whoever wrote the events.
"""

from __future__ import annotations

import asyncio


class EventHub:
    def __init__(self) -> None:
        self._waiters: set[asyncio.Event] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def subscribe(self) -> asyncio.Event:
        waiter = asyncio.Event()
        self._waiters.add(waiter)
        return waiter

    def unsubscribe(self, waiter: asyncio.Event) -> None:
        self._waiters.discard(waiter)

    def notify(self) -> None:
        """Safe to call from any thread after a commit that added events."""
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake()
        else:
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        for waiter in self._waiters:
            waiter.set()
