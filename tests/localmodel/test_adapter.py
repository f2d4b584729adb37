"""The Anthropic-wire adapter: the real ``anthropic`` SDK against it, the fake model's OpenAI
wire standing in for llama-server behind it."""

import json

import anthropic
import pytest
from pydantic import BaseModel

from crosscheck.anthropic_adapter import chat_request, message_reply
from shared.contracts import Stage
from shared.errors import InvalidModelOutput
from shared.providers import PriceTable
from shared.providers.anthropic_provider import AnthropicProvider
from shared.providers.base import ModelCall
from tests.support.servers import free_port, service_process

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"type": "string"}, "score": {"type": "integer", "maximum": 10}},
    "required": ["verdict", "score"],
    "additionalProperties": False,
}


class Verdict(BaseModel):
    verdict: str
    score: int


@pytest.fixture
def adapter(fake_model, tmp_path):
    env = {"LOCALMODEL_ADAPTER_UPSTREAM_URL": fake_model.openai_base_url}
    log = tmp_path / "adapter.log"
    with service_process(
        "crosscheck.anthropic_adapter", "LOCALMODEL_ADAPTER_", env=env, log=log
    ) as url:
        yield url


@pytest.fixture
def sdk():
    clients = []

    def make(url: str) -> anthropic.Anthropic:
        clients.append(
            anthropic.Anthropic(api_key="local", base_url=url, max_retries=0, timeout=30)
        )
        return clients[-1]

    yield make
    for client in clients:
        client.close()


def forced_tool(client: anthropic.Anthropic, **extra):
    return client.messages.create(
        model="critic-model",
        max_tokens=300,
        system="You judge answers.",
        messages=[{"role": "user", "content": "Judge: 2 + 2 = 4"}],
        tools=[
            {"name": "verdict", "description": "a verdict object", "input_schema": VERDICT_SCHEMA}
        ],
        tool_choice={"type": "tool", "name": "verdict"},
        **extra,
    )


class TestForcedTool:
    def test_a_forced_tool_is_asked_as_json_schema_and_answered_as_a_tool_use_block(
        self, fake_model, adapter, sdk
    ):
        fake_model.script({"api": "openai", "response": {"verdict": "pass", "score": 9}})
        message = forced_tool(sdk(adapter))
        [block] = message.content
        assert block.type == "tool_use"
        assert block.name == "verdict"
        assert block.input == {"verdict": "pass", "score": 9}
        assert message.stop_reason == "tool_use"
        assert message.usage.input_tokens > 0
        assert message.usage.output_tokens > 0
        [call] = fake_model.requests()
        assert call["api"] == "openai"  # the server's enforced wire, not its /v1/messages
        sent = call["body"]
        assert sent["response_format"]["type"] == "json_schema"
        assert sent["response_format"]["json_schema"]["schema"] == VERDICT_SCHEMA  # bounds kept
        assert sent["max_tokens"] == 300
        assert sent["messages"][0]["role"] == "system"
        assert sent["messages"][0]["content"].startswith("You judge answers.")
        assert sent["messages"][-1] == {"role": "user", "content": "Judge: 2 + 2 = 4"}

    def test_a_reply_that_is_not_json_comes_back_without_a_tool_block(
        self, fake_model, adapter, sdk
    ):
        fake_model.script({"api": "openai", "raw": "I think the answer is fine."})
        message = forced_tool(sdk(adapter))
        assert [b.type for b in message.content] == ["text"]
        assert message.content[0].text == "I think the answer is fine."

    async def test_the_critic_provider_fails_saying_the_reply_has_no_tool_use_block(
        self, fake_model, adapter
    ):
        fake_model.script(
            {"api": "openai", "raw": '{"verdict": "pa'},
            {"api": "openai", "raw": '{"verdict": "pa'},
        )
        provider = AnthropicProvider(
            api_key="local",
            base_url=adapter,
            timeout_s=30,
            prices=PriceTable.from_json(None),
            max_attempts=1,
        )
        call = ModelCall(
            stage=Stage.critique,
            model="critic-model",
            temperature=0.2,
            system="s",
            user="u",
            max_tokens=50,
        )
        try:
            with pytest.raises(InvalidModelOutput, match="the reply has no tool_use block") as err:
                await provider.structured(call, Verdict, "verdict")
        finally:
            await provider.aclose()
        assert "Invalid JSON" not in str(err.value)
        assert "of 50 output tokens" in str(err.value)

    async def test_the_critic_provider_gets_its_value_through_the_adapter(
        self, fake_model, adapter
    ):
        fake_model.script({"api": "openai", "response": {"verdict": "fail", "score": 2}})
        provider = AnthropicProvider(
            api_key="local", base_url=adapter, timeout_s=30, prices=PriceTable.from_json(None)
        )
        call = ModelCall(
            stage=Stage.critique, model="critic-model", temperature=0.2, system="s", user="u"
        )
        try:
            reply = await provider.structured(call, Verdict, "verdict")
        finally:
            await provider.aclose()
        assert reply.value == Verdict(verdict="fail", score=2)
        assert reply.usage.input_tokens > 0


