"""Wire DTOs between the services. Versioned by the ``/v1`` prefix of the routes using them.

Limits are part of the contract: a request beyond them gets a 422 that names the field and
the limit, and a body beyond ``MAX_BODY_BYTES`` gets a 413 before it is parsed.
"""

from __future__ import annotations

import re
import types
import typing
import unicodedata
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

MAX_TASK_CHARS = 20_000
MAX_OUTPUT_CHARS = 100_000
MAX_REFLECTION_CHARS = 8_000
MAX_REFLECTIONS = 50
MAX_BODY_BYTES = 1_048_576
MAX_POINTS = 20
MAX_POINT_CHARS = 2_000
MIN_JUSTIFICATION_CHARS = 120
MAX_ISSUES = 50
MAX_EVIDENCE = 30
MAX_UNCERTAINTIES = 20  # an Actor's uncertainties the Critic is asked to check
MAX_UNCERTAINTY_CHARS = 500
MAX_UNVERIFIED = 10  # failed research queries a revision is told about
MAX_REASON_CHARS = 500
# Bounds of the Critic's reply: sent in its schema (a grammar keeps a local model inside
# them) and what its output-token cap is sized for (``critique_output_tokens``)
MAX_LABEL_CHARS = 200  # a dimension, an error type, an id, where a finding rests
MAX_SPAN_CHARS = 2_000  # a quoted span, a suggestion, a justification, a checked point
MAX_CRITIQUE_TEXT_CHARS = 4_000  # the reflection, a corrected span
MAX_CRITIC_QUERIES = 5

# Control (Cc), format (Cf: RTL overrides, zero-width marks), line/paragraph separators and
# lone surrogates: invisible, or they reorder or split what a person reads.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def printable(value: str) -> str:
    """Refuse a name a person would misread: one holding control or formatting characters."""
    for index, char in enumerate(value):
        category = unicodedata.category(char)
        if category in _UNPRINTABLE:
            raise ValueError(
                f"must be printable: character {index + 1} is U+{ord(char):04X} "
                f"(Unicode category {category}, a control or formatting character)"
            )
    return value


PrintableName = Annotated[
    str, StringConstraints(min_length=1, max_length=200), AfterValidator(printable)
]
TaskText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TASK_CHARS)]
OutputText = Annotated[str, StringConstraints(max_length=MAX_OUTPUT_CHARS)]


