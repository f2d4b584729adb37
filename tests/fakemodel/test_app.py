"""The fake model as its users see it: the real OpenAI and Anthropic SDKs against the app."""

import asyncio
import json
import time
from typing import Any

import anthropic
import httpx2
import jsonschema
import openai
import pytest
from anthropic.types import TextBlock, ToolUseBlock
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from fakemodel.app import create_app
from fakemodel.settings import FakeModelSettings
from tests.fakemodel.conftest import (
    ACTOR_SCHEMA,
    ANTHROPIC_KEY,
    CRITIC_SCHEMA,
    OPENAI_KEY,
    TimeoutASGITransport,
    actor_prompt,
    critic_prompt,
    make_anthropic,
    make_openai,
)

SYSTEM = "You are a careful assistant. Answer in the requested structure."
VIAS = ["openai-json_schema", "openai-tool", "anthropic-tool", "anthropic-output_config"]
PRIMES_TASK = "Write a function that returns all prime numbers up to and including n."


async def call(
    via: str,
    oai: openai.AsyncOpenAI,
    ant: anthropic.AsyncAnthropic,
    *,
    name: str,
    schema: dict[str, Any],
    prompt: str,
    **options: Any,
) -> tuple[Any, Any]:
    """One structured call; returns (the raw structured payload, the SDK response)."""
    if via == "openai-json_schema":
        response = await oai.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": True},
            },
            temperature=0.2,
            max_completion_tokens=2000,
            **options,
        )
        choice = response.choices[0]
        assert choice.finish_reason == "stop"
        assert not choice.message.tool_calls
        return choice.message.content, response
    if via == "openai-tool":
        response = await oai.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}],
            tools=[
                {
                    "type": "function",
                    "function": {"name": name, "description": "answer", "parameters": schema},
                }
            ],
            tool_choice={"type": "function", "function": {"name": name}},
            max_tokens=2000,
            **options,
        )
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        (tool_call,) = choice.message.tool_calls or []
        assert isinstance(tool_call, ChatCompletionMessageFunctionToolCall)
        assert tool_call.function.name == name
        assert tool_call.id.startswith("scripted-")
        return tool_call.function.arguments, response
    if via == "anthropic-tool":
        response = await ant.messages.create(
            model="claude-test",
            max_tokens=2000,
            system=[{"type": "text", "text": SYSTEM}],
            messages=[{"role": "user", "content": [{"type": "text", "text": prompt}]}],
            tools=[{"name": name, "description": "answer", "input_schema": schema}],
            tool_choice={"type": "tool", "name": name},
            # anthropic 2.14's create() has no `temperature` parameter; the API still takes it
            extra_body={"temperature": 0.0},
            **options,
        )
        assert response.stop_reason == "tool_use"
        (block,) = response.content
        assert isinstance(block, ToolUseBlock)
        assert block.name == name
        assert block.id.startswith("scripted-")
        return block.input, response
    assert via == "anthropic-output_config"
    response = await ant.messages.create(
        model="claude-test",
        max_tokens=2000,
        system=SYSTEM,
        messages=[{"role": "user", "content": prompt}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
        **options,
    )
    assert response.stop_reason == "end_turn"
    (text_block,) = response.content
    assert isinstance(text_block, TextBlock)
    return text_block.text, response


async def ask(
    via: str,
    oai: openai.AsyncOpenAI,
    ant: anthropic.AsyncAnthropic,
    *,
    name: str,
    schema: dict[str, Any],
    prompt: str,
    **options: Any,
) -> dict[str, Any]:
    payload, _ = await call(via, oai, ant, name=name, schema=schema, prompt=prompt, **options)
    value: dict[str, Any] = payload if isinstance(payload, dict) else json.loads(payload)
    jsonschema.validate(value, schema)
    return value


async def act(
    via: str, oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic, prompt: str
) -> dict[str, Any]:
    return await ask(via, oai, ant, name="actor_output", schema=ACTOR_SCHEMA, prompt=prompt)


async def criticise(
    via: str, oai: openai.AsyncOpenAI, ant: anthropic.AsyncAnthropic, prompt: str
) -> dict[str, Any]:
    return await ask(via, oai, ant, name="critique", schema=CRITIC_SCHEMA, prompt=prompt)


def load_function(code: str, name: str) -> Any:
    assert "```" not in code
    namespace: dict[str, Any] = {}
    exec(compile(code, "<scripted>", "exec"), namespace)
    return namespace[name]


async def control(
    http: httpx2.AsyncClient, method: str, path: str, body: dict[str, Any] | None = None
) -> Any:
    response = await http.request(method, f"/_control/{path}", json=body)
    assert response.status_code == 200, response.text
    return response.json()


# ------------------------------------------------------------------ ops endpoints


async def test_healthz_and_models(http):
    health = await http.get("/healthz")
    assert health.json() == {"status": "ok"}
    models = await http.get("/v1/models")
    assert models.headers["x-crosscheck-scripted"] == "true"
    assert models.json()["object"] == "list"
    assert models.json()["data"][0]["id"].startswith("scripted")


# ------------------------------------------------------------------ the scenarios


@pytest.mark.parametrize("via", VIAS)
async def test_primes_draft_critique_revise_pass(via, oai, ant):
    draft = await act(
        via, oai, ant, actor_prompt(PRIMES_TASK, kind="code", entry_point="primes_up_to")
    )
    code = draft["output"]
    primes = load_function(code, "primes_up_to")
    assert primes(30) == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    assert primes(2) == [2]
    assert "sieve" not in code.lower()
    assert "for d in range(2, k):" in code

    critique = await criticise(via, oai, ant, critic_prompt(PRIMES_TASK, code, kind="code"))
    assert critique["verdict"] == "revise"
    assert critique["error_class"] == "logic"
    assert 0.8 <= critique["confidence"] <= 0.9
    (issue,) = critique["issues"]
    assert issue["dimension"] == "complexity"
    assert issue["severity"] == "major"
    assert issue["quote"] == "for d in range(2, k):"
    assert issue["quote"] in code
    assert "sieve" in issue["suggestion"].lower()
    assert "def " not in critique["reflection"]

    revised = await act(
        via,
        oai,
        ant,
        actor_prompt(
            PRIMES_TASK,
            kind="code",
            entry_point="primes_up_to",
            previous_output=code,
            reflections=[critique["reflection"]],
        ),
    )
    sieve = revised["output"]
    assert "sieve" in sieve.lower()
    primes = load_function(sieve, "primes_up_to")
    assert primes(30) == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
    assert primes(2) == [2]
    assert primes(1) == []

    verdict = await criticise(via, oai, ant, critic_prompt(PRIMES_TASK, sieve, kind="code"))
    assert verdict["verdict"] == "pass"
    assert verdict["issues"] == []
    assert verdict["error_class"] == "none"
    assert verdict["confidence"] >= 0.9


async def test_primes_uses_the_entry_point_name(oai, ant):
    draft = await act(
        "openai-json_schema",
        oai,
        ant,
        actor_prompt(PRIMES_TASK, kind="code", entry_point="sieve_me"),
    )
    assert load_function(draft["output"], "sieve_me")(10) == [2, 3, 5, 7]


@pytest.mark.parametrize("via", VIAS)
async def test_generic_text_draft_critique_revise_pass(via, oai, ant):
    task = "Explain why the sky is blue to a ten-year-old."
    draft = await act(via, oai, ant, actor_prompt(task))
    text = draft["output"]
    assert text.count(". ") >= 2
    assert "(revised)" not in text
    assert draft == await act(via, oai, ant, actor_prompt(task)), "drafts are deterministic"

    critique = await criticise(via, oai, ant, critic_prompt(task, text))
    assert critique["verdict"] == "revise"
    (issue,) = critique["issues"]
    assert issue["dimension"] == "completeness"
    assert issue["severity"] == "minor"
    assert issue["quote"] in text
    assert issue["quote"].endswith(".")

    revised = await act(
        via,
        oai,
        ant,
        actor_prompt(task, previous_output=text, reflections=[critique["reflection"]]),
    )
    output = revised["output"]
    assert output.startswith(text)
    assert output.splitlines()[-1] == "(revised)"

    verdict = await criticise(via, oai, ant, critic_prompt(task, output))
    assert verdict["verdict"] == "pass"
    assert verdict["issues"] == []


@pytest.mark.parametrize("via", VIAS)
async def test_generic_code_draft_critique_revise_pass(via, oai, ant):
    task = "Return the median of a list of numbers."
    draft = await act(via, oai, ant, actor_prompt(task, kind="code", entry_point="median"))
    code = draft["output"]
    assert callable(load_function(code, "median"))
    assert "# revised" not in code

    critique = await criticise(via, oai, ant, critic_prompt(task, code, kind="code"))
    assert critique["verdict"] == "revise"
    (issue,) = critique["issues"]
    assert issue["dimension"] == "correctness"
    assert issue["quote"] in code

    revised = await act(
        via,
        oai,
        ant,
        actor_prompt(
            task,
            kind="code",
            entry_point="median",
            previous_output=code,
            reflections=[critique["reflection"]],
        ),
    )
    assert "# revised" in revised["output"]
    assert callable(load_function(revised["output"], "median"))
    verdict = await criticise(via, oai, ant, critic_prompt(task, revised["output"], kind="code"))
    assert verdict["verdict"] == "pass"


async def test_generic_code_without_entry_point_is_named_solution(oai, ant):
    draft = await act("anthropic-tool", oai, ant, actor_prompt("Add two numbers.", kind="code"))
    assert callable(load_function(draft["output"], "solution"))


async def test_plain_text_answers_without_structured_output(oai, ant):
    prompt = actor_prompt("Say hello politely.")
    completion = await oai.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": prompt}]
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop"
    assert "Say hello politely" in choice.message.content
    assert not choice.message.content.startswith("{")

    message = await ant.messages.create(
        model="claude-test", max_tokens=100, messages=[{"role": "user", "content": prompt}]
    )
    assert message.stop_reason == "end_turn"
    assert message.content[0].text == choice.message.content


# ------------------------------------------------------------------ wire details


async def test_openai_completion_object(oai):
    prompt = actor_prompt("Name a colour.")
    raw = await oai.chat.completions.with_raw_response.create(
        model="gpt-4o-test", messages=[{"role": "user", "content": prompt}]
    )
    assert raw.headers["x-crosscheck-scripted"] == "true"
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.id.startswith("scripted-")
    assert completion.model == "gpt-4o-test"
    assert completion.created > 0
    content = completion.choices[0].message.content
    assert completion.usage.prompt_tokens == len(prompt) // 4 + 1
    assert completion.usage.completion_tokens == len(content) // 4 + 1
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )


