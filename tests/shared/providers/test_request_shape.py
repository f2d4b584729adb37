"""Providers as they are: what each model family is sent, per-role overrides, and a server
that refuses a parameter. Both official SDKs against the wire-compatible fake server."""

import asyncio

import pytest
from pydantic import ValidationError
from structlog.testing import capture_logs

from actor.settings import ActorSettings
from critic.settings import CriticSettings
from shared.contracts import Critique, Provider, Stage
from shared.errors import UpstreamError
from shared.providers import ModelCall, ProviderSettings, build_provider
from shared.providers.base import BaseProvider
from shared.providers.capabilities import CapabilityOverrides, capabilities_for

CAP = 777
TOKEN = "service-token-request-shape-0123456789"
PASSING = {
    "verdict": "pass",
    "confidence": 0.9,
    "issues": [],
    "reflection": "Nothing to change.",
    "error_class": "none",
}


def settings_kwargs(fake) -> dict:
    return {
        "openai_api_key": "sk-shape-openai-0123456789",
        "openai_base_url": fake.openai_base_url,
        "anthropic_api_key": "sk-ant-shape-0123456789",
        "anthropic_base_url": fake.anthropic_base_url,
        "retry_initial_s": 0.01,
        "retry_max_wait_s": 0.05,
    }


def provider_for(kind: Provider, fake) -> BaseProvider:
    return build_provider(kind, ProviderSettings(**settings_kwargs(fake)))


def call_for(model: str, *, temperature: float = 0.2) -> ModelCall:
    return ModelCall(
        stage=Stage.critique,
        model=model,
        temperature=temperature,
        system="You are a strict critic.",
        user="<task>\nSay what colour the sky is.\n</task>\n"
        "<candidate_output>\nThe sky is green.\n</candidate_output>",
        max_tokens=CAP,
    )


async def ask(provider: BaseProvider, model: str):
    return await provider.structured(call_for(model), Critique, "critique")


class TestCapabilityTable:
    @pytest.mark.parametrize(
        ("model", "family"),
        [
            ("gpt-5-mini", "openai-reasoning"),
            ("gpt-5.1", "openai-reasoning"),
            ("o3-mini", "openai-reasoning"),
            ("o1", "openai-reasoning"),
            ("o4-mini-2025-04-16", "openai-reasoning"),
            ("openai/gpt-5-nano", "openai-reasoning"),
            ("gpt-5-chat-latest", "openai-chat"),
            ("gpt-4o-mini", "openai-chat"),
            ("gpt-4.1", "openai-chat"),
            ("SmolLM2-135M-Instruct", "openai-compatible"),
            ("llama3.1:8b", "openai-compatible"),
            ("omni-moderation", "openai-compatible"),
        ],
    )
    def test_openai_wire_families(self, model, family):
        assert capabilities_for("openai", model).family == family

    def test_reasoning_family_takes_no_temperature_and_the_completion_cap(self):
        caps = capabilities_for("openai", "gpt-5-mini")
        assert not caps.send_temperature
        assert caps.token_param == "max_completion_tokens"

    def test_unknown_openai_compatible_model_takes_the_classic_parameters(self):
        caps = capabilities_for("openai", "qwen2.5-coder")
        assert caps.send_temperature
        assert caps.token_param == "max_tokens"
        assert caps.output_mode == "json_schema"

    def test_claude_takes_temperature_max_tokens_and_a_forced_tool(self):
        caps = capabilities_for("anthropic", "claude-sonnet-4-6")
        assert (caps.send_temperature, caps.token_param, caps.output_mode) == (
            True,
            "max_tokens",
            "tool",
        )

    def test_overrides_win_field_by_field(self):
        caps = capabilities_for("openai", "gpt-5-mini", CapabilityOverrides(send_temperature=True))
        assert caps.send_temperature
        assert caps.token_param == "max_completion_tokens"


class TestRequestShape:
    async def test_reasoning_model_gets_no_temperature_and_a_max_completion_tokens(
        self, fake_model
    ):
        provider = provider_for(Provider.openai, fake_model)
        reply = await ask(provider, "gpt-5-mini")
        await provider.aclose()
        [sent] = fake_model.requests()
        body = sent["body"]
        assert "temperature" not in body
        assert "top_p" not in body
        assert "max_tokens" not in body
        assert body["max_completion_tokens"] == CAP
        assert "reasoning_effort" not in body
        # the trajectory records the request as sent
        assert reply.exchanges[0].request == body

    async def test_chat_model_gets_its_temperature(self, fake_model):
        provider = provider_for(Provider.openai, fake_model)
        await ask(provider, "gpt-4o-mini")
        await provider.aclose()
        body = fake_model.requests()[0]["body"]
        assert body["temperature"] == 0.2
        assert body["max_completion_tokens"] == CAP

    async def test_unknown_model_on_a_compatible_server_gets_max_tokens(self, fake_model):
        provider = provider_for(Provider.openai, fake_model)
        reply = await ask(provider, "SmolLM2-135M-Instruct")
        await provider.aclose()
        body = fake_model.requests()[0]["body"]
        assert body["temperature"] == 0.2
        assert body["max_tokens"] == CAP
        assert "max_completion_tokens" not in body
        assert body["response_format"]["type"] == "json_schema"
        assert reply.exchanges[0].request == body

    async def test_claude_gets_temperature_and_max_tokens(self, fake_model):
        provider = provider_for(Provider.anthropic, fake_model)
        reply = await ask(provider, "claude-sonnet-4-6")
        await provider.aclose()
        body = fake_model.requests()[0]["body"]
        assert body["temperature"] == 0.2
        assert body["max_tokens"] == CAP
        assert body["tool_choice"] == {"type": "tool", "name": "critique"}
        assert reply.exchanges[0].request == body