def _scalar_kind(annotation: Any) -> Literal["bool", "number", "other"]:
    """``bool`` for a field that holds only a bool, ``number`` for one that holds only numbers.

    ``X | None`` counts as ``X``; ``Annotated`` constraints are looked through. Anything else
    (strings, enums, models, containers, mixed unions) is left to pydantic as it is.
    """
    if typing.get_origin(annotation) is Annotated:
        return _scalar_kind(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = {_scalar_kind(arg) for arg in typing.get_args(annotation) if arg is not type(None)}
        return kinds.pop() if len(kinds) == 1 else "other"
    if annotation is bool:
        return "bool"
    if annotation in (int, float):
        return "number"
    return "other"


_KINDS: dict[tuple[type, str], Literal["bool", "number", "other"]] = {}


class WireModel(BaseModel):
    """Base of every DTO: unknown fields are rejected so typos fail loudly.

    Scalars are strict where lax parsing would hide a mistake: a bool field takes only
    ``true``/``false`` (not ``"off"``, ``1`` or ``"yes"``), a number field does not take a
    bool, and a float is finite (JSON ``NaN``/``Infinity``, which Python's parser accepts,
    are refused). Numbers written as strings still parse, as pydantic does by default.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None or value is None:
            return value
        kind = _KINDS.get((cls, info.field_name))
        if kind is None:
            kind = _KINDS[cls, info.field_name] = _scalar_kind(
                cls.model_fields[info.field_name].annotation
            )
        if kind == "bool" and not isinstance(value, bool):
            raise PydanticCustomError("bool_type", "Input should be true or false")
        if kind == "number" and isinstance(value, bool):
            raise PydanticCustomError("number_type", "Input should be a number, not true or false")
        return value


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
    distill = "distill"


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
    cut_off_calls: int = Field(
        default=0,
        ge=0,
        description="Model calls included here that were cut off in flight (their process "
        "died): counted by their prompt's estimated tokens, as their output is unknowable.",
    )


class ModelExchange(WireModel):
    """One HTTP round trip to a model provider as sent and received (never credentials)."""

    request: dict[str, Any]
    response: dict[str, Any] | None = None
    error: str | None = None
    status: int | None = None
    latency_ms: float = 0.0


ActorKnowledge = Annotated[
    list["KnowledgeNote"],
    Field(
        max_length=10,
        description="Knowledge entries retrieved for this task (reviewers' lessons, rule "
        "anchors, pitfalls), shown to the Actor as guidance. `lessons` (plain texts) still "
        "works for older clients.",
    ),
]


class DraftRequest(WireModel):
    task: TaskText
    kind: TaskKind = TaskKind.text
    entry_point: Annotated[str, StringConstraints(max_length=200)] | None = None
    lessons: Annotated[
        list[Annotated[str, StringConstraints(max_length=MAX_REFLECTION_CHARS)]],
        Field(max_length=20),
    ] = []
    knowledge: ActorKnowledge = []
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = Field(
        default=None,
        description="Sampling temperature of this draft; default: the Actor's configured "
        "draft temperature. Best-of-N runs spread their drafts over several.",
    )


PointText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_POINT_CHARS)]
BindingPoints = Annotated[
    list[PointText],
    Field(
        max_length=MAX_POINTS,
        description="A human reviewer's instruction for the next version, one point each. "
        "The Actor must apply every point; the Critic must check every point.",
    ),
]


IssueId = Annotated[str, StringConstraints(pattern=r"^i[1-9][0-9]{0,2}$")]


class RevisionIssue(WireModel):
    """One issue of the previous critique, numbered for the Actor's point-by-point answer.
    Ids (``i1``, ``i2``, ...) follow the critique's order and are stable within a round."""

    id: IssueId
    severity: Severity
    dimension: str
    quote: str | None = None
    suggestion: str
    error_type: str = "other"
    corrected_text: str | None = None
    hallucination: bool = Field(
        default=False,
        description="The critique classed this as a hallucination: the revision must remove "
        "the quoted claim or name a source that supports it in the answer's `source`.",
    )


class DeclinedIssue(WireModel):
    """A critic issue the Actor declined, with its reason, for the next critique to judge."""

    issue: IssueId
    quote: str | None = None
    suggestion: str
    reason: str


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
    knowledge: ActorKnowledge = []
    binding_points: BindingPoints = []
    issues: Annotated[list[RevisionIssue], Field(max_length=MAX_ISSUES)] = Field(
        default=[],
        description="The previous critique's issues; the Actor answers every one in "
        "`responses` (`applied`, or `declined` with a reason).",
    )
    evidence: Annotated[list[Evidence], Field(max_length=MAX_EVIDENCE)] = Field(
        default=[],
        description="Research evidence for this revision: the Actor cites a source as `[n]` "
        "and lists `[n] URL` references, drawn only from these.",
    )
    unverified: Annotated[list[Unverified], Field(max_length=MAX_UNVERIFIED)] = Field(
        default=[],
        description="Research queries that failed, with the reason: the Actor must not state "
        "their claims as verified fact (it marks them or says they could not be verified).",
    )


class PointAction(StrEnum):
    applied = "applied"
    declined = "declined"


class PointResponse(WireModel):
    """How a revision answered one point: a human reviewer's ``point`` (always ``applied``)
    or a critic ``issue`` by its id (``applied``, or ``declined`` with a reason)."""

    point: str = ""
    issue: str | None = None
    action: PointAction
    reason: str = ""
    where: str = ""
    source: str = Field(
        default="",
        description="For a hallucination issue kept in the output: the source that supports "
        "the claim, as `[n]`, `evidence:[n]` or the URL of the evidence the revision was given, "
        '`knowledge:<id>` of a knowledge entry it received, or `task: "<exact span>"` of the '
        "task (at least 3 words). Checked: every number and name of the claim must appear in "
        "the source; any other source leaves the issue open.",
    )


class ActorResult(WireModel):
    """The Actor's answer: the text or code itself and what it is unsure about."""

    output: str
    uncertainties: list[str] = []
    search_queries: list[str] = Field(
        default=[],
        description="Up to 3 short web search queries (at most 8 words each) that would "
        "check the answer's factual claims; the orchestrator's research step runs them.",
    )
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
    """One problem the Critic found, as a reflection record: what kind of error, the exact
    span, a replacement for that span, and what the finding rests on.

    ``original_text`` and ``quote`` are the same span (``quote`` is the older name and stays
    for clients that read it): either may be sent (``original_text`` wins when both are),
    and both are filled in the result.
    """

    dimension: str = Field(max_length=MAX_LABEL_CHARS)
    severity: Severity
    quote: str | None = Field(
        default=None,
        max_length=MAX_SPAN_CHARS,
        description="An exact span of the critiqued output; None if none applies.",
    )
    suggestion: str = Field(max_length=MAX_SPAN_CHARS)
    error_type: str = Field(
        default="other",
        max_length=MAX_LABEL_CHARS,
        description="One of the profile's error types, or `other` when none of them fits.",
    )
    original_text: str | None = Field(
        default=None,
        max_length=MAX_SPAN_CHARS,
        description="The same exact span as `quote` (the reflection record's name).",
    )
    corrected_text: str | None = Field(
        default=None,
        max_length=MAX_CRITIQUE_TEXT_CHARS,
        description="A suggested replacement for that span; None if none applies.",
    )
    evidence_source: str | None = Field(
        default=None,
        max_length=MAX_LABEL_CHARS,
        description="What the finding rests on: `task`, `evaluation`, `knowledge:<id>`, "
        "`evidence:<ref>` or `output` (the text contradicting itself).",
    )

    @model_validator(mode="after")
    def _same_span(self) -> CritiqueIssue:
        if self.original_text is not None:
            self.quote = self.original_text
        else:
            self.original_text = self.quote
        return self


class Evaluation(WireModel):
    """What an evaluator (tests, schema) found, handed to the Critic as evidence."""

    passed: bool
    summary: Annotated[str, StringConstraints(max_length=MAX_REFLECTION_CHARS)] = ""


class Depth(StrEnum):
    """How deep the Critic looks: ``L1`` consistency (the output against the task and
    itself), ``L2`` evidence (every claim traced to a source), ``L3`` counterfactual (what
    would make the answer wrong, at most two rounds), ``auto`` (by the profile's risk and
    the latency budget)."""

    L1 = "L1"
    L2 = "L2"
    L3 = "L3"
    auto = "auto"


ProfileName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_-]*$")
]


