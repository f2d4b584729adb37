"""Spans recorded in memory (the SDK's ``InMemorySpanExporter``) and a loopback OTLP receiver."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shared import tracing

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CALLER_SPAN_ID}-01"


@contextmanager
def recording(*, content: bool = False) -> Iterator[InMemorySpanExporter]:
    """Tracing on for the block, every finished span kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider, content=content)
    try:
        yield exporter
    finally:
        tracing.install(None)
        provider.shutdown()


async def spans_until(
    exporter: InMemorySpanExporter,
    done: Callable[[list[ReadableSpan]], bool],
    timeout: float = 10.0,
) -> list[ReadableSpan]:
    """The finished spans once ``done`` holds of them: a run's last span ends just after the
    run's final status is visible."""
    deadline = time.monotonic() + timeout
    while True:
        spans = list(exporter.get_finished_spans())
        if done(spans) or time.monotonic() > deadline:
            return spans
        await asyncio.sleep(0.05)


def hex_id(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def attribute_texts(spans: list[ReadableSpan]) -> list[str]:
    """Every attribute and event value of ``spans``, as text, to look for secrets in."""
    texts = []
    for span in spans:
        texts.append(span.name)
        for attributes in [span.attributes, *(e.attributes for e in span.events)]:
            texts.extend(str(v) for v in (attributes or {}).values())
    return texts


class OtlpReceiver:
    """A collector's OTLP/HTTP trace endpoint on loopback: it keeps each decoded export."""

    def __init__(self) -> None:
        self.exports: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.paths.append(self.path)
                if self.path == "/v1/traces":
                    receiver.exports.append(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def spans(self) -> list:
        return [
            span
            for export in self.exports
            for resource in export.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def service_names(self) -> set[str]:
        return {
            attribute.value.string_value
            for export in self.exports
            for resource in export.resource_spans
            for attribute in resource.resource.attributes
            if attribute.key == "service.name"
        }


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    receiver.thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