class TestPlainMessages:
    def test_a_plain_message_is_mapped_to_text(self, fake_model, adapter, sdk):
        fake_model.script({"api": "openai", "raw": "Hello there."})
        message = sdk(adapter).messages.create(
            model="critic-model",
            max_tokens=50,
            messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        )
        assert [b.type for b in message.content] == ["text"]
        assert message.content[0].text == "Hello there."
        assert message.stop_reason == "end_turn"
        [call] = fake_model.requests()
        assert "response_format" not in call["body"]


class TestErrors:
    def test_a_request_without_max_tokens_is_a_400_in_the_anthropic_shape(self, adapter, sdk):
        client = sdk(adapter)
        with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
            client.post(
                "/v1/messages",
                body={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                cast_to=object,
            )

    def test_streaming_is_refused_with_a_400(self, adapter, sdk):
        with pytest.raises(anthropic.BadRequestError, match="does not stream"):
            forced_tool(sdk(adapter), stream=True)

    def test_an_unreachable_model_server_is_a_503(self, tmp_path, sdk):
        env = {"LOCALMODEL_ADAPTER_UPSTREAM_URL": f"http://127.0.0.1:{free_port()}/v1"}
        with service_process(
            "crosscheck.anthropic_adapter", "LOCALMODEL_ADAPTER_", env=env, log=tmp_path / "a.log"
        ) as url:
            with pytest.raises(anthropic.InternalServerError) as err:
                forced_tool(sdk(url))
        assert err.value.status_code == 503
        assert "cannot be reached" in err.value.message

    def test_a_non_loopback_upstream_is_refused_at_start(self):
        from crosscheck.anthropic_adapter import AdapterSettings

        with pytest.raises(ValueError, match="loopback"):
            AdapterSettings(upstream_url="http://10.0.0.1:8011/v1")


class TestMapping:
    BODY = {
        "model": "critic-model",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"name": "verdict", "input_schema": VERDICT_SCHEMA}],
        "tool_choice": {"type": "tool", "name": "verdict"},
    }

    def completion(self, content: str, finish: str) -> dict:
        return {
            "choices": [{"message": {"content": content}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 64},
        }

    def test_a_reply_cut_off_by_its_cap_says_max_tokens_and_has_no_tool_block(self):
        _, forced = chat_request(self.BODY)
        reply = message_reply(self.BODY, self.completion('{"verdict": "pa', "length"), forced)
        assert reply["stop_reason"] == "max_tokens"
        assert [b["type"] for b in reply["content"]] == ["text"]
        assert reply["usage"] == {"input_tokens": 120, "output_tokens": 64}

    def test_usage_is_mapped_and_a_json_reply_is_the_tool_input(self):
        _, forced = chat_request(self.BODY)
        reply = message_reply(
            self.BODY, self.completion(json.dumps({"verdict": "pass", "score": 1}), "stop"), forced
        )
        assert reply["stop_reason"] == "tool_use"
        assert reply["content"][0]["input"] == {"verdict": "pass", "score": 1}
        assert reply["usage"] == {"input_tokens": 120, "output_tokens": 64}

    def test_json_that_is_not_an_object_is_no_tool_input(self):
        _, forced = chat_request(self.BODY)
        reply = message_reply(self.BODY, self.completion("[0, 2, 3]", "stop"), forced)
        assert [b["type"] for b in reply["content"]] == ["text"]
