"""Per-app state: the script queue, the fault queue, the request log and run-time config.

Everything lives on one :class:`FakeModelState` owned by the app instance, so several
servers can run side by side in one process. Queue operations never await, so concurrent
requests each consume a distinct item.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection, Iterator
from typing import Any, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from fakemodel.settings import FakeModelSettings

StageFilter = Literal["draft", "revise", "critique", "embeddings", "distill", "any"]
ApiFilter = Literal["openai", "anthropic", "any"]
Api = Literal["openai", "anthropic"]


class _Control(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fault(_Control):
    """One injected failure, consumed by exactly one model request.

    ``status`` answers with that HTTP error (``retry_after`` adds a ``retry-after`` header);
    ``delay_s`` sleeps first (alone, the call then answers normally); ``malformed`` answers a
    well-formed API response whose structured content does not validate; ``truncated``
    answers as a reply cut off by the request's output-token cap (half the content,
    ``finish_reason: length`` / ``stop_reason: max_tokens``, the cap's tokens spent);
    ``unsupported_param`` refuses a request that carries that top-level parameter with a 400
    in the provider's shape (OpenAI: ``param`` and ``code: unsupported_parameter``), as a real
    model refuses e.g. ``temperature``; a request without it does not consume the fault.
    ``ramble`` answers as a small model held to the schema by a grammar that never stops
    early: every string as long as the schema sent allows, every array full; a reply longer
    than the request's cap (three characters a token) is cut off there.
    """

    status: int | None = Field(default=None, ge=400, le=599)
    retry_after: float | None = Field(default=None, ge=0)
    delay_s: float | None = Field(default=None, ge=0, le=600)
    malformed: bool = False
    truncated: bool = False
    ramble: bool = False
    message: str | None = None
    unsupported_param: str | None = Field(default=None, min_length=1, max_length=100)
    stage: StageFilter = "any"
    match: str | None = None
    api: ApiFilter = "any"

    @model_validator(mode="after")
    def _does_something(self) -> Self:
        if self.unsupported_param is not None:
            if self.status not in (None, 400) or self.malformed or self.truncated:
                raise ValueError(
                    "unsupported_param answers a 400: no other status, not malformed or truncated"
                )
            self.status = 400
        if (
            self.status is None
            and self.delay_s is None
            and not self.malformed
            and not self.truncated
            and not self.ramble
        ):
            raise ValueError(
                "a fault needs at least one of status, delay_s, malformed, truncated, ramble "
                "or unsupported_param"
            )
        if self.status is not None and self.truncated:
            raise ValueError("a fault is either an HTTP error (status) or truncated, not both")
        if self.retry_after is not None and self.status is None:
            raise ValueError("retry_after needs a status")
        if self.status is not None and self.malformed:
            raise ValueError("a fault is either an HTTP error (status) or malformed, not both")
        return self


class ScriptItem(_Control):
    """One scripted answer, consumed by the first model call whose stage and text fit.

    ``response`` is the structured output to send; ``raw`` is sent verbatim as the content
    (or tool-input source) instead; ``fault`` is applied to the call that consumes the item.
    With none of them the call answers from the built-in scenarios.
    """

    stage: StageFilter = "any"
    match: str | None = None
    api: ApiFilter = "any"
    response: JsonValue = None
    raw: str | None = None
    fault: Fault | None = None
    temperature: float | None = Field(
        default=None, description="Only a call at this sampling temperature consumes it."
    )


class ScriptBody(_Control):
    items: list[ScriptItem] = Field(min_length=1)


class FaultsBody(_Control):
    faults: list[Fault] = Field(min_length=1)


class ConfigBody(_Control):
    latency_ms: int | None = Field(default=None, ge=0, le=600_000)


def fits(
    candidate: ScriptItem | Fault,
    *,
    api: Api,
    stage: str,
    text: str,
    temperature: float | None = None,
    params: Collection[str] = (),
) -> bool:
    """Whether an item or fault applies to a call of ``api`` at ``stage`` over ``text``
    (an item that names a ``temperature``: only to a call at that temperature; a fault that
    refuses a parameter: only to a call whose top-level ``params`` include it)."""
    if candidate.api not in ("any", api):
        return False
    refused = getattr(candidate, "unsupported_param", None)
    if refused is not None and refused not in params:
        return False
    wanted = getattr(candidate, "temperature", None)
    if wanted is not None and (temperature is None or abs(temperature - wanted) > 1e-9):
        return False
    if candidate.stage not in ("any", stage):
        return False
    return candidate.match is None or candidate.match in text


_Queued = TypeVar("_Queued", ScriptItem, Fault)


def _take_first(
    queue: deque[_Queued],
    *,
    api: Api,
    stage: str,
    text: str,
    temperature: float | None = None,
    params: Collection[str] = (),
) -> _Queued | None:
    for index, candidate in enumerate(queue):
        if fits(candidate, api=api, stage=stage, text=text, temperature=temperature, params=params):
            del queue[index]
            return candidate
    return None


class FakeModelState:
    """What one fake model server holds."""

    def __init__(self, settings: FakeModelSettings) -> None:
        self.settings = settings
        self.script: deque[ScriptItem] = deque()
        self.faults: deque[Fault] = deque()
        self.requests: deque[dict[str, Any]] = deque(maxlen=settings.log_limit)
        self.latency_override_ms: int | None = None
        self._seq: Iterator[int] = itertools.count(1)

    @property
    def latency_ms(self) -> int:
        if self.latency_override_ms is not None:
            return self.latency_override_ms
        return self.settings.latency_ms

    def next_seq(self) -> int:
        return next(self._seq)

    def take_item(
        self, *, api: Api, stage: str, text: str, temperature: float | None = None
    ) -> ScriptItem | None:
        return _take_first(self.script, api=api, stage=stage, text=text, temperature=temperature)

    def take_fault(
        self, *, api: Api, stage: str, text: str, params: Collection[str] = ()
    ) -> Fault | None:
        return _take_first(self.faults, api=api, stage=stage, text=text, params=params)

    def reset(self) -> None:
        self.script.clear()
        self.faults.clear()
        self.requests.clear()
        self.latency_override_ms = None
        self._seq = itertools.count(1)