class KnowledgeKind(StrEnum):
    rule_anchor = "rule_anchor"
    logic_pitfall = "logic_pitfall"
    evidence_hierarchy = "evidence_hierarchy"
    lesson = "lesson"


class KnowledgeNote(WireModel):
    """A knowledge entry as the Actor and the Critic receive it, retrieved for this task."""

    id: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    kind: KnowledgeKind
    title: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    body: Annotated[str, StringConstraints(min_length=1, max_length=MAX_REFLECTION_CHARS)]
    weight: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0


class CritiqueRequest(WireModel):
    task: TaskText
    kind: TaskKind = TaskKind.text
    output: OutputText
    round: Annotated[int, Field(ge=1, le=100)] = 1
    evaluation: Evaluation | None = None
    reflections: Annotated[list[Reflection], Field(max_length=MAX_REFLECTIONS)] = []
    binding_points: BindingPoints = []
    profile: ProfileName | None = Field(
        default=None,
        description="The critic profile to judge with (`GET /v1/profiles`); default: the "
        "kind's own (`general` for text, `code` for code).",
    )
    depth: Depth | None = Field(
        default=None, description="How deep to look; default: the profile's default depth."
    )
    knowledge: Annotated[list[KnowledgeNote], Field(max_length=10)] = Field(
        default=[],
        description="Knowledge entries retrieved for this task; cite them as `knowledge:<id>`.",
    )
    declined: Annotated[list[DeclinedIssue], Field(max_length=MAX_ISSUES)] = Field(
        default=[],
        description="Issues of the previous critique the Actor declined, with its reasons; "
        "the Critic accepts a refusal in `accepted_refusals` or raises the issue again.",
    )
    latency_budget_s: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        default=None,
        description="How long the caller can wait; `auto` picks the deepest depth whose "
        "budget fits.",
    )
    evidence: Annotated[list[Evidence], Field(max_length=MAX_EVIDENCE)] = Field(
        default=[],
        description="Research evidence, numbered from 1; an issue resting on a source names "
        "it as `evidence:[n]` in `evidence_source`.",
    )
    research: bool = Field(
        default=False,
        description="The caller runs research: list search queries for the claims that "
        "cannot be verified in `queries`.",
    )
    min_pass_confidence: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        default=None,
        description="A `pass` below this confidence is no pass: it gets the repair re-ask, "
        "then counts as `revise` (the caller's low-confidence threshold when no person is "
        "asked); null: any confidence.",
    )
    uncertainties: Annotated[
        list[Annotated[str, StringConstraints(max_length=MAX_UNCERTAINTY_CHARS)]],
        Field(max_length=MAX_UNCERTAINTIES),
    ] = Field(
        default=[],
        description="What the author (the Actor) said it was unsure of in this version; the "
        "Critic checks these claims especially.",
    )


class BindingCheck(WireModel):
    """Whether the version applies one of a human reviewer's points."""

    point: str = Field(max_length=MAX_SPAN_CHARS)
    satisfied: bool
    quote: str | None = Field(
        default=None,
        max_length=MAX_SPAN_CHARS,
        description="The span of the output that shows it; None if none does.",
    )