class TestRoleOverrides:
    @pytest.fixture
    def env(self, monkeypatch, fake_model):
        monkeypatch.setenv("CROSSCHECK_SERVICE_TOKEN", TOKEN)
        for key, value in settings_kwargs(fake_model).items():
            monkeypatch.setenv(key.upper(), str(value))
        return monkeypatch

    async def sent_body(self, settings, kind: Provider, model: str, fake_model) -> dict:
        provider = build_provider(kind, settings)
        reply = await ask(provider, model)
        await provider.aclose()
        assert isinstance(reply.value, Critique)  # the answer came back in the mode asked
        body: dict = fake_model.requests()[-1]["body"]
        return body

    async def test_send_temperature_on_forces_it_on_a_reasoning_model(self, env, fake_model):
        env.setenv("ACTOR_SEND_TEMPERATURE", "true")
        body = await self.sent_body(ActorSettings(), Provider.openai, "gpt-5-mini", fake_model)
        assert body["temperature"] == 0.2

    async def test_send_temperature_off_switch(self, env, fake_model):
        env.setenv("ACTOR_SEND_TEMPERATURE", "false")
        body = await self.sent_body(ActorSettings(), Provider.openai, "gpt-4o-mini", fake_model)
        assert "temperature" not in body

    async def test_the_override_is_per_role(self, env, fake_model):
        env.setenv("ACTOR_SEND_TEMPERATURE", "false")
        body = await self.sent_body(
            CriticSettings(), Provider.anthropic, "claude-sonnet-4-6", fake_model
        )
        assert body["temperature"] == 0.2

    async def test_token_param_and_reasoning_effort(self, env, fake_model):
        env.setenv("ACTOR_TOKEN_PARAM", "max_tokens")
        env.setenv("ACTOR_REASONING_EFFORT", "low")
        body = await self.sent_body(ActorSettings(), Provider.openai, "gpt-5-mini", fake_model)
        assert body["max_tokens"] == CAP
        assert "max_completion_tokens" not in body
        assert body["reasoning_effort"] == "low"

    async def test_output_mode_tool_on_the_openai_wire(self, env, fake_model):
        env.setenv("ACTOR_OUTPUT_MODE", "tool")
        body = await self.sent_body(ActorSettings(), Provider.openai, "gpt-5-mini", fake_model)
        assert "response_format" not in body
        assert body["tool_choice"] == {"type": "function", "function": {"name": "critique"}}
        assert body["tools"][0]["function"]["parameters"]["type"] == "object"

    async def test_output_mode_json_object_puts_the_schema_in_the_prompt(self, env, fake_model):
        env.setenv("ACTOR_OUTPUT_MODE", "json_object")
        body = await self.sent_body(ActorSettings(), Provider.openai, "gpt-5-mini", fake_model)
        assert body["response_format"] == {"type": "json_object"}
        assert '"verdict"' in body["messages"][0]["content"]

    async def test_output_mode_json_schema_on_the_anthropic_wire(self, env, fake_model):
        env.setenv("CRITIC_OUTPUT_MODE", "json_schema")
        body = await self.sent_body(
            CriticSettings(), Provider.anthropic, "claude-sonnet-4-6", fake_model
        )
        assert "tools" not in body
        assert body["output_config"]["format"]["type"] == "json_schema"

    @pytest.mark.parametrize(
        ("var", "value"),
        [
            ("ACTOR_TOKEN_PARAM", "max_output_tokens"),
            ("ACTOR_REASONING_EFFORT", "extreme"),
            ("ACTOR_OUTPUT_MODE", "grammar"),
            ("ACTOR_SEND_TEMPERATURE", "sometimes"),
        ],
    )
    def test_a_bad_value_is_refused_at_startup_naming_the_setting(self, env, var, value):
        env.setenv(var, value)
        with pytest.raises(ValidationError, match=var.removeprefix("ACTOR_").lower()):
            ActorSettings()


# Both wires, each with a model that is sent a temperature by its family.
REFUSING = [(Provider.openai, "gpt-4o-mini"), (Provider.anthropic, "claude-sonnet-4-6")]


