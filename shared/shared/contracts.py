"""Wire DTOs between the services. Versioned by the ``/v1`` prefix of the routes using them.

Limits are part of the contract: a request beyond them gets a 422 that names the field and
the limit, and a body beyond ``MAX_BODY_BYTES`` gets a 413 before it is parsed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

MAX_TASK_CHARS = 20_000
MAX_OUTPUT_CHARS = 100_000
MAX_REFLECTION_CHARS = 8_000
MAX_REFLECTIONS = 50
MAX_BODY_BYTES = 1_048_576
MAX_POINTS = 20
MAX_POINT_CHARS = 2_000

TaskText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TASK_CHARS)]
OutputText = Annotated[str, StringConstraints(max_length=MAX_OUTPUT_CHARS)]


class WireModel(BaseModel):
    """Base of every DTO: unknown fields are rejected so typos fail loudly."""

    model_config = ConfigDict(extra="forbid")


class TaskKind(StrEnum):
    text = "text"
    code = "code"


class Provider(StrEnum):
    openai = "openai"
    anthropic = "anthropic"


class Stage(StrEnum):
    draft = "draft"
    revise = "revise"
    critique = "critique"


class ReflectionSource(StrEnum):
    human = "human"
    critic = "critic"
    evaluator = "evaluator"


class Reflection(WireModel):
    """A lesson the Actor revises from. Human reflections are binding and come first."""

    source: ReflectionSource
    content: Annotated[str, StringConstraints(min_length=1, max_length=MAX_REFLECTION_CHARS)]
    author: Annotated[str, StringConstraints(max_length=200)] = ""
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def binding(self) -> bool:
        return self.source is ReflectionSource.human


class Usage(WireModel):
    """What one model call cost. ``cost_usd`` is None when the model has no price entry."""

    provider: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    latency_ms: float = 0.0
    attempts: int = 1


class ModelExchange(WireModel):
    """One HTTP round trip to a model provider as sent and received (never credentials)."""

    request: dict[str, Any]
    response: dict[str, Any] | None = None
    error: str | None = None
    status: int | None = None
    latency_ms: float = 0.0


class DraftRequest(WireModel):
    task: TaskText
    kind: TaskKind = TaskKind.text
    entry_point: Annotated[str, StringConstraints(max_length=200)] | None = None
    lessons: Annotated[
        list[Annotated[str, StringConstraints(max_length=MAX_REFLECTION_CHARS)]],
        Field(max_length=20),
    ] = []


PointText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_POINT_CHARS)]
BindingPoints = Annotated[
    list[PointText],
    Field(
        max_length=MAX_POINTS,
        description="A human reviewer's instruction for the next version, one point each. "
        "The Actor must apply every point; the Critic must check every point.",
    ),
]


class ReviseRequest(WireModel):
    task: TaskText
    kind: TaskKind = TaskKind.text
    entry_point: Annotated[str, StringConstraints(max_length=200)] | None = None
    previous_output: OutputText
    reflections: Annotated[list[Reflection], Field(min_length=1, max_length=MAX_REFLECTIONS)]
    lessons: Annotated[
        list[Annotated[str, StringConstraints(max_length=MAX_REFLECTION_CHARS)]],
        Field(max_length=20),
    ] = []
    binding_points: BindingPoints = []


class PointAction(StrEnum):
    applied = "applied"
    declined = "declined"


class PointResponse(WireModel):
    """How a revision answered one point (a human point is always ``applied``)."""

    point: str
    action: PointAction
    reason: str = ""
    where: str = ""


class ActorResult(WireModel):
    """The Actor's answer: the text or code itself and what it is unsure about."""

    output: str
    uncertainties: list[str] = []
    responses: list[PointResponse] = []
    usage: Usage
    exchanges: list[ModelExchange] = []


class Verdict(StrEnum):
    pass_ = "pass"
    revise = "revise"
    escalate = "escalate"


class Severity(StrEnum):
    critical = "critical"
    major = "major"
    minor = "minor"


class ErrorClass(StrEnum):
    logic = "logic"
    hallucination = "hallucination"
    environment = "environment"
    none = "none"


class CritiqueIssue(WireModel):
    dimension: str
    severity: Severity
    quote: str | None = Field(
        default=None, description="An exact span of the critiqued output; None if none applies."
    )
    suggestion: str


class Evaluation(WireModel):
    """What an evaluator (tests, schema) found, handed to the Critic as evidence."""

    passed: bool
    summary: Annotated[str, StringConstraints(max_length=MAX_REFLECTION_CHARS)] = ""


class CritiqueRequest(WireModel):
    task: TaskText
    kind: TaskKind = TaskKind.text
    output: OutputText
    round: Annotated[int, Field(ge=1, le=100)] = 1
    evaluation: Evaluation | None = None
    reflections: Annotated[list[Reflection], Field(max_length=MAX_REFLECTIONS)] = []
    binding_points: BindingPoints = []


class BindingCheck(WireModel):
    """Whether the version applies one of a human reviewer's points."""

    point: str
    satisfied: bool
    quote: str | None = Field(
        default=None, description="The span of the output that shows it; None if none does."
    )


class Critique(WireModel):
    """The Critic's structured verdict; the loop decides on ``verdict`` and nothing else.
    A ``pass`` ends a run only when every ``binding_checks`` entry is satisfied."""

    verdict: Verdict
    confidence: Annotated[float, Field(ge=0.0, le=1.0)]
    issues: list[CritiqueIssue] = []
    binding_checks: list[BindingCheck] = []
    reflection: str
    error_class: ErrorClass


class CritiqueResult(Critique):
    usage: Usage
    exchanges: list[ModelExchange] = []


class ServiceInfo(WireModel):
    service: str
    role: str
    version: str
    provider: str | None = None
    models: dict[str, str] = {}
    demo: bool = False