async def test_anthropic_message_object(ant):
    prompt = actor_prompt("Name a colour.")
    raw = await ant.messages.with_raw_response.create(
        model="claude-test-model",
        max_tokens=50,
        system="Be brief.",
        messages=[{"role": "user", "content": prompt}],
    )
    assert raw.headers["x-crosscheck-scripted"] == "true"
    message = await raw.parse()
    assert message.id.startswith("scripted-")
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.model == "claude-test-model"
    assert message.stop_sequence is None
    assert message.usage.input_tokens == len("Be brief.\n" + prompt) // 4 + 1
    assert message.usage.output_tokens == len(message.content[0].text) // 4 + 1


async def test_openai_parse_helper_reads_the_answer(oai):
    """The SDK's own structured-output helper accepts the fake's answer."""
    from pydantic import BaseModel

    class ActorOutput(BaseModel):
        output: str
        uncertainties: list[str]

    completion = await oai.chat.completions.parse(
        model="gpt-test",
        messages=[{"role": "user", "content": actor_prompt("Describe rain.")}],
        response_format=ActorOutput,
    )
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, ActorOutput)
    assert "Describe rain" in parsed.output


async def test_bad_requests_are_provider_shaped_400s(oai, ant, http):
    with pytest.raises(anthropic.BadRequestError) as anthropic_error:
        await ant.messages.create(
            model="claude-test", max_tokens=0, messages=[{"role": "user", "content": "hi"}]
        )
    assert anthropic_error.value.type == "invalid_request_error"
    with pytest.raises(openai.BadRequestError) as openai_error:
        await oai.chat.completions.create(model="gpt-test", messages=[])
    assert openai_error.value.type == "invalid_request_error"
    response = await http.post(
        "/v1/chat/completions", content=b"not json", headers={"authorization": "Bearer x"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


# ------------------------------------------------------------------ auth


async def test_openai_without_key_is_401(oai, state):
    with pytest.raises(openai.AuthenticationError) as error:
        await oai.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"Authorization": openai.omit},
        )
    assert error.value.status_code == 401
    assert error.value.code == "invalid_api_key"
    assert error.value.type == "invalid_request_error"
    body: Any = error.value.body
    assert set(body) == {"message", "type", "param", "code"}
    assert state.requests[-1]["status"] == 401
    assert state.requests[-1]["auth_present"] is False