class TestRefusedParameter:
    @pytest.mark.parametrize(("kind", "model"), REFUSING, ids=["openai", "anthropic"])
    async def test_answered_on_the_second_try_without_it_and_never_sent_again(
        self, fake_model, kind, model
    ):
        # The server refuses every request that carries a temperature (one fault per request).
        fake_model.faults(*[{"unsupported_param": "temperature"}] * 3)
        provider = provider_for(kind, fake_model)
        with capture_logs() as logs:
            first = await ask(provider, model)
            second = await ask(provider, model)
        await provider.aclose()
        requests = fake_model.requests()
        assert [r["status"] for r in requests] == [400, 200, 200]
        assert requests[0]["body"]["temperature"] == 0.2
        assert "temperature" not in requests[1]["body"]
        assert "temperature" not in requests[2]["body"]
        # the trajectory shows both requests as sent, the refused one with its 400
        assert [e.status for e in first.exchanges] == [400, 200]
        assert first.exchanges[0].request == requests[0]["body"]
        assert first.exchanges[1].request == requests[1]["body"]
        assert first.usage.attempts == 2
        assert second.usage.attempts == 1
        warnings = [
            entry
            for entry in logs
            if entry["log_level"] == "warning" and entry.get("parameter") == "temperature"
        ]
        assert len(warnings) == 1
        assert warnings[0]["model"] == model

    async def test_concurrent_calls_refused_at_once_all_succeed_with_one_warning(self, fake_model):
        # best-of-N drafts go out together: each carries the parameter before any refusal
        fake_model.faults(*[{"unsupported_param": "temperature"}] * 3)
        fake_model.latency(200)  # all three are in flight before the first 400 comes back
        provider = provider_for(Provider.openai, fake_model)
        with capture_logs() as logs:
            replies = await asyncio.gather(*(ask(provider, "gpt-4o-mini") for _ in range(3)))
        await provider.aclose()
        assert all(isinstance(r.value, Critique) for r in replies)
        statuses = sorted(r["status"] for r in fake_model.requests())
        assert statuses == [200, 200, 200, 400, 400, 400]
        assert len([e for e in logs if e.get("parameter") == "temperature"]) == 1

    async def test_max_tokens_is_replaced_by_max_completion_tokens(self, fake_model):
        fake_model.faults(*[{"unsupported_param": "max_tokens"}] * 2)
        provider = provider_for(Provider.openai, fake_model)
        await ask(provider, "my-gateway-model")
        await ask(provider, "my-gateway-model")
        await provider.aclose()
        first, retry, later = (r["body"] for r in fake_model.requests())
        assert first["max_tokens"] == CAP
        for body in (retry, later):
            assert "max_tokens" not in body
            assert body["max_completion_tokens"] == CAP

    async def test_a_refusal_said_only_in_the_message_counts(self, fake_model):
        # a vLLM/gateway-style 400: no `param`, no `code`, the parameter named in the text
        fake_model.faults(
            {
                "status": 400,
                "message": "Unsupported value: 'temperature' does not support 0.2 with this "
                "model. Only the default (1) value is supported.",
            }
        )
        provider = provider_for(Provider.openai, fake_model)
        await ask(provider, "gpt-4o-mini")
        await provider.aclose()
        first, retry = fake_model.requests()
        assert first["status"] == 400
        assert retry["status"] == 200
        assert "temperature" not in retry["body"]

    async def test_the_memory_is_per_model(self, fake_model):
        fake_model.faults({"unsupported_param": "temperature", "match": "green"})
        provider = provider_for(Provider.openai, fake_model)
        await ask(provider, "gpt-4o-mini")
        await ask(provider, "gpt-4.1-mini")
        await provider.aclose()
        assert fake_model.requests()[-1]["body"]["temperature"] == 0.2

    @pytest.mark.parametrize("kind", [Provider.openai, Provider.anthropic], ids=lambda k: k.value)
    @pytest.mark.parametrize(
        "message",
        [None, "max_tokens: 100000 is too large for this model", "messages: too long"],
        ids=["names-nothing", "names-a-value-problem", "names-a-required-field"],
    )
    async def test_other_400s_are_not_retried(self, fake_model, kind, message):
        fake_model.faults({"status": 400, "message": message})
        provider = provider_for(kind, fake_model)
        model = "gpt-4o-mini" if kind is Provider.openai else "claude-sonnet-4-6"
        with pytest.raises(UpstreamError, match=r"rejected the request \(400\)"):
            await ask(provider, model)
        await provider.aclose()
        assert len(fake_model.requests()) == 1
        assert provider.refused == {}

    async def test_a_required_parameter_is_never_dropped(self, fake_model):
        # Anthropic's max_tokens is required: a 400 about it is not a refusal to work around
        fake_model.faults({"status": 400, "message": "max_tokens: Extra inputs are not permitted"})
        provider = provider_for(Provider.anthropic, fake_model)
        with pytest.raises(UpstreamError):
            await ask(provider, "claude-sonnet-4-6")
        await provider.aclose()
        assert len(fake_model.requests()) == 1
