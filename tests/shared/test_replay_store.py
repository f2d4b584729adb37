"""One conformance suite for every replay store: SQLite on disk, Redis, and memory.

"Two processes" here are two ``Replayer``s with their own owner ids and their own store
objects over the same data (the same SQLite file, the same Redis prefix; for memory, the
same instance): what two Critic processes, or a Critic and its restart, see.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import closing
from typing import Any

import pytest
import redis.asyncio as aioredis

from shared.contracts import CritiqueResult, ErrorClass, ModelExchange, Usage, Verdict
from shared.errors import ConfigurationError, Conflict
from shared.replay import (
    Bounds,
    Busy,
    Claimed,
    MemoryReplayStore,
    Replayer,
    ReplayStore,
    SqliteReplayStore,
)
from shared.replay.redis import RedisReplayStore
from tests.support.databases import require_redis

KEY = "run_1:1:critic:1"


def critique(n: int) -> CritiqueResult:
    return CritiqueResult(
        verdict=Verdict.revise,
        confidence=0.8,
        issues=[],
        reflection=f"critique {n}",
        error_class=ErrorClass.logic,
        usage=Usage(provider="anthropic", model="m", input_tokens=100 + n, cost_usd=0.01),
        exchanges=[ModelExchange(request={"messages": ["long"]}, response={"id": n}, status=200)],
    )


class Model:
    """Stands in for the paid model call: counts calls, can be held open or made to fail."""

    def __init__(self, *, seconds: float = 0.01) -> None:
        self.calls = 0
        self.seconds = seconds
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    async def __call__(self) -> CritiqueResult:
        self.calls += 1
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(self.seconds)
        return critique(self.calls)


class Backend:
    """Opens stores of one kind over shared data; closes and cleans up after the test."""

    def __init__(self, kind: str, tmp_path, redis_url: str | None) -> None:
        self.kind = kind
        self.path = tmp_path / "replays.sqlite"
        self.redis_url = redis_url
        self.prefix = f"crosscheck-test:{uuid.uuid4().hex}:"
        self.opened: list[ReplayStore] = []
        self._memory: dict[Bounds, MemoryReplayStore] = {}

    async def store(self, bounds: Bounds | None = None) -> Any:
        bounds = bounds or Bounds()
        opened: ReplayStore
        if self.kind == "memory":
            opened = self._memory.setdefault(bounds, MemoryReplayStore(bounds))
        elif self.kind == "sqlite":
            opened = await SqliteReplayStore(self.path, bounds).open()
        else:
            assert self.redis_url is not None
            opened = RedisReplayStore(self.redis_url, prefix=self.prefix, bounds=bounds)
        self.opened.append(opened)
        return opened

    async def process(self, name: str, bounds: Bounds | None = None) -> Replayer:
        return Replayer(await self.store(bounds), owner=name)

    async def redis_keys(self) -> list[str]:
        assert self.redis_url is not None
        client = aioredis.Redis.from_url(self.redis_url, decode_responses=True)
        try:
            return [key async for key in client.scan_iter(match=f"{self.prefix}*")]
        finally:
            await client.aclose()

    async def close(self) -> None:
        for store in self.opened:
            await store.aclose()
        if self.kind == "redis":  # only this test's prefix, never the whole database
            keys = await self.redis_keys()
            if keys:
                client = aioredis.Redis.from_url(self.redis_url or "")
                await client.delete(*keys)
                await client.aclose()


@pytest.fixture(scope="module")
def redis_server_url() -> str:
    return require_redis()  # fails, with what to do, when the test Redis is not there


@pytest.fixture(params=["sqlite", "redis", "memory"])
async def backend(request, tmp_path) -> AsyncIterator[Backend]:
    url = request.getfixturevalue("redis_server_url") if request.param == "redis" else None
    opened = Backend(request.param, tmp_path, url)
    yield opened
    await opened.close()


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    start = time.monotonic()
    result = await call()
    return result, time.monotonic() - start


class TestReplay:
    async def test_another_process_replays_without_the_exchanges_and_keeps_usage(self, backend):
        first_process, restarted = await backend.process("a"), await backend.process("b")
        model = Model()
        fresh = await first_process.run(KEY, "d", model, CritiqueResult)
        replayed = await restarted.run(KEY, "d", model, CritiqueResult)
        assert model.calls == 1
        assert fresh.exchanges, "the caller that paid gets the exchanges"
        assert replayed.exchanges == []
        assert replayed == fresh.model_copy(update={"exchanges": []})
        assert replayed.usage.input_tokens == 101
        assert replayed.usage.cost_usd == 0.01

    async def test_a_used_key_with_another_body_is_a_conflict(self, backend):
        first_process, other = await backend.process("a"), await backend.process("b")
        model = Model()
        await first_process.run(KEY, "digest-1", model, CritiqueResult)
        with pytest.raises(Conflict, match="different body"):
            await other.run(KEY, "digest-2", model, CritiqueResult)
        assert model.calls == 1

    async def test_a_result_older_than_the_ttl_is_gone(self, backend):
        bounds = Bounds(ttl_s=0.3)
        replayer = await backend.process("a", bounds)
        model = Model()
        await replayer.run(KEY, "d", model, CritiqueResult)
        await replayer.run(KEY, "d", model, CritiqueResult)
        assert model.calls == 1
        await asyncio.sleep(0.45)
        again = await replayer.run(KEY, "d", model, CritiqueResult)
        assert model.calls == 2
        assert again.reflection == "critique 2"

    async def test_past_max_entries_the_oldest_goes_first(self, backend):
        replayer = await backend.process("a", Bounds(max_entries=2))
        model = Model()
        for key in ("a", "b", "c"):
            await replayer.run(key, "d", model, CritiqueResult)
        assert (await replayer.run("c", "d", model, CritiqueResult)).reflection == "critique 3"
        assert (await replayer.run("b", "d", model, CritiqueResult)).reflection == "critique 2"
        assert model.calls == 3
        again = await replayer.run("a", "d", model, CritiqueResult)  # evicted: called again
        assert again.reflection == "critique 4"
        assert model.calls == 4

    async def test_a_failure_is_not_stored_and_frees_the_key_at_once(self, backend):
        bounds = Bounds(lease_s=30)  # a claim left behind would hold the next try for 30 s
        first_process = await backend.process("a", bounds)
        other = await backend.process("b", bounds)
        with pytest.raises(RuntimeError, match="provider down"):
            await first_process.run(KEY, "d", _failing, CritiqueResult)
        model = Model()
        result = await asyncio.wait_for(other.run(KEY, "d", model, CritiqueResult), 2)
        assert model.calls == 1
        assert result.exchanges, "a fresh call, not a replay"


async def _failing() -> CritiqueResult:
    raise RuntimeError("provider down")


class TestInFlight:
    async def test_concurrent_callers_in_two_processes_share_one_call(self, backend):
        one, two = await backend.process("a"), await backend.process("b")
        model = Model()
        model.gate = asyncio.Event()
        first = asyncio.create_task(one.run(KEY, "d", model, CritiqueResult))
        await model.started.wait()
        waiters = [
            asyncio.create_task(replayer.run(KEY, "d", model, CritiqueResult))
            for replayer in (one, one, two, two)
        ]
        await asyncio.sleep(0.3)  # two polls the store a few times meanwhile
        assert not any(w.done() for w in waiters)
        model.gate.set()
        results = await asyncio.gather(first, *waiters)
        assert model.calls == 1
        assert {r.reflection for r in results} == {"critique 1"}
        assert results[3].exchanges == results[4].exchanges == []  # process two: from the store

    async def test_another_body_while_the_call_runs_elsewhere_is_a_conflict(self, backend):
        one, two = await backend.process("a"), await backend.process("b")
        model = Model()
        model.gate = asyncio.Event()
        first = asyncio.create_task(one.run(KEY, "d1", model, CritiqueResult))
        await model.started.wait()
        with pytest.raises(Conflict):
            await asyncio.wait_for(two.run(KEY, "d2", model, CritiqueResult), 2)
        model.gate.set()
        await first

    async def test_a_heartbeat_keeps_a_long_call_from_being_taken_over(self, backend):
        bounds = Bounds(lease_s=0.25)
        one, two = await backend.process("a", bounds), await backend.process("b", bounds)
        model = Model(seconds=0.8)  # over three leases long
        first = asyncio.create_task(one.run(KEY, "d", model, CritiqueResult))
        await model.started.wait()
        second = await asyncio.wait_for(two.run(KEY, "d", model, CritiqueResult), 5)
        assert model.calls == 1
        assert second == (await first).model_copy(update={"exchanges": []})

    async def test_a_dead_owners_claim_is_taken_over_when_its_lease_lapses(self, backend):
        bounds = Bounds(lease_s=0.4)
        dead = await backend.store(bounds)
        assert isinstance(await dead.begin(KEY, "d", "killed-process"), Claimed)
        survivor = await backend.process("b", bounds)
        model = Model()
        result, waited = await timed(lambda: survivor.run(KEY, "d", model, CritiqueResult))
        assert model.calls == 1
        assert result.reflection == "critique 1"
        assert 0.25 <= waited < 2.0, waited

    async def test_a_live_claim_is_reported_busy_with_its_owner(self, backend):
        store = await backend.store()
        assert isinstance(await store.begin(KEY, "d", "owner-a"), Claimed)
        busy = await store.begin(KEY, "d", "owner-b")
        assert busy == Busy(digest="d", owner="owner-a")
        assert await store.renew(KEY, "owner-a")
        assert not await store.renew(KEY, "owner-b")


class TestRedis:
    async def test_keys_are_namespaced_per_service(self, redis_server_url, tmp_path):
        actor = Backend("redis", tmp_path, redis_server_url)
        critic = Backend("redis", tmp_path, redis_server_url)
        try:
            model = Model()
            await (await actor.process("a")).run(KEY, "d", model, CritiqueResult)
            await (await critic.process("c")).run(KEY, "d", model, CritiqueResult)
            assert model.calls == 2  # the critic's key is not the actor's
            assert f"{actor.prefix}done:{KEY}" in await actor.redis_keys()
            assert f"{critic.prefix}done:{KEY}" in await critic.redis_keys()
        finally:
            await actor.close()
            await critic.close()
        assert await actor.redis_keys() == []  # cleaned up: only our own prefix


class TestSqlite:
    async def test_the_file_is_in_wal_mode_and_survives_a_reopen(self, tmp_path):
        path = tmp_path / "nested" / "critic.sqlite"
        store = await SqliteReplayStore(path).open()
        await Replayer(store, owner="a").run(KEY, "d", Model(), CritiqueResult)
        await store.aclose()
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        reopened = await SqliteReplayStore(path).open()
        try:
            model = Model()
            replayed = await Replayer(reopened, owner="b").run(KEY, "d", model, CritiqueResult)
        finally:
            await reopened.aclose()
        assert model.calls == 0
        assert replayed.reflection == "critique 1"

    async def test_a_path_that_cannot_be_a_file_stops_the_start_with_the_reason(self, tmp_path):
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("")
        with pytest.raises(ConfigurationError, match="not-a-folder"):
            await SqliteReplayStore(blocker / "critic.sqlite").open()

    async def test_a_waiting_request_does_not_stall_the_event_loop(self, tmp_path):
        """Another process holds the file's write lock: this store's statements wait on
        their own thread while the loop keeps serving."""
        path = tmp_path / "critic.sqlite"
        store = await SqliteReplayStore(path).open()
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        begin = asyncio.create_task(store.begin(KEY, "d", "a"))
        start = time.monotonic()
        for _ in range(10):
            await asyncio.sleep(0.02)
        # A blocked loop would sit out the store's 5 s busy timeout before these 0.2 s of
        # sleeps could finish; a busy machine stretches them by far less than that.
        assert time.monotonic() - start < 4.0, "the loop was blocked"
        assert not begin.done()
        holder.execute("COMMIT")
        holder.close()
        assert isinstance(await begin, Claimed)
        await store.aclose()