async def test_anthropic_without_key_is_401(http):
    client = make_anthropic(http, api_key="")
    with pytest.raises(anthropic.AuthenticationError) as error:
        await client.messages.create(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert error.value.type == "authentication_error"
    body: Any = error.value.body
    assert body["type"] == "error"


async def test_anthropic_accepts_a_bearer_token(http):
    client = make_anthropic(http, auth_token="bearer-token-for-test")
    message = await client.messages.create(
        model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    assert message.content[0].type == "text"


# ------------------------------------------------------------------ faults


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_429_with_retry_after_surfaces_as_rate_limit_error(api, oai, ant, http):
    await control(http, "POST", "faults", {"faults": [{"status": 429, "retry_after": 0.2}]})
    via = "openai-tool" if api == "openai" else "anthropic-tool"
    error_type = openai.RateLimitError if api == "openai" else anthropic.RateLimitError
    with pytest.raises(error_type) as error:
        await act(via, oai, ant, actor_prompt("Anything."))
    raised: Any = error.value
    assert raised.status_code == 429
    assert raised.response.headers["retry-after"] == "0.2"
    assert raised.response.headers["x-crosscheck-scripted"] == "true"
    if api == "openai":
        assert raised.code == "rate_limit_exceeded"
    else:
        assert raised.type == "rate_limit_error"


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_sdk_retries_after_429_honouring_retry_after(api, http):
    await control(http, "POST", "faults", {"faults": [{"status": 429, "retry_after": 0.2}]})
    oai, ant = make_openai(http, max_retries=2), make_anthropic(http, max_retries=2)
    via = "openai-json_schema" if api == "openai" else "anthropic-output_config"
    started = time.perf_counter()
    output = await act(via, oai, ant, actor_prompt("Explain gravity."))
    assert time.perf_counter() - started >= 0.2
    assert "Explain gravity" in output["output"]
    log = await control(http, "GET", "requests")
    assert [entry["status"] for entry in log] == [429, 200]
    assert log[0]["fault"]["status"] == 429
    assert log[1]["fault"] is None
    assert log[0]["body"] == log[1]["body"]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_500_then_success(api, http):
    await control(http, "POST", "faults", {"faults": [{"status": 500, "retry_after": 0.01}]})
    oai, ant = make_openai(http, max_retries=1), make_anthropic(http, max_retries=1)
    via = "openai-tool" if api == "openai" else "anthropic-tool"
    await act(via, oai, ant, actor_prompt("Explain gravity."))
    assert [entry["status"] for entry in await control(http, "GET", "requests")] == [500, 200]


async def test_server_errors_map_to_sdk_classes(oai, ant, http):
    faults = [{"status": 500}, {"status": 503}, {"status": 529}, {"status": 503}]
    await control(http, "POST", "faults", {"faults": faults})
    for expected in (
        anthropic.InternalServerError,
        anthropic.ServiceUnavailableError,
        anthropic.OverloadedError,
    ):
        with pytest.raises(expected):
            await act("anthropic-tool", oai, ant, actor_prompt("Anything."))
    with pytest.raises(openai.InternalServerError) as error:
        await act("openai-tool", oai, ant, actor_prompt("Anything."))
    assert error.value.status_code == 503


@pytest.mark.parametrize("api", ["openai", "anthropic"])
async def test_delay_fault_with_sdk_timeout_is_api_timeout_error(api, oai, ant, http):
    await control(http, "POST", "faults", {"faults": [{"delay_s": 2.0}]})
    via = "openai-json_schema" if api == "openai" else "anthropic-tool"
    error_type = openai.APITimeoutError if api == "openai" else anthropic.APITimeoutError
    with pytest.raises(error_type):
        await call(
            via,
            oai,
            ant,
            name="actor_output",
            schema=ACTOR_SCHEMA,
            prompt=actor_prompt("Slow."),
            timeout=0.2,
        )
    (entry,) = await control(http, "GET", "requests")
    assert entry["fault"]["delay_s"] == 2.0
    assert entry["status"] == 499  # the client went away while the server was still delaying


async def test_delay_fault_then_normal_answer(oai, ant, http):
    await control(http, "POST", "faults", {"faults": [{"delay_s": 0.15}]})
    started = time.perf_counter()
    output = await act("openai-tool", oai, ant, actor_prompt("Wait for it."))
    assert time.perf_counter() - started >= 0.15
    assert "Wait for it" in output["output"]


@pytest.mark.parametrize("via", VIAS)
async def test_malformed_fault_is_well_formed_api_but_invalid_content(via, oai, ant, http):
    await control(http, "POST", "faults", {"faults": [{"malformed": True}]})
    payload, _ = await call(
        via,
        oai,
        ant,
        name="critique",
        schema=CRITIC_SCHEMA,
        prompt=critic_prompt("T", "An answer."),
    )
    if isinstance(payload, dict):
        with pytest.raises(jsonschema.ValidationError, match="required"):
            jsonschema.validate(payload, CRITIC_SCHEMA)
    else:
        with pytest.raises(json.JSONDecodeError):
            json.loads(payload)
    # the next call is healthy again
    await criticise(via, oai, ant, critic_prompt("T", "An answer."))


async def test_truncated_fault_is_cut_off_by_the_cap(oai, ant, http):
    await control(http, "POST", "faults", {"faults": [{"truncated": True}] * 2})
    chat = await oai.chat.completions.create(
        model="gpt-test",
        max_completion_tokens=77,
        messages=[{"role": "user", "content": critic_prompt("T", "An answer.")}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "critique", "schema": CRITIC_SCHEMA, "strict": True},
        },
    )
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 77
    with pytest.raises(json.JSONDecodeError):
        json.loads(chat.choices[0].message.content or "")
    message = await ant.messages.create(
        model="claude-test",
        max_tokens=55,
        messages=[{"role": "user", "content": critic_prompt("T", "An answer.")}],
    )
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 55)


