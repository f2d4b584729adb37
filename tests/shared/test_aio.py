"""wait_until_set: a timed wait on an event that never loses a cancellation; call_on_loop:
waking a loop from any thread."""

import asyncio

import pytest

from shared.aio import call_on_loop, wait_until_set


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


async def test_call_on_loop_runs_at_once_on_its_own_loop():
    seen: list[int] = []
    call_on_loop(asyncio.get_running_loop(), seen.append, 1)
    assert seen == [1]  # not deferred to the next turn of the loop


async def test_call_on_loop_from_another_thread_wakes_the_loop():
    loop = asyncio.get_running_loop()
    event = asyncio.Event()
    await asyncio.to_thread(call_on_loop, loop, event.set)
    assert await wait_until_set(event, 5.0)


def test_call_on_loop_before_a_loop_and_after_it_closed_does_nothing():
    seen: list[int] = []
    call_on_loop(None, seen.append, 1)
    loop = asyncio.new_event_loop()
    loop.close()
    call_on_loop(loop, seen.append, 2)  # call_soon_threadsafe would raise on a closed loop
    assert seen == []
