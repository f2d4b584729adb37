"""wait_until_set: a timed wait on an event that never loses a cancellation."""

import asyncio

import pytest

from shared.aio import wait_until_set


async def test_it_says_whether_the_event_was_set():
    event = asyncio.Event()
    assert await wait_until_set(event, 0.01) is False
    event.set()
    assert await wait_until_set(event, 5) is True


async def test_a_cancel_that_arrives_as_the_event_is_set_still_ends_a_waiting_loop():
    # The shape of the webhook worker: clear, (work), wait, forever. With asyncio.wait_for on
    # Python 3.11 the cancellation below is swallowed and the loop never ends.
    event = asyncio.Event()
    rounds = 0

    async def forever() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            event.clear()
            await wait_until_set(event, 5)

    task = asyncio.create_task(forever())
    await asyncio.sleep(0.01)  # the task waits
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=2)
    assert rounds == 1