async def test_fault_filters_by_stage_and_match(oai, ant, http):
    faults = [
        {"status": 500, "stage": "critique"},
        {"status": 429, "match": "needle"},
    ]
    await control(http, "POST", "faults", {"faults": faults})
    await act("openai-tool", oai, ant, actor_prompt("A haystack."))
    with pytest.raises(openai.RateLimitError):
        await act("openai-tool", oai, ant, actor_prompt("A needle."))
    with pytest.raises(openai.InternalServerError):
        await criticise("openai-tool", oai, ant, critic_prompt("A haystack.", "Text."))
    assert (await control(http, "GET", "faults"))["faults"] == []


async def test_unsupported_param_fault_refuses_only_a_request_that_carries_it(oai, ant, http):
    await control(http, "POST", "faults", {"faults": [{"unsupported_param": "temperature"}] * 2})
    messages = [{"role": "user", "content": actor_prompt("A task.")}]
    await oai.chat.completions.create(model="gpt-5-mini", messages=messages)
    assert len((await control(http, "GET", "faults"))["faults"]) == 2
    with pytest.raises(openai.BadRequestError) as refused:
        await oai.chat.completions.create(model="gpt-5-mini", messages=messages, temperature=0.7)
    assert refused.value.code == "unsupported_parameter"
    assert refused.value.param == "temperature"
    assert "Unsupported parameter: 'temperature'" in refused.value.message
    with pytest.raises(anthropic.BadRequestError) as said:
        await ant.messages.create(
            model="claude-test", max_tokens=64, messages=messages, extra_body={"temperature": 0.2}
        )
    assert "temperature: Extra inputs are not permitted" in said.value.message
    assert (await control(http, "GET", "faults"))["faults"] == []