class Critique(WireModel):
    """The Critic's structured verdict; the loop decides on ``verdict`` and nothing else.
    A ``pass`` ends a run only when every ``binding_checks`` entry is satisfied.

    ``ADVISORY`` names the numbers that inform and do not decide: a model's value out of
    their range is clamped (and noted) rather than re-asked; ``verdict`` decides."""

    ADVISORY: ClassVar[tuple[str, ...]] = ("confidence", "continue_value")

    verdict: Verdict
    confidence: Annotated[float, Field(ge=0.0, le=1.0)]
    issues: Annotated[list[CritiqueIssue], Field(max_length=MAX_ISSUES)] = []
    binding_checks: Annotated[list[BindingCheck], Field(max_length=MAX_POINTS)] = []
    reflection: str = Field(max_length=MAX_CRITIQUE_TEXT_CHARS)
    error_class: ErrorClass
    no_error_found: bool = Field(
        default=False,
        description="True exactly when `issues` is empty: the Critic states it found no error.",
    )
    justification: str = Field(
        default="",
        max_length=MAX_SPAN_CHARS,
        description="With `no_error_found`: why nothing is wrong, at least "
        f"{MIN_JUSTIFICATION_CHARS} characters naming what was checked.",
    )
    accepted_refusals: Annotated[
        list[Annotated[str, Field(max_length=MAX_LABEL_CHARS)]], Field(max_length=MAX_ISSUES)
    ] = Field(
        default=[],
        description="Ids of declined issues (`<declined>`) whose refusal is accepted; a "
        "refusal not accepted is raised again in `issues`. Empty when nothing was declined.",
    )
    continue_value: Annotated[int, Field(ge=0, le=10)] | None = Field(
        default=None,
        description="How much another revision round would improve the output, 0 (nothing) "
        "to 10 (a great deal); null when not judged.",
    )
    queries: Annotated[
        list[Annotated[str, Field(max_length=MAX_LABEL_CHARS)]],
        Field(max_length=MAX_CRITIC_QUERIES),
    ] = Field(
        default=[],
        description="At depth L2 or when research is on: up to 3 search queries (at most 8 "
        "words each) for the claims the Critic could not verify; empty otherwise.",
    )

    @classmethod
    def grammar_schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        """``schema`` (the strict one) with the reflection record as two shapes, for servers
        that enforce the schema with a grammar: issues listed and ``no_error_found`` false,
        or no issue, ``no_error_found`` true and a justification of at least
        ``MIN_JUSTIFICATION_CHARS``. A small model then cannot break the record (on
        SmolLM2-135M it did so even after the repair re-ask); a strict mode that takes only
        an object at the root never receives it."""
        shape = {k: v for k, v in schema.items() if k != "$defs"}
        props = schema["properties"]
        found = {
            **shape,
            "properties": {
                **props,
                "issues": {**props["issues"], "minItems": 1},
                "no_error_found": {**props["no_error_found"], "const": False},
            },
        }
        clean = {
            **shape,
            "properties": {
                **props,
                "issues": {**props["issues"], "maxItems": 0},
                "no_error_found": {**props["no_error_found"], "const": True},
                "justification": {
                    **props["justification"],
                    "minLength": MIN_JUSTIFICATION_CHARS,
                },
            },
        }
        return {
            "type": "object",
            "anyOf": [found, clean],
            **({"$defs": schema["$defs"]} if "$defs" in schema else {}),
        }

    def record_problems(self) -> list[str]:
        """What breaks the reflection record: a critique without issues must say so and
        justify it; one with issues must not claim it found none."""
        if self.issues and self.no_error_found:
            return ["`no_error_found` is true but `issues` lists problems: set it to false"]
        if not self.issues and not self.no_error_found:
            return [
                "`issues` is empty: set `no_error_found` to true and justify it, or list the issues"
            ]
        if self.no_error_found and len(self.justification.strip()) < MIN_JUSTIFICATION_CHARS:
            return [
                f"`justification` has {len(self.justification.strip())} characters; a "
                f"critique with no issue needs at least {MIN_JUSTIFICATION_CHARS}, naming what "
                "was checked and why it holds"
            ]
        return []


