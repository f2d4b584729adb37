import io
import json
import logging

import pytest

from shared.logging import REDACTED, configure_logging, get_logger, scrub, scrub_text


@pytest.fixture
def json_logs():
    stream = io.StringIO()
    configure_logging(
        "test", level="DEBUG", json=True, secrets=["my-registered-secret-value"], stream=stream
    )

    def read() -> list[dict]:
        return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]

    return read


class TestRedaction:
    def test_secret_keys_are_masked_but_token_counts_are_not(self):
        event = scrub(
            {
                "Authorization": "Bearer abc",
                "x-api-key": "k",
                "service_token": "t",
                "input_tokens": 12,
                "nested": {"openai_api_key": "sk-abcdefghijkl"},
            }
        )
        assert event["Authorization"] == REDACTED
        assert event["x-api-key"] == REDACTED
        assert event["service_token"] == REDACTED
        assert event["input_tokens"] == 12
        assert event["nested"]["openai_api_key"] == REDACTED

    @pytest.mark.parametrize(
        "text",
        [
            "header Authorization: Bearer eyJhbGciOi.payload.sig",
            "key=sk-proj-ABCDEFGHIJKLMNOP1234",
            "anthropic sk-ant-api03-abcdefghijklmnop",
            "{'x-api-key': 'plainvalue123'}",
        ],
    )
    def test_secret_shaped_values_are_masked(self, text):
        scrubbed = scrub_text(text)
        assert REDACTED in scrubbed
        for secret in ("eyJhbGciOi", "ABCDEFGHIJKLMNOP", "abcdefghijklmnop", "plainvalue123"):
            assert secret not in scrubbed


class TestConfiguredLogging:
    def test_structlog_records_are_json_and_redacted(self, json_logs):
        get_logger("t").info(
            "calling", api_key="sk-live-0123456789", detail="my-registered-secret-value!"
        )
        [record] = json_logs()
        assert record["event"] == "calling"
        assert record["service"] == "test"
        assert record["api_key"] == REDACTED
        assert "my-registered-secret-value" not in json.dumps(record)

    def test_stdlib_library_logs_are_redacted_too(self, json_logs):
        logging.getLogger("httpx").debug(
            "headers: %s", {"authorization": "Bearer secret-token-xyz"}
        )
        [record] = json_logs()
        assert "secret-token-xyz" not in json.dumps(record)

    def test_tracebacks_are_scrubbed(self, json_logs):
        try:
            raise RuntimeError("failed with key my-registered-secret-value")
        except RuntimeError:
            get_logger("t").exception("boom")
        [record] = json_logs()
        assert "my-registered-secret-value" not in json.dumps(record)
        assert "RuntimeError" in record["exception"]
