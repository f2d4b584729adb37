"""The tracing switch: ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, a service exports its spans by
OTLP/HTTP (to a real receiver on loopback here); unset, nothing is installed or exported."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from pydantic import ValidationError

from actor.app import create_app as create_actor
from shared import tracing
from tests.support.apps import serving
from tests.support.factories import OPENAI_KEY, actor_settings
from tests.support.tracing import CALLER_SPAN_ID, TRACE_ID, TRACEPARENT, otlp_receiver

TASK = "Explain why the sky is blue."


def attributes(span: Span) -> dict:
    """An OTLP span's attributes as plain values."""
    found = {}
    for attribute in span.attributes:
        value = attribute.value
        found[attribute.key] = getattr(value, value.WhichOneof("value"))
    return found


@pytest.fixture
def receiver(monkeypatch):
    """A loopback collector, named by the environment as an operator would; content on."""
    with otlp_receiver() as running:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", running.url)
        monkeypatch.setenv("CROSSCHECK_TRACE_CONTENT", "1")
        try:
            yield running
        finally:
            tracing.shutdown()  # the process's provider: later tests start with tracing off


async def draft(app, token: str, **headers: str):
    async with serving(app, token) as client:
        response = await client.post(
            "/v1/draft", json={"task": TASK, "kind": "text"}, headers=headers
        )
    assert response.status_code == 200, response.text
    return response


class TestOtlpExport:
    async def test_a_services_spans_reach_the_collector_in_the_callers_trace(
        self, receiver, fake_model, service_token
    ):
        app = create_actor(actor_settings(fake=fake_model, token=service_token))
        await draft(app, service_token, traceparent=TRACEPARENT)
        assert tracing.flush()

        assert set(receiver.paths) == {"/v1/traces"}
        assert receiver.service_names() == {"crosscheck-actor"}
        spans = {span.name: span for span in receiver.spans()}
        served = spans["POST /v1/draft"]
        assert served.kind == Span.SPAN_KIND_SERVER
        assert served.trace_id.hex() == TRACE_ID
        assert served.parent_span_id.hex() == CALLER_SPAN_ID
        call = spans["chat gpt-5-mini"]
        assert call.kind == Span.SPAN_KIND_CLIENT
        assert call.trace_id.hex() == TRACE_ID
        assert call.parent_span_id == served.span_id
        found = attributes(call)
        assert found["gen_ai.operation.name"] == "chat"
        assert found["gen_ai.provider.name"] == "openai"
        assert found["gen_ai.request.model"] == "gpt-5-mini"
        assert found["gen_ai.response.model"]
        assert found["gen_ai.usage.input_tokens"] > 0
        assert found["gen_ai.usage.output_tokens"] > 0
        # CROSSCHECK_TRACE_CONTENT=1: the prompt is there; the key never is
        assert TASK in found["gen_ai.input.messages"]
        assert not [v for v in found.values() if OPENAI_KEY in str(v)]

    def test_the_endpoint_must_be_an_http_url(self, monkeypatch, fake_model, service_token):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")
        with pytest.raises(ValidationError, match="OTEL_EXPORTER_OTLP_ENDPOINT must be"):
            actor_settings(fake=fake_model, token=service_token)


class TestTracingOff:
    async def test_without_an_endpoint_nothing_is_installed_or_exported(
        self, fake_model, service_token
    ):
        with otlp_receiver() as running:
            app = create_actor(actor_settings(fake=fake_model, token=service_token))
            assert not tracing.enabled()
            assert tracing.provider() is None
            assert isinstance(tracing.tracer(), trace.NoOpTracer)
            # OpenTelemetry's global provider is left alone: still the API's proxy
            assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
            await draft(app, service_token, traceparent=TRACEPARENT)
            assert tracing.flush()
            assert running.paths == []

    def test_a_service_never_loads_the_sdk(self, service_token):
        """A process of its own: the test process has loaded the SDK for other tests."""
        probe = (
            "import sys\n"
            "from sandbox.app import create_app\n"
            "from sandbox.fake import FakeExecutor\n"
            "from sandbox.settings import SandboxSettings\n"
            f"create_app(SandboxSettings(service_token={service_token!r}), "
            "executor=FakeExecutor())\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
        )
        assert done.stdout.strip() == "[]"
