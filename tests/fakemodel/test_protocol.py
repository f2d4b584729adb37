"""Reading both request formats and rendering answers, without HTTP."""

import json
from typing import Any

import pytest

from fakemodel.protocol import (
    Answer,
    InvalidRequest,
    answer_text,
    anthropic_error,
    openai_error,
    parse_anthropic,
    parse_openai,
    tool_input,
    truncate_json,
)

SCHEMA = {"type": "object", "properties": {"output": {}}, "required": ["output", "uncertainties"]}


def test_openai_forced_tool_wins_over_response_format():
    call = parse_openai(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": [{"type": "text", "text": "first"}]},
                {"role": "assistant", "content": "reply"},
                {"role": "user", "content": "last"},
            ],
            "tools": [{"type": "function", "function": {"name": "critique", "parameters": {}}}],
            "tool_choice": {"type": "function", "function": {"name": "critique"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "actor_output"}},
        }
    )
    assert (call.mode, call.schema_name) == ("tool", "critique")
    assert call.last_user_text == "last"
    assert call.match_text == "sys\nfirst\nlast"
    assert call.temperature is None


def test_openai_json_object_and_plain_text_modes():
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 1}
    assert parse_openai({**base, "response_format": {"type": "json_object"}}).mode == "json"
    plain = parse_openai(base)
    assert plain.mode == "text"
    assert plain.temperature == 1.0


def test_anthropic_output_config_has_no_name():
    call = parse_anthropic(
        {
            "model": "m",
            "max_tokens": 10,
            "system": [{"type": "text", "text": "sys"}],
            "messages": [{"role": "user", "content": "u"}],
            "output_config": {"format": {"type": "json_schema", "schema": SCHEMA}},
        }
    )
    assert (call.mode, call.schema_name, call.schema) == ("json", None, SCHEMA)
    assert call.match_text == "sys\nu"


@pytest.mark.parametrize(
    ("parse", "body"),
    [
        (parse_openai, {"messages": [{"role": "user", "content": "x"}]}),
        (parse_openai, {"model": "m", "messages": "x"}),
        (parse_openai, {"model": "m", "messages": [{"role": "user"}], "temperature": "hot"}),
        (
            parse_openai,
            {
                "model": "m",
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "function", "function": {"name": "missing"}},
            },
        ),
        (parse_anthropic, {"model": "m", "messages": [{"role": "user", "content": "x"}]}),
        (
            parse_anthropic,
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "x"}],
                "tool_choice": {"type": "tool", "name": "missing"},
            },
        ),
    ],
)
def test_invalid_requests(parse, body):
    with pytest.raises(InvalidRequest):
        parse(body)


def test_malformed_json_no_longer_parses():
    answer = Answer(value={"output": "x", "uncertainties": []}, malformed=True)
    text = answer_text("json", answer)
    assert text == truncate_json(json.dumps(answer.value))
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_tool_input_is_always_an_object():
    assert tool_input(None, Answer(raw="[1, 2]")) == {"raw": "[1, 2]"}
    assert tool_input(None, Answer(raw='{"a": 1}')) == {"a": 1}
    assert tool_input(None, Answer(value=[1])) == {"value": [1]}
    malformed = tool_input(
        SCHEMA, Answer(value={"output": "x", "uncertainties": []}, malformed=True)
    )
    assert malformed == {"uncertainties": []}
    assert tool_input(None, Answer(value={"only": 1}, malformed=True)) == {
        "unexpected": "scripted malformed output"
    }


def test_plain_text_of_an_actor_answer_is_its_output():
    assert answer_text("text", Answer(value={"output": "hi", "uncertainties": []})) == "hi"
    critique: Any = {"verdict": "pass", "output": "x"}
    assert json.loads(answer_text("text", Answer(value=critique))) == critique


def test_error_bodies():
    assert openai_error(429)["error"]["code"] == "rate_limit_exceeded"
    assert openai_error(502)["error"]["type"] == "server_error"
    assert anthropic_error(529)["error"]["type"] == "overloaded_error"
    assert anthropic_error(418)["error"]["type"] == "invalid_request_error"
    assert anthropic_error(500, "boom")["error"]["message"] == "boom"
