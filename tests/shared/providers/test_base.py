import time
from email.utils import formatdate

import pytest
from structlog.testing import capture_logs

from actor.service import ActorOutput
from shared.contracts import MAX_ISSUES, Critique, Provider
from shared.providers.base import parse_retry_after, refused_parameter, strict_json_schema


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


class TestRefusedParameter:
    DROPPABLE = {"temperature": None, "max_tokens": "max_completion_tokens"}
    SENT = {"model": "m", "temperature": 0.2, "max_tokens": 100, "messages": []}

    def refused(self, body, message="Error code: 400"):
        return refused_parameter(body, message, self.SENT, self.DROPPABLE)

    def test_openai_names_it(self):
        body = {"message": "x", "param": "temperature", "code": "unsupported_value"}
        assert self.refused(body) == "temperature"

    def test_anthropic_says_it(self):
        body = {
            "type": "error",
            "error": {"message": "temperature: Extra inputs are not permitted"},
        }
        assert self.refused(body) == "temperature"

    def test_a_parameter_not_sent_is_not_refused(self):
        body = {"param": "top_p", "code": "unsupported_parameter"}
        assert self.refused(body) is None
        assert self.refused({"message": "top_p is not supported"}) is None

    def test_a_message_naming_two_sent_parameters_is_ambiguous(self):
        body = {"message": "temperature and max_tokens are not supported together"}
        assert self.refused(body) is None

    def test_naming_without_refusing_is_not_a_refusal(self):
        assert self.refused({"message": "max_tokens: 100000 is too large"}) is None

    def test_a_longer_name_does_not_count_as_the_shorter(self):
        body = {"message": "Unsupported parameter: 'max_tokens_per_turn'"}
        assert self.refused(body) is None