@pytest.mark.parametrize(
    "fault",
    [{"unsupported_param": "temperature", "status": 500}, {"unsupported_param": ""}],
)
async def test_unsupported_param_fault_is_a_400_with_a_name(http, fault):
    response = await http.post("/_control/faults", json={"faults": [fault]})
    assert response.status_code == 422


# ------------------------------------------------------------------ scripted items


async def test_scripted_items_are_consumed_in_order_with_match_filters(oai, ant, http):
    scripted_critique = {
        "verdict": "escalate",
        "confidence": 0.4,
        "issues": [],
        "reflection": "A person should decide.",
        "error_class": "hallucination",
    }
    items = [
        {"stage": "critique", "match": "alpha", "response": scripted_critique},
        {"stage": "draft", "response": {"output": "first draft", "uncertainties": []}},
        {"match": "gamma", "response": {"output": "second draft", "uncertainties": ["x"]}},
    ]
    added = await control(http, "POST", "script", {"items": items})
    assert added == {"added": 3, "queued": 3}

    first = await act("openai-json_schema", oai, ant, actor_prompt("beta task"))
    assert first == {"output": "first draft", "uncertainties": []}
    built_in = await criticise("anthropic-tool", oai, ant, critic_prompt("beta", "Some text."))
    assert built_in["verdict"] == "revise"
    scripted = await criticise("anthropic-output_config", oai, ant, critic_prompt("alpha", "T."))
    assert scripted == scripted_critique
    second = await act("anthropic-tool", oai, ant, actor_prompt("gamma task"))
    assert second == {"output": "second draft", "uncertainties": ["x"]}
    assert (await control(http, "GET", "script"))["items"] == []
    fallback = await act("openai-tool", oai, ant, actor_prompt("beta task"))
    assert "beta task" in fallback["output"]

    sources = [entry["source"] for entry in await control(http, "GET", "requests")]
    assert sources == ["script", "scenario", "script", "script", "scenario"]