class CritiqueResult(Critique):
    usage: Usage
    exchanges: list[ModelExchange] = []
    profile: str = Field(default="", description="The profile the Critic judged with.")
    risk: str = Field(default="", description="The profile's risk level: low, medium or high.")
    depth: str = Field(default="", description="The depth that produced this critique.")
    requested_depth: str = Field(default="", description="The depth asked for (or `auto`).")
    degraded: bool = Field(
        default=False,
        description="The requested depth timed out or failed once; this is an L1 critique.",
    )
    degraded_reason: str | None = None
    rounds: int = Field(default=1, description="Model rounds behind this critique (L3: up to 2).")
    clamped: list[str] = Field(
        default=[],
        description="Advisory values the model gave out of range, clamped rather than re-asked "
        "(`confidence 95 clamped to 1.0`); empty when none was.",
    )
    knowledge_used: list[str] = Field(
        default=[], description="The ids of the knowledge entries this critique received."
    )
    dimensions: list[str] = Field(
        default=[],
        description="The profile's dimensions: an issue on any other is off-profile.",
    )
    refused_pass: list[str] = Field(
        default=[],
        description="Why the model's `pass` was no pass (a major or critical issue listed, "
        "an off-profile issue, a confidence under `min_pass_confidence`), even after the "
        "repair re-ask: the verdict was turned into `revise`. Empty otherwise.",
    )


ModelMode = Literal["demo", "local", "providers"]
MODEL_MODES: tuple[ModelMode, ...] = ("demo", "local", "providers")


class ServiceInfo(WireModel):
    service: str
    role: str
    version: str
    provider: str | None = None
    models: dict[str, str] = {}
    demo: bool = False
    model_mode: ModelMode | None = Field(
        default=None,
        description="The orchestrator's: what answers the platform's model calls (demo: the "
        "scripted fake model; local: a small model on this machine; providers: real provider "
        "APIs). Not set by the other services.",
    )


# ------------------------------------------------------------------ research (seed 001)

MAX_RESEARCH_QUERIES = 10
MAX_QUERY_CHARS = 500
_QUERY_SPACE = re.compile(r"\s+")
_QUERY_EDGE = " \t\n\"'`.,;:!?()[]{}"


def normalise_query(query: str) -> str:
    """A search query's duplicate and cache key: case-folded, white space collapsed, quotes
    and punctuation at its ends dropped (the Research service's gate and cache, and the
    orchestrator's choice of what to search, agree on it)."""
    return _QUERY_SPACE.sub(" ", query).strip(_QUERY_EDGE).casefold()


class TimeSensitivity(StrEnum):
    """How fast the facts behind a query go stale; it sets the research cache's lifetime."""

    high = "high"
    normal = "normal"
    static = "static"


class ResearchStatus(StrEnum):
    ok = "ok"
    degraded = "degraded"  # a backend failed or ran over its time budget for some query


class ResearchRequest(WireModel):
    """Search queries for the claims of ``task`` that need evidence. The service's quality
    gate drops empty, duplicate and over-long queries and caps their number; each dropped
    query comes back in ``failed_queries`` with its reason."""

    task: TaskText
    queries: Annotated[
        list[Annotated[str, StringConstraints(max_length=MAX_QUERY_CHARS)]],
        Field(min_length=1, max_length=MAX_RESEARCH_QUERIES),
    ]
    time_sensitivity: TimeSensitivity = Field(
        default=TimeSensitivity.normal,
        description="How long the results are cached. A query about a moving figure (a "
        "price, a rate, a stock, a score, today, now, current, latest, this week/month/year) "
        "is always cached as `high`; this sets the others.",
    )


class Evidence(WireModel):
    """One source, numbered ``n`` from 1: what a revision cites as ``[n]`` with ``url``."""

    n: Annotated[int, Field(ge=1)]
    url: str
    title: str = ""
    snippet: str = ""
    distilled: str | None = Field(
        default=None,
        description="The claims of the hit relevant to its query, condensed by a model "
        "(None when distillation is off or failed).",
    )
    retrieved_at: datetime
    source: str = Field(description="The backend that found it: corpus, tavily, brave, searxng.")
    query: str = Field(default="", description="The query that found it.")
    span: tuple[int, int] | None = Field(
        default=None,
        description="Character offsets [start, end) of the snippet in the document's text "
        "(local corpus only).",
    )


class FailedQuery(WireModel):
    query: str
    reason: str


class Unverified(WireModel):
    """A claim research could not check: the query that failed and why."""

    query: Annotated[str, StringConstraints(max_length=MAX_QUERY_CHARS)]
    reason: Annotated[str, StringConstraints(max_length=MAX_REASON_CHARS)]


class ResearchResult(WireModel):
    status: ResearchStatus
    evidence: list[Evidence] = []
    failed_queries: list[FailedQuery] = []


DraftRequest.model_rebuild()
ReviseRequest.model_rebuild()
CritiqueRequest.model_rebuild()
