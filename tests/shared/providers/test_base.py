import time
from email.utils import formatdate

import pytest

from shared.contracts import Critique
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
        for keyword in ("'default'", "'minimum'", "'maximum'", "'title'"):
            assert keyword not in text