async def test_match_sees_the_system_prompt(oai, ant, http):
    await control(
        http,
        "POST",
        "script",
        {
            "items": [
                {"match": "careful assistant", "response": {"output": "s", "uncertainties": []}}
            ]
        },
    )
    assert (await act("anthropic-tool", oai, ant, actor_prompt("x")))["output"] == "s"


async def test_scripted_raw_is_sent_verbatim(oai, ant, http):
    items = [
        {"stage": "draft", "raw": "not json {"},
        {"stage": "draft", "raw": "not json {"},
        {"stage": "draft", "raw": '{"output": 3}'},
    ]
    await control(http, "POST", "script", {"items": items})
    content, _ = await call(
        "openai-json_schema",
        oai,
        ant,
        name="actor_output",
        schema=ACTOR_SCHEMA,
        prompt="<task>t</task>",
    )
    assert content == "not json {"
    tool_input, _ = await call(
        "anthropic-tool",
        oai,
        ant,
        name="actor_output",
        schema=ACTOR_SCHEMA,
        prompt="<task>t</task>",
    )
    assert tool_input == {"raw": "not json {"}
    tool_input, _ = await call(
        "anthropic-tool",
        oai,
        ant,
        name="actor_output",
        schema=ACTOR_SCHEMA,
        prompt="<task>t</task>",
    )
    assert tool_input == {"output": 3}


