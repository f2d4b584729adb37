"""Small asyncio helpers: waits that keep cancellation intact, and waking a loop from any
thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


async def wait_until_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait for ``event`` at most ``timeout_s`` seconds; True when it was set.

    Not ``asyncio.wait_for``: on Python 3.11, a task cancelled just as the event is set
    returns from ``wait_for`` normally, the cancellation lost, so a loop around it runs on and
    a shutdown waiting for that task never ends. ``asyncio.timeout`` keeps the cancellation.
    """
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


def call_on_loop(
    loop: asyncio.AbstractEventLoop | None, work: Callable[..., None], *args: Any
) -> None:
    """Run ``work(*args)`` on ``loop`` from any thread: at once when called on that loop,
    else scheduled on it (``call_soon_threadsafe``). Nothing happens before there is a loop
    or after it closed."""
    if loop is None or loop.is_closed():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        work(*args)
    else:
        loop.call_soon_threadsafe(work, *args)
