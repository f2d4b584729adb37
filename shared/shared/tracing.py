"""OpenTelemetry traces: on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, off (and free) otherwise.

On, the process gets one SDK tracer provider that exports by OTLP/HTTP; the services' request
spans (``shared.service``), the orchestrator's step spans and the model-call spans
(``shared.providers.telemetry``) are made with it, and the W3C ``traceparent`` header carries a
trace from a caller to the orchestrator and from there to every peer. The provider is this
module's, not OpenTelemetry's global one: installing it is undone by ``shutdown`` (tests), and
a library that installs its own global provider does not take Crosscheck's spans with it.

Off, nothing is installed and the SDK is never imported: every hook checks one flag and goes
on, so no span, context or header is made. Attributes never carry a secret: no header, no
query string, no key; prompts and outputs only with ``CROSSCHECK_TRACE_CONTENT=1``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from shared.settings import ServiceSettings

TRACEPARENT = "traceparent"
INSTRUMENTATION = "crosscheck"
# W3C TraceContext only: the global composite propagator also sends baggage, which is
# unbounded and may carry what a caller put there
_W3C = TraceContextTextMapPropagator()


class _State:
    tracer: trace.Tracer | None = None
    provider: TracerProvider | None = None
    content = False


_state = _State()


def enabled() -> bool:
    """Whether spans are recorded (a tracer provider is installed)."""
    return _state.tracer is not None


def content_enabled() -> bool:
    """Whether prompts and outputs go on the model-call spans (``CROSSCHECK_TRACE_CONTENT``)."""
    return _state.content


def provider() -> TracerProvider | None:
    return _state.provider


def install(tracer_provider: TracerProvider | None, *, content: bool = False) -> None:
    """Record spans with ``tracer_provider`` (None: tracing off). Tests install one with an
    in-memory exporter; ``configure`` installs the OTLP one."""
    _state.provider = tracer_provider
    _state.tracer = None if tracer_provider is None else tracer_provider.get_tracer(INSTRUMENTATION)
    _state.content = content and tracer_provider is not None


def traces_url(endpoint: str) -> str:
    """Where OTLP/HTTP takes traces below the base ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the
    specification's rule for the signal-independent variable)."""
    return endpoint.rstrip("/") + "/v1/traces"


def configure(settings: ServiceSettings, service: str) -> bool:
    """Install the OTLP exporting provider when the settings name an endpoint and no provider
    is installed yet (one per process, whatever number of apps it builds). Returns whether
    tracing is on."""
    if _state.provider is not None or not settings.otlp_endpoint:
        return enabled()
    # imported only here: a process with tracing off never loads the SDK
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME

    made = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    exporter = OTLPSpanExporter(endpoint=traces_url(settings.otlp_endpoint))
    made.add_span_processor(BatchSpanProcessor(exporter))
    install(made, content=settings.trace_content)
    return True


def flush(timeout_ms: int = 10_000) -> bool:
    """Export what is buffered now (the batch processor otherwise waits a few seconds)."""
    return _state.provider.force_flush(timeout_ms) if _state.provider is not None else True


def shutdown() -> None:
    """Flush and stop the installed provider; tracing is off afterwards."""
    made = _state.provider
    install(None)
    if made is not None:
        made.shutdown()


def tracer() -> trace.Tracer:
    """The installed tracer; the API's no-op one when tracing is off."""
    return _state.tracer or trace.NoOpTracer()


@contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, AttributeValue] | None = None,
    context: otel_context.Context | None = None,
) -> Iterator[Span]:
    """A current span. An exception ends it as an error with ``error.type`` (its class): its
    message is not recorded, since an upstream's may quote what it was sent."""
    with tracer().start_as_current_span(
        name,
        context=context,
        kind=kind,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except Exception as exc:
            current.set_attribute(ERROR_TYPE, type(exc).__name__)
            current.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def extract(carrier: Mapping[str, str]) -> otel_context.Context:
    """The context a ``traceparent`` in ``carrier`` names (an empty one without it)."""
    return _W3C.extract(carrier)


def context_of(traceparent: str | None) -> otel_context.Context | None:
    """The context of a stored ``traceparent``; None when there is none."""
    return None if not traceparent else extract({TRACEPARENT: traceparent})


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's ``traceparent`` to outgoing ``headers`` (nothing when off)."""
    if _state.tracer is not None:
        _W3C.inject(headers)


def current_traceparent() -> str | None:
    """The current span's ``traceparent``, to store with what outlives the request."""
    if _state.tracer is None:
        return None
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get(TRACEPARENT)


@contextmanager
def attached(ctx: otel_context.Context | None) -> Iterator[None]:
    """``ctx`` as the current context for the block (None: the context stays as it is)."""
    if ctx is None:
        yield
        return
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)
