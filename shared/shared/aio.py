"""Small asyncio helpers that keep cancellation intact."""

from __future__ import annotations

import asyncio


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
