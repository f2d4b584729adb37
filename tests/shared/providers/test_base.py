import time
from email.utils import formatdate

import pytest

from actor.service import ActorOutput
from shared.contracts import MAX_ISSUES, Critique
from shared.providers.base import parse_retry_after, strict_json_schema


class TestRetryAfter:
    def test_seconds(self):
        assert parse_retry_after({"retry-after": "2"}) == 2.0

    def test_milliseconds_win(self):
        assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25

    def test_http_date(self):
        value = parse_retry_after({"retry-after": formatdate(time.time() + 30, usegmt=True)})
        assert value == pytest.approx(30, abs=2)

    def test_missing_or_garbage(self):
        assert parse_retry_after({}) is None
        assert parse_retry_after({"retry-after": "soon"}) is None


class TestStrictSchema:
    def test_every_object_closed_and_fully_required(self):
        schema = strict_json_schema(Critique)
        assert schema["additionalProperties"] is False
        assert set(schema["required"]) == set(schema["properties"])
        issue = schema["$defs"]["CritiqueIssue"]
        assert issue["additionalProperties"] is False
        assert "quote" in issue["required"]

    def test_unsupported_keywords_are_dropped(self):
        text = str(strict_json_schema(Critique))
        for keyword in ("'default'", "'title'"):
            assert keyword not in text

    def test_bounds_are_kept(self):
        # a grammar-constrained server only keeps a model in range if the range is sent
        schema = strict_json_schema(Critique)
        props = schema["properties"]
        assert (props["confidence"]["minimum"], props["confidence"]["maximum"]) == (0.0, 1.0)
        assert {"type": "integer", "minimum": 0, "maximum": 10} in props["continue_value"]["anyOf"]
        assert props["issues"]["maxItems"] == MAX_ISSUES

    @pytest.mark.parametrize("model", [Critique, ActorOutput], ids=["critique", "actor_output"])
    def test_every_free_text_field_has_a_max_length(self, model):
        schema = strict_json_schema(model)
        unbounded = []

        def walk(node, where):
            if isinstance(node, dict):
                if node.get("type") == "string" and "enum" not in node:
                    if "maxLength" not in node:
                        unbounded.append(where)
                for key, value in node.items():
                    walk(value, f"{where}.{key}")
            elif isinstance(node, list):
                for i, value in enumerate(node):
                    walk(value, f"{where}[{i}]")

        walk(schema, "$")
        assert unbounded == []
