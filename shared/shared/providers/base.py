"""The provider seam: one structured call, with retries, one repair re-ask and accounting.

A provider subclass only knows its SDK: how to send one request asking for output that
follows a JSON schema, and how to read the reply. Everything else (backoff that honours
``Retry-After``, schema validation, the repair re-ask, usage and cost) lives here once.
"""

from __future__ import annotations

import functools
import json
import random
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ValidationError
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from shared import deadline
from shared.contracts import ModelExchange, Usage
from shared.errors import (
    AppError,
    BudgetExceeded,
    InvalidModelOutput,
    OutputTruncated,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from shared.logging import get_logger
from shared.prompting import escape_data
from shared.providers.calls import TRUNCATED as TRUNCATED
from shared.providers.calls import ModelCall as ModelCall
from shared.providers.calls import RawReply as RawReply
from shared.providers.capabilities import Capabilities, CapabilityOverrides, capabilities_for
from shared.providers.fitting import fit_schema
from shared.providers.pricing import PriceTable
from shared.providers.telemetry import chat_span

T = TypeVar("T", bound=BaseModel)
log = get_logger("crosscheck.providers")

MAX_RETRY_AFTER_S = 300.0
SHOWN_REPLY_CHARS = 120  # how much of an unusable reply an error quotes


@dataclass
class StructuredReply(Generic[T]):
    value: T
    usage: Usage
    exchanges: list[ModelExchange] = field(default_factory=list)
    repaired: bool = False
    # advisory values out of range that were clamped instead of re-asked ("confidence 95 -> 1")
    clamped: list[str] = field(default_factory=list)


class ModelProvider(Protocol):
    """What the Actor and Critic need from a model: a schema-true answer and its cost."""

    name: str

    async def structured(
        self,
        call: ModelCall,
        schema: type[T],
        schema_name: str,
        check: Callable[[T], list[str]] | None = None,
    ) -> StructuredReply[T]: ...

    async def aclose(self) -> None: ...


class _NoAnswer(Exception):
    """A reply with nothing to parse (``RawReply.problem``): repaired like invalid output."""


class ParameterRefused(Exception):
    """A 400 naming one parameter of the request as unsupported (see ``refused_parameter``)."""

    def __init__(
        self, param: str, *, request: dict[str, Any], rejected: UpstreamError, status: int
    ) -> None:
        super().__init__(str(rejected))
        self.param = param
        self.request = request
        self.rejected = rejected
        self.status = status
        self.attempts = 1


class TransientError(Exception):
    """Marks an SDK error worth retrying; carries the server's Retry-After, if any."""

    def __init__(
        self, message: str, *, retry_after: float | None, timeout: bool, status: int | None
    ):
        super().__init__(message)
        self.retry_after = retry_after
        self.timeout = timeout
        self.status = status


CHARS_PER_TOKEN = 4  # a prompt's tokens, estimated when no answer ever said how many
# what the exchange of an attempt that was sent and never answered says (its prompt may be
# billed by the provider: counted by its estimated tokens, as a cut-off call)
TIMED_OUT = "request timed out"
CUT_AT_DEADLINE = "cut off: the request's deadline passed"


def estimated_tokens(call: ModelCall) -> int:
    return -(-(len(call.system) + len(call.user)) // CHARS_PER_TOKEN)


def parse_retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` (delta seconds or HTTP date)."""
    if headers is None:
        return None
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(raw).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


@functools.cache
def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema in the subset strict structured-output modes accept.

    Computed once per model (pydantic rebuilds the schema on every call, which cost a tenth
    of a service's CPU per request); the result is shared, so callers must not modify it.
    """
    keep = {
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "anyOf",
        "$ref",
        "$defs",
        "description",
        "additionalProperties",
        "const",
        # bounds: llama.cpp's schema-to-grammar enforces them all; OpenAI's strict mode
        # documents minimum/maximum and minItems/maxItems (string lengths are kept for
        # OpenAI-compatible servers that honour them, and checked here on every reply)
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
    }

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items() if k in keep}
            if "properties" in node:
                out["properties"] = {k: walk(v) for k, v in node["properties"].items()}
                out["required"] = list(node["properties"])
                out["additionalProperties"] = False
            if "$defs" in node:
                out["$defs"] = {k: walk(v) for k, v in node["$defs"].items()}
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result: dict[str, Any] = walk(model.model_json_schema())
    return result


@functools.cache
def grammar_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """What a server that enforces the schema with a grammar is sent: the strict schema, or
    the model's own stricter ``grammar_schema`` of it (rules across fields that only such a
    server can keep, such as the critique's reflection record). Shared: do not modify."""
    strict = strict_json_schema(model)
    stricter = getattr(model, "grammar_schema", None)
    return stricter(strict) if callable(stricter) else strict


class BaseProvider(ABC):
    """Retries, repair and accounting around one SDK call (implemented by subclasses)."""

    name: str = "base"
    wire: Literal["openai", "anthropic"] = "openai"
    sdk_client: Any  # the official SDK's async client class
    # Parameters a server may refuse, each with the documented replacement (None: drop it).
    droppable: ClassVar[dict[str, str | None]] = {}

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None,
        timeout_s: float,
        prices: PriceTable,
        http_client: Any = None,
        max_attempts: int = 5,
        retry_initial_s: float = 0.5,
        retry_max_wait_s: float = 30.0,
        overrides: CapabilityOverrides | None = None,
    ) -> None:
        # Our own backoff wraps each call; the SDK's retries are off so they do not multiply.
        self.client = self.sdk_client(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout_s,
            max_retries=0,
            http_client=http_client,
        )
        self.prices = prices
        self.max_attempts = max_attempts
        self.retry_initial_s = retry_initial_s
        self.retry_max_wait_s = retry_max_wait_s
        self.overrides = overrides
        # model -> {refused parameter: its replacement or None}, learnt from the server's 400s
        # and kept for the life of the process, so only the first call pays the refusal.
        self.refused: dict[str, dict[str, str | None]] = {}

    def capabilities(self, model: str) -> Capabilities:
        """What ``model`` takes, by its family and this role's overrides."""
        return capabilities_for(self.wire, model, self.overrides)

    def without_refused(self, model: str, request: dict[str, Any]) -> dict[str, Any]:
        """``request`` without the parameters this model's server refused (replaced where a
        replacement is documented and not refused too)."""
        refused = self.refused.get(model)
        if not refused:
            return request
        shaped = dict(request)
        for param, replacement in refused.items():
            if param not in shaped:
                continue
            value = shaped.pop(param)
            if replacement is not None and replacement not in refused:
                shaped.setdefault(replacement, value)
        return shaped

    @abstractmethod
    async def _send(
        self, call: ModelCall, schema_name: str, schema: dict[str, Any], user: str
    ) -> RawReply:
        """One SDK request. Raise ``TransientError`` for what is worth retrying."""

    async def aclose(self) -> None:
        await self.client.close()

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        backoff = min(
            self.retry_max_wait_s, self.retry_initial_s * (2 ** (state.attempt_number - 1))
        )
        backoff = random.uniform(backoff / 2, backoff)  # full jitter on the upper half
        if isinstance(exc, TransientError) and exc.retry_after is not None:
            return min(max(exc.retry_after, 0.0), MAX_RETRY_AFTER_S)
        return backoff

    async def _send_with_retries(
        self,
        call: ModelCall,
        schema_name: str,
        schema: dict[str, Any],
        user: str,
        exchanges: list[ModelExchange],
    ) -> tuple[RawReply, int]:
        """Send with backoff on transient errors; a 400 refusing a parameter is answered by
        sending again without it (once per parameter), and the model keeps that shape."""
        attempts = 0
        dropped: set[str] = set()  # by this call; a second refusal of one of them is final
        while True:
            try:
                reply, tries = await self._send_transient_retries(
                    call, schema_name, schema, user, exchanges
                )
                return reply, attempts + tries
            except ParameterRefused as exc:
                attempts += exc.attempts
                if exc.param in dropped:
                    raise exc.rejected from exc
                dropped.add(exc.param)
                refused = self.refused.setdefault(call.model, {})
                if exc.param in refused:
                    continue  # a concurrent call learnt it while this one was in flight
                replacement = self.droppable.get(exc.param)
                refused[exc.param] = replacement
                log.warning(
                    "the model server refused a parameter; sending without it from now on",
                    provider=self.name,
                    model=call.model,
                    stage=call.stage.value,
                    parameter=exc.param,
                    replacement=replacement,
                )

    async def _send_transient_retries(
        self,
        call: ModelCall,
        schema_name: str,
        schema: dict[str, Any],
        user: str,
        exchanges: list[ModelExchange],
    ) -> tuple[RawReply, int]:
        attempts = 0
        retrying = AsyncRetrying(
            retry=retry_if_exception(lambda e: isinstance(e, TransientError)),
            # no attempt that would start after the request's deadline (shared.deadline)
            stop=stop_after_attempt(self.max_attempts) | deadline.stop_at_deadline(),
            wait=self._wait,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    start = time.perf_counter()
                    try:
                        with chat_span(self.name, call, user) as answered:
                            async with deadline.timeout():
                                reply = await self._send(call, schema_name, schema, user)
                            answered(reply)
                    except TimeoutError:  # the deadline, not the SDK's timeout (a TransientError)
                        exchanges.append(
                            ModelExchange(
                                request={"model": call.model, "stage": call.stage.value},
                                error=CUT_AT_DEADLINE,
                                latency_ms=(time.perf_counter() - start) * 1000,
                            )
                        )
                        raise BudgetExceeded(
                            f"model provider {self.name} ({call.model}) for {call.stage.value}: "
                            f"the request's deadline passed during attempt {attempts}"
                        ) from None
                    except ParameterRefused as exc:
                        exchanges.append(
                            ModelExchange(
                                request=exc.request,
                                error=str(exc.rejected),
                                status=exc.status,
                                latency_ms=(time.perf_counter() - start) * 1000,
                            )
                        )
                        raise
                    except TransientError as exc:
                        exchanges.append(
                            ModelExchange(
                                request={"model": call.model, "stage": call.stage.value},
                                error=str(exc),
                                status=exc.status,
                                latency_ms=(time.perf_counter() - start) * 1000,
                            )
                        )
                        log.warning(
                            "model call failed, will retry if budget allows",
                            provider=self.name,
                            model=call.model,
                            stage=call.stage.value,
                            attempt=attempts,
                            status=exc.status or type(exc.__cause__ or exc).__name__,
                            retry_after=exc.retry_after,
                        )
                        raise
                    exchanges.append(
                        ModelExchange(
                            request=reply.request,
                            response=reply.response,
                            status=200,
                            latency_ms=(time.perf_counter() - start) * 1000,
                        )
                    )
                    return reply, attempts
        except ParameterRefused as exc:
            exc.attempts = attempts  # the caller counts them
            raise
        except TransientError as exc:
            where = f"{self.name} ({call.model}) for {call.stage.value}"
            if attempts < self.max_attempts:  # stopped early: the next wait passed the deadline
                raise BudgetExceeded(
                    f"model provider {where} failed {attempts} time(s) and the request's "
                    f"deadline leaves no time for another attempt: {exc}"
                ) from exc
            if exc.timeout:
                raise UpstreamTimeout(
                    f"model provider {where} timed out {attempts} time(s); giving up"
                ) from exc
            raise UpstreamUnavailable(
                f"model provider {where} kept failing after {attempts} attempt(s): {exc}"
            ) from exc
        raise AssertionError("unreachable: tenacity either returns or raises")

    async def structured(
        self,
        call: ModelCall,
        schema: type[T],
        schema_name: str,
        check: Callable[[T], list[str]] | None = None,
    ) -> StructuredReply[T]:
        """Ask for ``schema``; re-ask once with the problems if the answer does not fit.

        A reply cut off by its output-token cap is asked again once, with the same prompt
        (never the cut-off text) and a larger cap (``ModelCall.grown_cap``); cut off again, it
        raises ``OutputTruncated``. Advisory numbers out of range (``schema.ADVISORY``) are
        clamped and listed in ``clamped``, not re-asked. Schema violations that survive the
        repair raise ``InvalidModelOutput``; problems found only by ``check`` (semantic
        checks) are accepted after the repair, and the caller decides what to do with them.
        Every error raised after a model answered carries the ``usage`` of the calls made
        (``exc.extra["usage"]``) and their round trips (``exc.extra["exchanges"]``, never
        credentials), so failed calls are billed and shown like the others.
        """
        json_schema = strict_json_schema(schema)
        advisory: tuple[str, ...] = getattr(schema, "ADVISORY", ())
        exchanges: list[ModelExchange] = []
        started = time.perf_counter()
        # "counted": the exchanges whose attempts are in "attempts" (each attempt adds one)
        spent = {"input": 0, "output": 0, "attempts": 0, "counted": 0, "cut_off": 0}

        def usage() -> Usage:
            return Usage(
                provider=self.name,
                model=call.model,
                input_tokens=spent["input"],
                output_tokens=spent["output"],
                cost_usd=self.prices.cost(call.model, spent["input"], spent["output"]),
                latency_ms=round((time.perf_counter() - started) * 1000, 3),
                attempts=max(spent["attempts"], 1),
                cut_off_calls=spent["cut_off"],
            )

        try:
            return await self._structured(
                call, schema, schema_name, check, json_schema, advisory, exchanges, spent, usage
            )
        except AppError as exc:
            # the attempts of the send that failed (5xx, timeouts, the deadline) count too: a
            # timed-out one was sent, so its prompt is counted by its estimated tokens
            failed = exchanges[spent["counted"] :]
            spent["attempts"] += len(failed)
            cut_off = sum(1 for e in failed if e.error in (TIMED_OUT, CUT_AT_DEADLINE))
            spent["cut_off"] += cut_off
            spent["input"] += cut_off * estimated_tokens(call)
            if spent["attempts"]:
                exc.extra["usage"] = usage().model_dump(mode="json")
                exc.extra["exchanges"] = [e.model_dump(mode="json") for e in exchanges]
            raise

    async def _structured(
        self,
        call: ModelCall,
        schema: type[T],
        schema_name: str,
        check: Callable[[T], list[str]] | None,
        json_schema: dict[str, Any],
        advisory: tuple[str, ...],
        exchanges: list[ModelExchange],
        spent: dict[str, int],
        usage: Callable[[], Usage],
    ) -> StructuredReply[T]:
        user = call.user
        value: T | None = None
        problems: list[str] = []
        clamped: list[str] = []
        grown = False
        repaired = False
        raw: RawReply | None = None
        sent = json_schema
        if self.capabilities(call.model).fit_to_cap:  # a grammar: the reply must close
            # fitted to the first cap, and kept for the larger retry: twice the room for a
            # reply that runs to fewer characters a token than counted (digits: one each)
            sent = fit_schema(grammar_json_schema(schema), call.max_tokens)
        while True:
            raw, tries = await self._send_with_retries(call, schema_name, sent, user, exchanges)
            spent["attempts"] += tries
            spent["counted"] = len(exchanges)
            spent["input"] += raw.input_tokens
            spent["output"] += raw.output_tokens
            if raw.truncated:
                bigger = call.grown_cap()
                if grown or bigger <= call.max_tokens:
                    raise OutputTruncated(
                        f"the {self.name} model '{call.model}' did not finish its "
                        f"'{schema_name}' reply within {call.max_tokens} output tokens"
                        f"{' (already the larger retry cap)' if grown else ''}: "
                        + _reply_facts(raw, call.max_tokens)
                    )
                log.info(
                    "model reply cut off by its cap; asking again with a larger cap",
                    provider=self.name,
                    model=call.model,
                    stage=call.stage.value,
                    cap=call.max_tokens,
                    retry_cap=bigger,
                )
                call = replace(call, max_tokens=bigger)
                grown = True
                continue  # the same prompt: a cut-off reply is not worth showing back
            try:
                if raw.problem:
                    raise _NoAnswer(raw.problem)
                data, clamped = _clamp(raw.payload, json_schema, advisory)
                value = (
                    schema.model_validate_json(data)
                    if isinstance(data, str)
                    else schema.model_validate(data)
                )
                problems = check(value) if check is not None else []
            except ValidationError as exc:
                value = None
                problems = [_describe(exc)]
            except _NoAnswer as exc:
                value = None
                problems = [str(exc)]
            if not problems or repaired:
                break
            log.info(
                "model output needs repair",
                provider=self.name,
                model=call.model,
                stage=call.stage.value,
                problems=problems[:5],
            )
            user = _repair_prompt(call.user, raw.payload, problems)
            repaired = True
        if value is None:
            raise InvalidModelOutput(
                f"the {self.name} model '{call.model}' returned output that does not match the "
                f"'{schema_name}' schema, even after one repair request: {problems[0]} "
                f"({_reply_facts(raw, call.max_tokens)})"
            )
        if clamped:
            log.info(
                "advisory values out of range clamped",
                provider=self.name,
                model=call.model,
                stage=call.stage.value,
                clamped=clamped,
            )
        return StructuredReply(
            value=value, usage=usage(), exchanges=exchanges, repaired=repaired, clamped=clamped
        )


def _reply_facts(raw: RawReply, cap: int) -> str:
    """What a 422 says about the reply: why it ended, its size against the cap, its start."""
    shown = raw.payload if isinstance(raw.payload, str) else json.dumps(raw.payload)
    head = shown[:SHOWN_REPLY_CHARS]
    more = "..." if len(shown) > SHOWN_REPLY_CHARS else ""
    return (
        f"finish reason {raw.finish_reason or 'unknown'}, {raw.output_tokens} of {cap} "
        f"output tokens, reply begins {head!r}{more}"
    )


def _bounds(node: dict[str, Any]) -> tuple[float | None, float | None]:
    for option in [node, *node.get("anyOf", [])]:
        if "minimum" in option or "maximum" in option:
            return option.get("minimum"), option.get("maximum")
    return None, None


def _clamp(payload: Any, schema: dict[str, Any], fields: tuple[str, ...]) -> tuple[Any, list[str]]:
    """Bring the advisory top-level numbers ``fields`` into their schema range.

    An advisory value (a confidence, a score) is worth less than a round trip: out of range,
    it is clamped and noted. Anything else (a JSON text that does not parse, a value that
    decides) is left for validation to refuse."""
    if not fields:
        return payload, []
    data = payload
    if isinstance(payload, str):
        try:
            data = json.loads(payload)
        except ValueError:
            return payload, []
    if not isinstance(data, dict):
        return payload, []
    notes: list[str] = []
    properties = schema.get("properties", {})
    for name in fields:
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        low, high = _bounds(properties.get(name, {}))
        fixed = value
        if low is not None and value < low:
            fixed = low
        if high is not None and value > high:
            fixed = high
        if fixed != value:
            notes.append(f"{name} {value} clamped to {fixed}")
            data = {**data, name: fixed}
    return (data if notes else payload), notes


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(root)"
        parts.append(f"{loc}: {err.get('msg')}")
    return "; ".join(parts)


def _repair_prompt(original: str, payload: Any, problems: list[str]) -> str:
    # The model's reply and the problems (which quote it) are data, escaped like any other;
    # ``original`` is the prompt as rendered, its data escaped already.
    shown = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    listed = escape_data("\n".join(f"- {p}" for p in problems))
    return (
        f"{original}\n\n<repair>\nYour previous reply could not be used:\n{listed}\n"
        f"Previous reply (do not repeat its mistakes):\n{escape_data(shown[:4000])}\n"
        "Answer again with one object that follows the required schema exactly.\n</repair>"
    )


_UNSUPPORTED = re.compile(
    r"unsupported|not supported|does not support|not permitted|not allowed|unrecognized"
    r"|unknown (?:parameter|field|argument)|extra inputs|only the default",
    re.IGNORECASE,
)


def refused_parameter(
    body: object, message: str, sent: dict[str, Any], droppable: dict[str, str | None]
) -> str | None:
    """The parameter a 400 refuses, if it is one we sent and may drop or replace.

    OpenAI names it (``param`` with ``code: unsupported_parameter`` or ``unsupported_value``);
    other servers only say it in the message ("temperature: Extra inputs are not permitted"),
    so a message that says "unsupported" (or alike) and names exactly one droppable parameter
    we sent counts too. Anything else (a value too large, a bad schema) is not a refusal.
    """
    error: object = body.get("error", body) if isinstance(body, dict) else None
    fields: dict[str, Any] = error if isinstance(error, dict) else {}
    candidates = [p for p in droppable if p in sent]
    param, code = fields.get("param"), fields.get("code")
    if code in ("unsupported_parameter", "unsupported_value") and param in candidates:
        return str(param)
    text = fields.get("message") if isinstance(fields.get("message"), str) else message
    if not isinstance(text, str) or not _UNSUPPORTED.search(text):
        return None
    named = [p for p in candidates if re.search(rf"(?<![\w.]){re.escape(p)}(?!\w)", text)]
    return named[0] if len(named) == 1 else None


@contextmanager
def sdk_errors(
    provider: str,
    sdk: Any,
    request: dict[str, Any] | None = None,
    droppable: dict[str, str | None] | None = None,
) -> Iterator[None]:
    """Map an official SDK's errors (both SDKs name them alike) onto our taxonomy.

    With the ``request`` sent, a 400 refusing one of its ``droppable`` parameters becomes
    ``ParameterRefused`` so the caller can send again without it.
    """
    try:
        yield
    except sdk.APITimeoutError as exc:
        raise TransientError(TIMED_OUT, retry_after=None, timeout=True, status=None) from exc
    except sdk.APIConnectionError as exc:
        raise TransientError(
            f"connection failed: {exc}", retry_after=None, timeout=False, status=None
        ) from exc
    except sdk.APIStatusError as exc:
        if classify_status(exc.status_code):
            raise TransientError(
                f"HTTP {exc.status_code}",
                retry_after=parse_retry_after(exc.response.headers),
                timeout=False,
                status=exc.status_code,
            ) from exc
        rejected = upstream_rejected(provider, exc.status_code, exc.message)
        if exc.status_code == 400 and request is not None and droppable:
            param = refused_parameter(exc.body, exc.message, request, droppable)
            if param is not None:
                raise ParameterRefused(
                    param, request=request, rejected=rejected, status=exc.status_code
                ) from exc
        raise rejected from exc


def classify_status(status: int) -> bool:
    """Whether an HTTP status from a provider is worth retrying."""
    return status in (408, 409, 425, 429) or status >= 500


def upstream_rejected(provider: str, status: int, message: str) -> UpstreamError:
    return UpstreamError(f"model provider {provider} rejected the request ({status}): {message}")
