"""``CallJournal``: each model call behind one keyed request, journalled as it happens.

A keyed request (a critique) can make several model calls, but the replay store keeps its
result only when the whole request finishes. A process killed between two of its calls lost
the calls it had finished: paid for at the provider, in no run's cost, and paid for again by
the retry. The journal keeps, in the same store, under ``<key>/call/<n>`` (``n`` counts the
request's calls in order, which a retry repeats as long as it replays the same answers):

- the reply (value and usage), stored the moment the call returns;
- ``begun/<i>``: the i-th try of the call was sent, with what is knowable before an
  answer: the prompt's estimated tokens;
- ``ended/<i>``: that try came back with an error (an answer ends it by being stored).

So a call that finishes costs the store two entries (its reply and one ``begun``), within
the store's own bounds (``max_entries``, ``ttl_s``).

A retry of the request (the same key, in any process) asks the journal first. A finished
call is replayed: no model call, and its usage counts once, in the retried result. A try
begun and never ended was cut off in flight: the provider may have charged for it, so its
prompt is counted (``Usage.cut_off_calls``; its output tokens are unknowable) -- once, by
the retry that finds it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel

from shared.contracts import Usage
from shared.logging import get_logger
from shared.providers.base import ModelCall, StructuredReply, estimated_tokens
from shared.replay.store import Busy, Claimed, Finished, ReplayStore, ReplayStoreUnavailable

T = TypeVar("T", bound=BaseModel)

log = get_logger("crosscheck.replay")

MAX_TRIES = 100  # tries of one call a journal looks back on (each one a process that died)

Price = Callable[[str, int, int], float | None]


def journal_for(
    store: ReplayStore, key: str | None, owner: str, provider: object
) -> CallJournal | None:
    """The journal of a keyed request served by ``provider`` (its ``name`` and, when it has
    one, its price table); ``None`` without a key: nothing can be replayed then."""
    if key is None:
        return None
    prices = getattr(provider, "prices", None)
    return CallJournal(
        store,
        key,
        owner,
        provider=str(getattr(provider, "name", "")),
        price=getattr(prices, "cost", None),
    )


async def journalled(
    journal: CallJournal | None,
    call: ModelCall,
    schema: type[T],
    work: Callable[[], Awaitable[StructuredReply[T]]],
) -> tuple[StructuredReply[T], list[Usage]]:
    """``journal.call(...)`` for a keyed request; without a journal, ``work()`` as it is."""
    if journal is None:
        return await work(), []
    return await journal.call(call, schema, work)


def with_cut_off(usage: Usage, cut_off: list[Usage]) -> Usage:
    """``usage`` plus the prompts of the tries of the same call a dead process sent."""
    if not cut_off:
        return usage
    costs = [u.cost_usd for u in (usage, *cut_off)]
    return usage.model_copy(
        update={
            "input_tokens": usage.input_tokens + sum(u.input_tokens for u in cut_off),
            "cost_usd": None if any(c is None for c in costs) else sum(c or 0.0 for c in costs),
            "attempts": usage.attempts + sum(u.attempts for u in cut_off),
            "cut_off_calls": usage.cut_off_calls + sum(u.cut_off_calls for u in cut_off),
        }
    )


def call_digest(call: ModelCall) -> str:
    text = json.dumps([call.model, call.system, call.user, call.max_tokens], ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class CallJournal:
    """The journal of one keyed request; ``call`` wraps each of its model calls in order."""

    def __init__(
        self, store: ReplayStore, key: str, owner: str, *, provider: str, price: Price | None
    ) -> None:
        self.store = store
        self.key = key
        self.owner = owner
        self.provider = provider
        self.price = price
        self._n = 0

    async def call(
        self,
        call: ModelCall,
        schema: type[T],
        work: Callable[[], Awaitable[StructuredReply[T]]],
    ) -> tuple[StructuredReply[T], list[Usage]]:
        """The reply (replayed when journalled) and the usage of tries of this call that
        were cut off in flight by a process that died."""
        base = f"{self.key}/call/{self._n}"
        self._n += 1
        digest = call_digest(call)
        try:
            stored = await self.store.begin(base, digest, self.owner)
        except ReplayStoreUnavailable as error:
            log.warning("call journal not read", key=base, error=error.message)
            return await work(), []
        if isinstance(stored, Finished) and stored.digest == digest:
            saved = json.loads(stored.payload)
            usage = Usage.model_validate(saved["usage"])
            clamped = [str(note) for note in saved.get("clamped", [])]
            return StructuredReply(
                schema.model_validate(saved["value"]), usage, clamped=clamped
            ), []
        cut_off, try_key = await self._tries(base, call, digest)
        try:
            reply = await work()
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):  # an answer, if an error one
                await self._end(try_key, digest)
            if isinstance(stored, Claimed):
                await self._quietly(self.store.release(base, self.owner), base)
            raise
        if isinstance(stored, Claimed | Busy):
            # the stored reply ends the try too: a retry replays it and never looks at tries
            payload = json.dumps(
                {
                    "value": reply.value.model_dump(mode="json"),
                    "usage": reply.usage.model_dump(),
                    "clamped": reply.clamped,
                }
            )
            await self._quietly(self.store.complete(base, self.owner, digest, payload), base)
        else:
            await self._end(try_key, digest)
        return reply, cut_off

    async def _tries(self, base: str, call: ModelCall, digest: str) -> tuple[list[Usage], str]:
        """Count the earlier tries begun and never ended (cut off), and begin this one."""
        tokens = estimated_tokens(call)
        cut_off: list[Usage] = []
        for i in range(MAX_TRIES):
            begun = f"{base}/begun/{i}"
            try:
                state = await self.store.begin(begun, digest, self.owner)
                if isinstance(state, Claimed):
                    payload = json.dumps({"input_tokens": tokens, "model": call.model})
                    await self.store.complete(begun, self.owner, digest, payload)
                    return cut_off, f"{base}/ended/{i}"
                ended = f"{base}/ended/{i}"
                if isinstance(await self.store.begin(ended, digest, self.owner), Claimed):
                    # begun, never ended: cut off; counted once, by whoever finds it first
                    await self.store.complete(ended, self.owner, digest, "cut off")
                    earlier = json.loads(state.payload) if isinstance(state, Finished) else {}
                    cut_off.append(self._cut_off_usage(call, earlier))
            except ReplayStoreUnavailable as error:
                log.warning("call journal not written", key=begun, error=error.message)
                break
        return cut_off, ""

    def _cut_off_usage(self, call: ModelCall, earlier: dict[str, object]) -> Usage:
        tokens = earlier.get("input_tokens")
        input_tokens = tokens if isinstance(tokens, int) else estimated_tokens(call)
        return Usage(
            provider=self.provider,
            model=call.model,
            input_tokens=input_tokens,
            output_tokens=0,
            cost_usd=self.price(call.model, input_tokens, 0) if self.price else None,
            attempts=1,
            cut_off_calls=1,
        )

    async def _end(self, try_key: str, digest: str) -> None:
        if not try_key:
            return
        try:
            if isinstance(await self.store.begin(try_key, digest, self.owner), Claimed):
                await self.store.complete(try_key, self.owner, digest, "ended")
        except ReplayStoreUnavailable as error:
            log.warning("call journal not written", key=try_key, error=error.message)

    @staticmethod
    async def _quietly(step: Awaitable[None], key: str) -> None:
        try:
            await step
        except ReplayStoreUnavailable as error:
            log.warning("call journal not written", key=key, error=error.message)
