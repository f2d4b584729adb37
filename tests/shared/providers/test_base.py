import time
from email.utils import formatdate

import pytest
from structlog.testing import capture_logs

from shared.contracts import Critique, Provider
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


class TestRetryWarning:
    """The log line of a failed attempt says what failed: the HTTP status, or the exception
    class when there is none (a timeout, a refused connection), never ``status: null``."""

    @staticmethod
    def provider(kind, fake_model, **overrides):
        from tests.shared.providers.test_contract import provider_for

        return provider_for(kind, fake_model, **overrides)

    @pytest.mark.parametrize("kind", list(Provider), ids=lambda p: p.value)
    async def test_an_http_error_logs_its_status(self, fake_model, kind):
        from tests.shared.providers.test_contract import critique_call

        fake_model.faults({"status": 503})
        provider = self.provider(kind, fake_model)
        with capture_logs() as logs:
            await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        [warning] = [e for e in logs if e["event"].startswith("model call failed")]
        assert warning["status"] == 503

    @pytest.mark.parametrize("kind", list(Provider), ids=lambda p: p.value)
    async def test_a_timeout_logs_its_exception_class(self, fake_model, kind):
        from tests.shared.providers.test_contract import critique_call

        fake_model.faults({"delay_s": 3.0})
        provider = self.provider(kind, fake_model, model_timeout_s=0.5)
        with capture_logs() as logs:
            await provider.structured(critique_call(kind), Critique, "critique")
        await provider.aclose()
        [warning] = [e for e in logs if e["event"].startswith("model call failed")]
        assert warning["status"] == "APITimeoutError"
