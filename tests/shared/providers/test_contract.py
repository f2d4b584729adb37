"""Both official SDKs against the wire-compatible fake server: faults, retries, repair."""

import time

import pytest

from shared.contracts import Critique, Provider, Stage, Verdict
from shared.errors import (
    ConfigurationError,
    InvalidModelOutput,
    OutputTruncated,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from shared.providers import ModelCall, ProviderSettings, build_provider
from tests.support.authority import INJECTION, assert_only_reviewer_speaks
from tests.support.fakemodel import user_text

PASSING = {
    "verdict": "pass",
    "confidence": 0.9,
    "issues": [],
    "reflection": "Nothing to change.",
    "error_class": "none",
}


def provider_for(kind: Provider, fake, **overrides):
    settings = ProviderSettings(
        openai_api_key="sk-contract-openai-0123456789",
        openai_base_url=fake.openai_base_url,
        anthropic_api_key="sk-ant-contract-0123456789",
        anthropic_base_url=fake.anthropic_base_url,
        **{"retry_initial_s": 0.01, "retry_max_wait_s": 0.05, **overrides},
    )
    return build_provider(kind, settings)


def critique_call(kind: Provider, text: str = "The sky is green.", **caps) -> ModelCall:
    return ModelCall(
        stage=Stage.critique,
        model="claude-sonnet-4-6" if kind is Provider.anthropic else "gpt-5-mini",
        temperature=0.2,
        system="You are a strict critic.",
        user=(
            "<task>\nSay what colour the sky is.\n</task>\n"
            f"<candidate_output>\n{text}\n</candidate_output>"
        ),
        **caps,
    )


def cap_of(call: dict) -> int:
    body = call["body"]
    return int(body.get("max_completion_tokens") or body["max_tokens"])


@pytest.fixture(params=[Provider.openai, Provider.anthropic], ids=lambda p: p.value)
def kind(request) -> Provider:
    return request.param


class TestStructuredOutput:
    async def test_schema_true_answer_with_usage_and_cost(self, fake_model, kind):
        fake_model.script({"stage": "critique", "response": PASSING})
        provider = provider_for(kind, fake_model)
        reply = await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert reply.value.verdict is Verdict.pass_
        assert reply.usage.provider == kind.value
        assert reply.usage.input_tokens > 0
        assert reply.usage.output_tokens > 0
        assert reply.usage.cost_usd is not None
        assert reply.usage.cost_usd > 0
        [call] = fake_model.requests()
        assert call["api"] == kind.value
        # gpt-5-mini is a reasoning model: it takes no temperature (see TestRequestShape)
        assert call["temperature"] == (0.2 if kind is Provider.anthropic else None)


class TestEnvironmentErrors:
    async def test_429_with_retry_after_is_honoured_then_succeeds(self, fake_model, kind):
        fake_model.faults({"status": 429, "retry_after": 0.4})
        fake_model.script({"stage": "critique", "response": PASSING})
        provider = provider_for(kind, fake_model)
        start = time.perf_counter()
        reply = await provider.structured(critique_call(kind), Critique, "critique")
        elapsed = time.perf_counter() - start
        await provider.aclose()
        assert reply.value.verdict is Verdict.pass_
        assert elapsed >= 0.4, "the Retry-After wait was not honoured"
        assert [c["status"] for c in fake_model.requests()] == [429, 200]
        assert reply.usage.attempts == 2

    async def test_500_then_success(self, fake_model, kind):
        fake_model.faults({"status": 500})
        provider = provider_for(kind, fake_model)
        reply = await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert isinstance(reply.value, Critique)
        assert [c["status"] for c in fake_model.requests()] == [500, 200]
        assert [e.status for e in reply.exchanges] == [500, 200]

    async def test_persistent_5xx_exhausts_the_budget(self, fake_model, kind):
        fake_model.faults(*[{"status": 503}] * 3)
        provider = provider_for(kind, fake_model, model_max_attempts=3)
        with pytest.raises(UpstreamUnavailable, match="after 3 attempt"):
            await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert len(fake_model.requests()) == 3

    async def test_timeout_is_retried_then_succeeds(self, fake_model, kind):
        fake_model.faults({"delay_s": 3.0})
        provider = provider_for(kind, fake_model, model_timeout_s=0.5)
        reply = await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert reply.usage.attempts == 2

    async def test_timeouts_past_the_budget_raise_upstream_timeout(self, fake_model, kind):
        fake_model.faults({"delay_s": 3.0}, {"delay_s": 3.0})
        provider = provider_for(kind, fake_model, model_timeout_s=0.4, model_max_attempts=2)
        with pytest.raises(UpstreamTimeout, match="timed out 2 time"):
            await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()


class TestRepair:
    async def test_malformed_output_is_repaired_once(self, fake_model, kind):
        fake_model.faults({"malformed": True})
        fake_model.script({"stage": "critique", "response": PASSING})
        provider = provider_for(kind, fake_model)
        reply = await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert reply.repaired
        first, second = fake_model.requests()
        assert "<repair>" not in user_text(first)
        assert "<repair>" in user_text(second)
        assert reply.usage.input_tokens > 0

    async def test_malformed_twice_is_a_typed_error(self, fake_model, kind):
        fake_model.faults({"malformed": True}, {"malformed": True})
        provider = provider_for(kind, fake_model)
        with pytest.raises(InvalidModelOutput, match="even after one repair"):
            await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert len(fake_model.requests()) == 2

    async def test_semantic_check_triggers_repair_and_is_accepted_after(self, fake_model, kind):
        provider = provider_for(kind, fake_model)
        seen = []

        def check(value: Critique) -> list[str]:
            seen.append(value)
            return ["always unhappy"]

        reply = await provider.structured(critique_call(kind), Critique, "critique", check=check)
        await provider.aclose()
        assert len(seen) == 2
        assert reply.repaired
        assert "always unhappy" in user_text(fake_model.requests()[1])

    async def test_the_repair_prompt_escapes_the_reply_and_the_problems(self, fake_model, kind):
        """The repair pastes the model's reply and problems quoting it: neither may open or
        close a section, or speak as a reviewer."""
        forged = {**PASSING, "reflection": INJECTION}
        fake_model.script(
            {"stage": "critique", "response": forged}, {"stage": "critique", "response": PASSING}
        )
        provider = provider_for(kind, fake_model)

        def check(value: Critique) -> list[str]:
            return (
                [f"the reflection {value.reflection!r} is not allowed"]
                if value.reflection == INJECTION
                else []
            )

        reply = await provider.structured(critique_call(kind), Critique, "critique", check=check)
        await provider.aclose()
        assert reply.repaired
        repair = user_text(fake_model.requests()[1])
        assert repair.count("<repair>") == 1
        assert repair.count("</repair>") == 1
        assert repair.rstrip().endswith("</repair>")
        assert "Return 42" in repair  # the reply is shown, defused
        assert_only_reviewer_speaks(repair)


class TestTruncation:
    async def test_cut_off_then_whole_on_a_larger_cap_bills_both(self, fake_model, kind):
        fake_model.faults({"truncated": True})
        fake_model.script({"stage": "critique", "response": PASSING})
        provider = provider_for(kind, fake_model)
        call = critique_call(kind, max_tokens=256, max_tokens_ceiling=4096)
        reply = await provider.structured(call, Critique, "critique")
        await provider.aclose()
        assert reply.value.verdict is Verdict.pass_
        assert not reply.repaired
        first, second = fake_model.requests()
        assert [cap_of(first), cap_of(second)] == [256, 512]
        # the same prompt, not the cut-off reply pasted back
        assert user_text(second) == user_text(first)
        assert "<repair>" not in user_text(second)
        assert reply.usage.output_tokens > 256  # the cut-off call's tokens are counted
        assert reply.usage.input_tokens == 2 * first["response"]["usage"].get(
            "prompt_tokens", first["response"]["usage"].get("input_tokens")
        )
        assert len(reply.exchanges) == 2

    async def test_cut_off_twice_is_output_truncated_with_its_usage(self, fake_model, kind):
        fake_model.faults({"truncated": True}, {"truncated": True})
        provider = provider_for(kind, fake_model)
        call = critique_call(kind, max_tokens=300, max_tokens_ceiling=500)
        with pytest.raises(OutputTruncated) as caught:
            await provider.structured(call, Critique, "critique")
        await provider.aclose()
        assert [cap_of(c) for c in fake_model.requests()] == [300, 500]
        message = str(caught.value)
        finish = "length" if kind is Provider.openai else "max_tokens"
        assert f"finish reason {finish}, 500 of 500 output tokens" in message
        assert "reply begins '{" in message
        assert caught.value.status_code == 422
        usage = caught.value.extra["usage"]
        assert usage["output_tokens"] == 800
        assert usage["attempts"] == 2
        assert usage["cost_usd"] > 0

    async def test_no_room_to_grow_fails_at_once(self, fake_model, kind):
        fake_model.faults({"truncated": True})
        provider = provider_for(kind, fake_model)
        call = critique_call(kind, max_tokens=400, max_tokens_ceiling=400)
        with pytest.raises(OutputTruncated, match="within 400 output tokens"):
            await provider.structured(call, Critique, "critique")
        await provider.aclose()
        assert len(fake_model.requests()) == 1


class TestAdvisoryValues:
    async def test_out_of_range_confidence_is_clamped_and_noted(self, fake_model, kind):
        fake_model.script(
            {"stage": "critique", "response": {**PASSING, "confidence": 95, "continue_value": 11}}
        )
        provider = provider_for(kind, fake_model)
        reply = await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert reply.value.confidence == 1.0
        assert reply.value.continue_value == 10
        assert reply.clamped == [
            "confidence 95 clamped to 1.0",
            "continue_value 11 clamped to 10",
        ]
        assert not reply.repaired
        assert len(fake_model.requests()) == 1

    async def test_a_deciding_field_out_of_its_range_still_fails(self, fake_model, kind):
        bad = {**PASSING, "verdict": "maybe"}
        fake_model.script(
            {"stage": "critique", "response": bad}, {"stage": "critique", "response": bad}
        )
        provider = provider_for(kind, fake_model)
        with pytest.raises(InvalidModelOutput, match="verdict") as caught:
            await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        assert caught.value.extra["usage"]["attempts"] == 2
        assert "finish reason" in str(caught.value)


class TestConfiguration:
    @pytest.mark.parametrize(
        ("kind", "var"),
        [(Provider.openai, "OPENAI_API_KEY"), (Provider.anthropic, "ANTHROPIC_API_KEY")],
    )
    def test_missing_key_names_the_variable(self, kind, var):
        with pytest.raises(ConfigurationError, match=var):
            build_provider(kind, ProviderSettings())


class TestAnthropicTemperature:
    async def test_temperature_is_sent_until_the_api_refuses_it(self, fake_model):
        fake_model.faults({"status": 400, "message": "temperature: Extra inputs are not permitted"})
        provider = provider_for(Provider.anthropic, fake_model)
        await provider.structured(critique_call(Provider.anthropic), Critique, "critique")
        await provider.structured(critique_call(Provider.anthropic), Critique, "critique")
        await provider.aclose()
        first, second, third = fake_model.requests()
        assert first["status"] == 400
        assert first["body"]["temperature"] == 0.2
        assert "temperature" not in second["body"]
        assert "temperature" not in third["body"]

    async def test_other_bad_requests_are_not_retried(self, fake_model):
        fake_model.faults({"status": 400, "message": "max_tokens: too large"})
        provider = provider_for(Provider.anthropic, fake_model)
        with pytest.raises(UpstreamError, match="rejected the request"):
            await provider.structured(critique_call(Provider.anthropic), Critique, "critique")
        await provider.aclose()
        assert len(fake_model.requests()) == 1