async def test_scripted_item_can_carry_a_fault(oai, ant, http):
    items = [{"stage": "critique", "fault": {"status": 529}}]
    await control(http, "POST", "script", {"items": items})
    with pytest.raises(anthropic.OverloadedError):
        await criticise("anthropic-tool", oai, ant, critic_prompt("t", "Text."))
    assert (await criticise("anthropic-tool", oai, ant, critic_prompt("t", "Text.")))["verdict"]


async def test_delete_script_and_faults(http):
    await control(http, "POST", "script", {"items": [{"response": {"a": 1}}]})
    await control(http, "POST", "faults", {"faults": [{"status": 500}]})
    assert await control(http, "DELETE", "script") == {"cleared": 1}
    assert await control(http, "DELETE", "faults") == {"cleared": 1}


async def test_control_rejects_bad_shapes(http):
    bad = [
        ("script", {"items": [{"stage": "drafting"}]}),
        ("script", {"items": [{"respones": {}}]}),
        ("faults", {"faults": [{}]}),
        ("faults", {"faults": [{"retry_after": 1}]}),
        ("faults", {"faults": [{"status": 200}]}),
        ("faults", {"faults": [{"status": 500, "truncated": True}]}),
        ("config", {"latency_ms": -1}),
    ]
    for path, body in bad:
        response = await http.post(f"/_control/{path}", json=body)
        assert response.status_code == 422, (path, body)


# ------------------------------------------------------------------ request log and config


async def test_request_log_records_calls_without_keys(oai, ant, http):
    await act("openai-json_schema", oai, ant, actor_prompt("Log me."))
    await criticise("anthropic-tool", oai, ant, critic_prompt("Log me.", "Fine text."))
    log = await control(http, "GET", "requests")
    assert [entry["seq"] for entry in log] == [1, 2]
    first, second = log
    assert first["api"] == "openai"
    assert first["stage"] == "draft"
    assert first["model"] == "gpt-test"
    assert first["temperature"] == 0.2
    assert first["auth_present"] is True
    assert first["status"] == 200
    assert first["body"]["response_format"]["json_schema"]["name"] == "actor_output"
    assert first["response"]["object"] == "chat.completion"
    assert first["fault"] is None
    assert second["api"] == "anthropic"
    assert second["stage"] == "critique"
    assert second["temperature"] == 0.0
    assert second["response"]["content"][0]["name"] == "critique"
    dumped = json.dumps(log)
    assert OPENAI_KEY not in dumped
    assert ANTHROPIC_KEY not in dumped
    assert "authorization" not in dumped.lower()

    assert await control(http, "DELETE", "requests") == {"cleared": 2}
    assert await control(http, "GET", "requests") == []


async def test_revise_stage_is_logged(oai, ant, state):
    prompt = actor_prompt("t", previous_output="old", reflections=["do better"])
    await act("anthropic-output_config", oai, ant, prompt)
    assert state.requests[-1]["stage"] == "revise"


@pytest.mark.parametrize("settings", [FakeModelSettings(log_limit=3)])
async def test_request_log_is_capped(oai, ant, http):
    for _ in range(5):
        await act("openai-tool", oai, ant, actor_prompt("x"))
    assert [entry["seq"] for entry in await control(http, "GET", "requests")] == [3, 4, 5]


