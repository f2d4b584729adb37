"""A Critic killed mid-critique: the model calls it already made are paid for once and all
reach the retried critique's usage (so the run's cost): a finished call is replayed from the
journal, not repeated; a call cut off in flight is counted by its prompt."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from critic.app import create_app
from critic.profiles import ProfileBook
from critic.service import CriticService, DepthPlan, DepthTable
from shared.contracts import CritiqueRequest, Depth, TaskKind, Usage
from shared.providers import ModelCall
from shared.providers.base import StructuredReply, estimated_tokens
from shared.providers.pricing import PriceTable
from shared.replay import MemoryReplayStore, ReplayStore, SqliteReplayStore, new_owner
from shared.replay.journal import CallJournal
from tests.critic.conftest import issue, scripted
from tests.support.apps import serving
from tests.support.factories import critic_settings

T = TypeVar("T", bound=BaseModel)

KEY = "run_1:1:critic:1"
MODEL = "claude-sonnet-4-6"
PRICES = PriceTable({MODEL: (3.0, 15.0)})
OUTPUT = "The sky is blue because the sea reflects it."
FIRST = scripted(
    issues=[issue(quote="the sea reflects it", suggestion="Rayleigh scattering.")],
    error_class="logic",
)
SECOND = scripted(
    issues=[issue(quote="the sea reflects it", suggestion="Say: Rayleigh scattering.")],
    error_class="logic",
)


class Provider:
    """A model that answers the scripted critiques in turn, 100 tokens in and 10 out each;
    with ``hang_on`` set, that call (1-based) never answers: the process dies during it."""

    name = "anthropic"

    def __init__(self, *replies: dict[str, Any], hang_on: int | None = None) -> None:
        self.replies = list(replies)
        self.hang_on = hang_on
        self.calls: list[ModelCall] = []
        self.hanging = asyncio.Event()

    async def structured(
        self, call: ModelCall, schema: type[T], schema_name: str, check: Any = None
    ) -> StructuredReply[T]:
        self.calls.append(call)
        if len(self.calls) == self.hang_on:
            self.hanging.set()
            await asyncio.Event().wait()
        value = schema.model_validate(self.replies.pop(0))
        usage = Usage(
            provider=self.name,
            model=call.model,
            input_tokens=100,
            output_tokens=10,
            cost_usd=PRICES.cost(call.model, 100, 10),
        )
        return StructuredReply(value=value, usage=usage)

    async def aclose(self) -> None:
        pass


def critic(provider: Provider) -> CriticService:
    plans = {d: DepthPlan(d, 2000, 60.0) for d in (Depth.L1, Depth.L2, Depth.L3)}
    return CriticService(
        provider,
        model=MODEL,
        temperature=0.0,
        max_tokens=2000,
        profiles=ProfileBook.load(),
        depths=DepthTable(plans),
    )


@pytest.fixture(params=["memory", "sqlite"])
async def store(request, tmp_path):
    """The store both Critic processes share: what a restart keeps (the Critic's file)."""
    if request.param == "memory":
        yield MemoryReplayStore()
        return
    opened = await SqliteReplayStore(tmp_path / "critic.sqlite").open()
    yield opened
    await opened.aclose()


def journal(store: ReplayStore) -> CallJournal:
    """One per process start (a new owner), as the Critic's route builds it per request."""
    return CallJournal(store, KEY, new_owner("critic"), provider="anthropic", price=PRICES.cost)


REQUEST = CritiqueRequest(
    task="Why is the sky blue?", output=OUTPUT, kind=TaskKind.text, round=1, depth=Depth.L3
)


async def killed_during_call(store: ReplayStore, n: int, *replies: dict[str, Any]) -> None:
    """A Critic process that dies while its n-th model call is in flight."""
    provider = Provider(*replies, hang_on=n)
    task = asyncio.create_task(critic(provider).critique(REQUEST, journal(store)))
    await asyncio.wait_for(provider.hanging.wait(), 30)
    task.cancel()  # the closest an in-process test gets to SIGKILL: nothing after it runs
    with pytest.raises(asyncio.CancelledError):
        await task


class TestKilledMidCritique:
    async def test_a_finished_call_is_replayed_and_a_cut_off_one_counted_by_its_prompt(self, store):
        # L3 asks twice; the process dies during the second ask, after the first came back
        await killed_during_call(store, 2, FIRST, SECOND)
        retry = Provider(SECOND)
        result = await critic(retry).critique(REQUEST, journal(store))
        # the first call is not repeated: the retry asks the model once, for the second round
        assert len(retry.calls) == 1
        cut_prompt = estimated_tokens(retry.calls[0])
        assert result.rounds == 2
        # every call paid for is in the usage: the first (replayed), the cut-off second
        # (its prompt only), and the retry's second
        assert result.usage.input_tokens == 100 + cut_prompt + 100
        assert result.usage.output_tokens == 10 + 0 + 10
        assert result.usage.cut_off_calls == 1
        expected = PRICES.cost(MODEL, 200 + cut_prompt, 20)
        assert result.usage.cost_usd == pytest.approx(expected)

    async def test_a_cut_off_call_is_counted_once_however_often_the_critique_is_retried(
        self, store
    ):
        await killed_during_call(store, 1, FIRST)
        first = await critic(Provider(FIRST, SECOND)).critique(REQUEST, journal(store))
        again = await critic(Provider()).critique(REQUEST, journal(store))  # all replayed
        assert first.usage.cut_off_calls == 1
        assert again.usage.cut_off_calls == 0
        assert again.usage.input_tokens == 200  # the two finished calls, replayed

    async def test_a_failed_call_is_not_counted_as_cut_off(self, store):
        class Failing(Provider):
            async def structured(self, call: ModelCall, *args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("the model said 500")

        with pytest.raises(RuntimeError):
            await critic(Failing()).critique(REQUEST, journal(store))
        result = await critic(Provider(FIRST, SECOND)).critique(REQUEST, journal(store))
        assert result.usage.cut_off_calls == 0
        assert result.usage.input_tokens == 200

    async def test_without_a_key_nothing_is_journalled(self):
        provider = Provider(FIRST, SECOND)
        result = await critic(provider).critique(REQUEST)
        assert len(provider.calls) == 2
        assert result.usage.input_tokens == 200


class TestThroughTheRoute:
    async def test_a_critic_stopped_mid_critique_repeats_no_finished_call_on_the_retry(
        self, fake_model, service_token
    ):
        """The Critic over HTTP on the fake model, stopped while its second call is in
        flight, then started again on the same replay file: the retry with the same key
        calls the model once (the second round), and its usage holds all three calls."""
        settings = critic_settings(fake=fake_model, token=service_token)
        body = REQUEST.model_dump(mode="json")
        headers = {"Idempotency-Key": KEY}
        fake_model.script(
            {"stage": "critique", "response": FIRST},
            {"stage": "critique", "response": SECOND, "fault": {"delay_s": 120}},  # hangs
            {"stage": "critique", "response": SECOND},
        )
        async with serving(create_app(settings), service_token) as critic:
            pending = asyncio.create_task(critic.post("/v1/critique", json=body, headers=headers))
            deadline = asyncio.get_running_loop().time() + 60
            while len(fake_model.requests()) < 2:
                assert asyncio.get_running_loop().time() < deadline, fake_model.requests()
                await asyncio.sleep(0.02)
            # leaving the block stops the app: its running critique is cancelled mid-call
        pending.cancel()
        await asyncio.gather(pending, return_exceptions=True)
        async with serving(create_app(settings), service_token) as restarted:
            retried = await restarted.post("/v1/critique", json=body, headers=headers)
        assert retried.status_code == 200, retried.text
        assert len(fake_model.requests()) == 3  # the first call was not made again
        usage = retried.json()["usage"]
        assert usage["cut_off_calls"] == 1
        per_call = [r["response"]["usage"] for r in fake_model.requests() if r["response"]]
        assert len(per_call) == 2  # the fake answered the first and the third
        answered = sum(u["input_tokens"] for u in per_call)
        assert usage["input_tokens"] > answered  # plus the cut-off call's prompt
        assert usage["output_tokens"] == sum(u["output_tokens"] for u in per_call)
