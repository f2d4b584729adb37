"""Evaluation summaries: what ``crosscheck eval`` measured, as the orchestrator keeps them.

The harness writes every item to ``var/eval/`` on the machine that ran it; the orchestrator
keeps only the per-mode summary and the configuration, so the console (which may run on
another machine) can show the latest evaluation beside the live metrics. Every figure is
bounded here, so a bad or oversized summary is a 422 that names the field.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, ValidationInfo, field_validator, model_validator

from shared.contracts import PrintableName, WireModel

EvalMode = Literal["single", "self", "cross", "critic"]
EVAL_MODES: tuple[EvalMode, ...] = ("single", "self", "cross", "critic")
# `crosscheck eval intercept` publishes as this dataset, with one mode, ``critic``, whose score
# is the critical-error intercept rate; the alert, the console and the command's exit code
# all hold it to this target.
INTERCEPT_DATASET = "intercept"
INTERCEPT_MODE: EvalMode = "critic"
INTERCEPT_TARGET = 0.65
# The configuration is free-form (the harness's options, the judge, a combined report's
# sources): bounded as JSON, well below the 1 MiB request limit, so a summary stays small.
MAX_CONFIG_BYTES = 16_384
MAX_COUNT = 10_000_000

Dataset = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,49}$")]
ModelName = PrintableName  # shown on the Metrics page: no control or formatting characters
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Amount = Annotated[float, Field(ge=0.0, le=1e12, allow_inf_nan=False)]
Commit = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{7,64}$")]


def bounded_config(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A configuration object no larger than ``MAX_CONFIG_BYTES`` as JSON."""
    if value is None:
        return None
    size = len(json.dumps(value, default=str).encode())
    if size > MAX_CONFIG_BYTES:
        raise ValueError(f"is {size} bytes as JSON; at most {MAX_CONFIG_BYTES} are kept")
    return value


class EvaluationMode(WireModel):
    """One mode's figures, as ``crosscheck eval`` summarises them (``results.json``)."""

    mode: EvalMode = Field(
        description="single (one Actor call), self (the Critic on the Actor's provider), "
        "cross (the Critic on the other provider), or critic (the Critic alone on labelled "
        "outputs: `crosscheck eval intercept`, whose score is the intercept rate)."
    )
    items: Count = Field(description="Items scored in this mode.")
    passed: Count | None = Field(default=None, description="Items that scored 1.")
    score: Share | None = Field(description="Mean item score, 0..1 (null: no items).")
    judge: Share | None = Field(default=None, description="The rubric judge's mean, 0..1.")
    rounds: Amount | None = Field(default=None, description="Mean rounds per item.")
    tokens: Amount | None = Field(default=None, description="Mean input + output tokens.")
    tokens_total: Annotated[int, Field(ge=0, le=10**15)] = 0
    cost_usd: Amount = Field(default=0.0, description="USD over all items.")
    latency_p50_s: Amount | None = None
    latency_p95_s: Amount | None = None
    escalations: Count | None = Field(
        default=None, description="Runs that ended escalated (null for single)."
    )
    seen_by_person: Share | None = Field(
        default=None, description="Share of items a person had to see (null for single)."
    )
    actor: Annotated[list[ModelName], Field(max_length=20)] = Field(
        default=[], description="provider/model of the Actor calls."
    )
    critic: Annotated[list[ModelName], Field(max_length=20)] = Field(
        default=[], description="provider/model of the Critic calls."
    )
    config: dict[str, Any] | None = Field(
        default=None,
        description="This mode's own configuration (a combined report's modes each keep "
        "the one they ran with).",
    )

    check_config = field_validator("config")(bounded_config)

    @model_validator(mode="after")
    def _within_items(self) -> EvaluationMode:
        for name in ("passed", "escalations"):
            value = getattr(self, name)
            if value is not None and value > self.items:
                raise ValueError(f"{name} ({value}) cannot exceed items ({self.items})")
        return self


class EvaluationCreate(WireModel):
    """A summary ``crosscheck eval`` publishes at its end (``POST /v1/evaluations``)."""

    dataset: Dataset = Field(description="The set evaluated: humaneval, text, or another name.")
    items: Count = Field(description="Items per mode.")
    limit: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None = None
    seed: Annotated[int, Field(ge=-(2**63), le=2**63 - 1)] | None = None
    modes: Annotated[list[EvaluationMode], Field(min_length=1, max_length=len(EVAL_MODES))]
    config: dict[str, Any] = Field(
        default={}, description=f"The harness's options, at most {MAX_CONFIG_BYTES} bytes."
    )
    commit: Commit | None = Field(default=None, description="The git commit evaluated.")
    started_at: datetime | None = None
    finished_at: datetime

    check_config = field_validator("config")(bounded_config)

    @field_validator("modes")
    @classmethod
    def _each_mode_once(cls, modes: list[EvaluationMode]) -> list[EvaluationMode]:
        seen = [m.mode for m in modes]
        repeated = sorted({m for m in seen if seen.count(m) > 1})
        if repeated:
            raise ValueError(f"each mode once: {', '.join(repeated)} is repeated")
        return modes

    @model_validator(mode="after")
    def _intercept_is_the_critic_alone(self) -> EvaluationCreate:
        if self.dataset == INTERCEPT_DATASET and [m.mode for m in self.modes] != [INTERCEPT_MODE]:
            raise ValueError(
                f"the {INTERCEPT_DATASET} dataset has one mode, {INTERCEPT_MODE} (its score is "
                "the intercept rate)"
            )
        return self

    @field_validator("finished_at")
    @classmethod
    def _after_start(cls, finished: datetime, info: ValidationInfo) -> datetime:
        started = info.data.get("started_at")
        if started is not None and started > finished:
            raise ValueError("started_at is after finished_at")
        return finished


class EvaluationPublic(EvaluationCreate):
    id: str
    published_by: str = Field(description="The name of the token that published it.")
    published_at: datetime
