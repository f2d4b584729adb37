"""The Idempotency-Key front of the Actor and Critic: ``Replayer`` in one process.

The same behaviours against every store (SQLite, Redis, memory), across processes, with
bounds and leases, are in ``test_replay_store.py``.
"""

import asyncio

import pytest

from shared.contracts import ActorResult, ModelExchange, Usage
from shared.errors import Conflict
from shared.idempotency import MemoryReplayStore, Replayer, body_digest


def answer(value: int) -> ActorResult:
    return ActorResult(
        output=f"answer {value}",
        usage=Usage(provider="openai", model="m", input_tokens=value),
        exchanges=[ModelExchange(request={"n": value}, status=200)],
    )


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    async def work(self) -> ActorResult:
        self.calls += 1
        await asyncio.sleep(0.01)
        return answer(self.calls)


@pytest.fixture
def replayer() -> Replayer:
    return Replayer(MemoryReplayStore(), owner="test")


class TestReplayer:
    async def test_repeat_with_the_same_key_replays_without_working(self, replayer):
        counter = Counter()
        first = await replayer.run("k", "d", counter.work, ActorResult)
        second = await replayer.run("k", "d", counter.work, ActorResult)
        assert counter.calls == 1
        assert first.exchanges, "the first caller gets the exchanges of its call"
        assert second == first.model_copy(update={"exchanges": []})

    async def test_concurrent_repeats_share_one_call_and_its_exchanges(self, replayer):
        counter = Counter()
        results = await asyncio.gather(
            *[replayer.run("k", "d", counter.work, ActorResult) for _ in range(5)]
        )
        assert counter.calls == 1
        assert all(r == results[0] for r in results)
        assert results[0].exchanges

    async def test_no_key_always_works(self, replayer):
        counter = Counter()
        await replayer.run(None, "d", counter.work, ActorResult)
        await replayer.run(None, "d", counter.work, ActorResult)
        assert counter.calls == 2

    async def test_same_key_other_body_is_a_conflict_while_running_too(self, replayer):
        counter = Counter()
        running = asyncio.create_task(replayer.run("k", "d1", counter.work, ActorResult))
        await asyncio.sleep(0)
        with pytest.raises(Conflict, match="different body"):
            await replayer.run("k", "d2", counter.work, ActorResult)
        await running
        with pytest.raises(Conflict):
            await replayer.run("k", "d2", counter.work, ActorResult)
        assert counter.calls == 1

    async def test_work_survives_a_caller_that_goes_away(self, replayer):
        counter = Counter()
        caller = asyncio.create_task(replayer.run("k", "d", counter.work, ActorResult))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        result = await replayer.run("k", "d", counter.work, ActorResult)
        assert result.output == "answer 1"
        assert counter.calls == 1

    async def test_closing_cancels_running_calls_and_releases_their_claims(self):
        store = MemoryReplayStore()
        replayer = Replayer(store, owner="a")
        started = asyncio.Event()

        async def forever() -> ActorResult:
            started.set()
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

        caller = asyncio.create_task(replayer.run("k", "d", forever, ActorResult))
        await started.wait()
        await replayer.aclose()
        with pytest.raises(asyncio.CancelledError):
            await caller
        other = Replayer(store, owner="b")  # would wait out the 10 s lease of a kept claim
        result = await asyncio.wait_for(other.run("k", "d", Counter().work, ActorResult), 2)
        assert result.output == "answer 1"


def test_body_digest_depends_on_every_field():
    one = answer(1).model_copy(update={"exchanges": []})
    assert body_digest(one) == body_digest(answer(1).model_copy(update={"exchanges": []}))
    assert body_digest(one) != body_digest(one.model_copy(update={"output": "other"}))