async def test_latency_config_at_run_time_and_reset(oai, ant, http):
    config = await control(http, "POST", "config", {"latency_ms": 1000})
    assert config["latency_ms"] == 1000
    started = time.perf_counter()
    await act("openai-tool", oai, ant, actor_prompt("x"))
    assert time.perf_counter() - started >= 1.0

    await control(http, "POST", "script", {"items": [{"response": {"a": 1}}]})
    await control(http, "POST", "faults", {"faults": [{"status": 500}]})
    assert await control(http, "POST", "reset") == {"status": "reset"}
    assert (await control(http, "GET", "config"))["latency_ms"] == 0
    assert (await control(http, "GET", "script"))["items"] == []
    assert (await control(http, "GET", "faults"))["faults"] == []
    assert await control(http, "GET", "requests") == []
    # the latency applied is the config's (as the first call showed), and it is 0 again
    await act("openai-tool", oai, ant, actor_prompt("x"))
    assert [entry["seq"] for entry in await control(http, "GET", "requests")] == [1]


class Overlap(httpx2.AsyncBaseTransport):
    """Notes, each time the app answers, how many other requests it is still waiting on (in
    its request log without a status yet). A server that blocked its event loop during the
    latency (``time.sleep``) would finish each request before taking the next: never any."""

    def __init__(self, app) -> None:
        self._inner = TimeoutASGITransport(app)
        self._state = app.state.fakemodel
        self.most_waiting = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if not self.most_waiting:  # one answer that left others waiting is enough
            self.most_waiting = sum(1 for entry in self._state.requests if entry["status"] is None)
        return response


@pytest.mark.parametrize("settings", [FakeModelSettings(latency_ms=50)])
async def test_concurrent_calls_do_not_block(app):
    overlap = Overlap(app)
    async with httpx2.AsyncClient(transport=overlap, base_url="http://fake") as http:
        oai, ant = make_openai(http), make_anthropic(http)
        results = await asyncio.gather(
            *(
                act(
                    "openai-json_schema" if i % 2 else "anthropic-tool",
                    oai,
                    ant,
                    actor_prompt(f"t{i}"),
                )
                for i in range(200)
            )
        )
    assert overlap.most_waiting > 0  # the calls overlapped in the server
    assert all(f"t{i}" in result["output"] for i, result in enumerate(results))


async def test_thousand_concurrent_raw_requests(app, state):
    state.latency_override_ms = 100
    body = {"model": "m", "messages": [{"role": "user", "content": "<task>x</task>"}]}
    headers = {"authorization": "Bearer k"}
    overlap = Overlap(app)
    # a long read timeout: on a busy machine the last of 1000 answers can take seconds
    async with httpx2.AsyncClient(transport=overlap, base_url="http://fake", timeout=60) as http:
        responses = await asyncio.gather(
            *(http.post("/v1/chat/completions", json=body, headers=headers) for _ in range(1000))
        )
    assert overlap.most_waiting > 0
    assert {response.status_code for response in responses} == {200}
    assert len({response.json()["id"] for response in responses}) == 1000
    assert [entry["seq"] for entry in state.requests][-1] == 1000


async def test_app_instances_are_independent():
    first, second = create_app(), create_app()
    transport = TimeoutASGITransport(first)
    async with (
        httpx2.AsyncClient(transport=transport, base_url="http://fake") as one,
        httpx2.AsyncClient(transport=TimeoutASGITransport(second), base_url="http://fake") as two,
    ):
        await control(one, "POST", "faults", {"faults": [{"status": 500}]})
        await control(one, "POST", "config", {"latency_ms": 5})
        assert (await control(two, "GET", "faults"))["faults"] == []
        assert (await control(two, "GET", "config"))["latency_ms"] == 0
        client = make_openai(two)
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert await control(one, "GET", "requests") == []
