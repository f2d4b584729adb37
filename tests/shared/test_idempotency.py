import asyncio

import pytest
from pydantic import BaseModel

from shared.errors import Conflict
from shared.idempotency import IdempotencyCache


class Answer(BaseModel):
    value: int


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    async def work(self) -> Answer:
        self.calls += 1
        await asyncio.sleep(0.01)
        return Answer(value=self.calls)


class TestIdempotencyCache:
    async def test_repeat_with_the_same_key_replays_without_working(self):
        cache, counter = IdempotencyCache(), Counter()
        first = await cache.run("k", "d", counter.work)
        second = await cache.run("k", "d", counter.work)
        assert first == second == Answer(value=1)
        assert counter.calls == 1

    async def test_concurrent_repeats_share_one_call(self):
        cache, counter = IdempotencyCache(), Counter()
        results = await asyncio.gather(*[cache.run("k", "d", counter.work) for _ in range(5)])
        assert {r.value for r in results} == {1}
        assert counter.calls == 1

    async def test_no_key_always_works(self):
        cache, counter = IdempotencyCache(), Counter()
        await cache.run(None, "d", counter.work)
        await cache.run(None, "d", counter.work)
        assert counter.calls == 2

    async def test_same_key_other_body_is_a_conflict(self):
        cache, counter = IdempotencyCache(), Counter()
        await cache.run("k", "d1", counter.work)
        with pytest.raises(Conflict):
            await cache.run("k", "d2", counter.work)

    async def test_failures_are_not_replayed(self):
        cache = IdempotencyCache()
        attempts = []

        async def flaky() -> Answer:
            attempts.append(1)
            if len(attempts) == 1:
                raise RuntimeError("provider down")
            return Answer(value=7)

        with pytest.raises(RuntimeError):
            await cache.run("k", "d", flaky)
        assert (await cache.run("k", "d", flaky)).value == 7

    async def test_bounded(self):
        cache, counter = IdempotencyCache(max_entries=2), Counter()
        for key in ("a", "b", "c"):
            await cache.run(key, "d", counter.work)
        await cache.run("a", "d", counter.work)
        assert counter.calls == 4

    async def test_work_survives_a_caller_that_goes_away(self):
        cache, counter = IdempotencyCache(), Counter()
        caller = asyncio.create_task(cache.run("k", "d", counter.work))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        result = await cache.run("k", "d", counter.work)
        assert result.value == 1
        assert counter.calls == 1
