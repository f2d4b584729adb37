"""Wire DTOs of the Orchestrator's public API (runs, events, tokens), shared with the CLI and UI."""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    Field,
    SecretStr,
    StrictBool,
    StringConstraints,
    field_validator,
    model_validator,
)

from shared.contracts import (
    MAX_OUTPUT_CHARS,
    MAX_POINT_CHARS,
    MAX_POINTS,
    Depth,
    PrintableName,
    ProfileName,
    TaskKind,
    TaskText,
    WireModel,
)


class RunStatus(StrEnum):
    queued = "queued"
    drafting = "drafting"
    evaluating = "evaluating"
    awaiting_review = "awaiting_review"
    critiquing = "critiquing"
    revising = "revising"
    succeeded = "succeeded"
    escalated = "escalated"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset(
    {RunStatus.succeeded, RunStatus.escalated, RunStatus.failed, RunStatus.cancelled}
)


class StopReason(StrEnum):
    critic_pass = "critic_pass"
    evaluator_pass = "evaluator_pass"
    max_rounds = "max_rounds"
    duplicate_output = "duplicate_output"
    converged = "converged"
    output_shrank = "output_shrank"
    repeated_critique = "repeated_critique"
    budget_exceeded = "budget_exceeded"
    critic_escalated = "critic_escalated"
    environment = "environment"
    invalid_model_output = "invalid_model_output"
    cancelled = "cancelled"
    review_rejected = "review_rejected"
    review_approved = "review_approved"
    review_expired = "review_expired"
    human_point_unmet = "human_point_unmet"
    internal_error = "internal_error"
    degraded_critique = "degraded_critique"


class EvaluatorKind(StrEnum):
    python_tests = "python_tests"
    json_schema = "json_schema"
    none = "none"


class ReviewMode(StrEnum):
    never = "never"
    before_critique = "before_critique"
    first_round = "first_round"
    on_low_confidence = "on_low_confidence"
    on_escalation = "on_escalation"


class ExpiryAction(StrEnum):
    continue_ = "continue"
    escalate = "escalate"


class ShippedBy(StrEnum):
    """Which gate let a succeeded run's version out: a Critic ``pass`` on that version
    (``critic``), that and its evaluator (``evaluator+critic``), or a person who approved or
    edited that exact version (``person``)."""

    critic = "critic"
    evaluator_critic = "evaluator+critic"
    person = "person"


class Role(StrEnum):
    service = "service"
    reviewer = "reviewer"
    admin = "admin"


class Policy(WireModel):
    """How a run stops. Every field has a server default; a run may override any."""

    max_rounds: Annotated[int, Field(ge=1, le=20)] = 3
    stop_on_evaluator_pass: bool = Field(
        default=False,
        description="Stop revising at the first version that passes its evaluator: it still "
        "gets its critique, and ends the run `succeeded`/`evaluator_pass` when the Critic "
        "passes it; otherwise the usual rules go on.",
    )
    convergence_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        default=0.02,
        description="A revision that changes less than this share (0 = off) is the last one "
        "when its check passes: it is evaluated and critiqued like any version and ends the "
        "run `succeeded`/`converged` on a Critic pass; a version that fails its check revises "
        "again or escalates by the usual rules.",
    )
    min_continue_value: Annotated[int, Field(ge=0, le=10)] = Field(
        default=0,
        description="Stop revising when the critic values another round below this (0-10) "
        "and raises no major or critical issue (0 = off): the critic did not pass the "
        "version, so the run escalates `converged` and a person decides.",
    )
    shrink_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        default=0.30,
        description="Roll back and re-ask once when a revision shrinks by more than this "
        "(0 = off).",
    )
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_cost_usd: Annotated[float, Field(ge=0.0)] | None = None
    review: ReviewMode = ReviewMode.never
    review_confidence_threshold: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        default=0.6,
        description="The low-confidence threshold. Under `on_low_confidence` a critique below "
        "it pauses for a person; otherwise a Critic `pass` below it is no pass (it counts as "
        "`revise`).",
    )
    review_deadline_s: Annotated[int, Field(ge=1, le=30 * 86400)] = Field(
        default=86400, description="How long a paused run waits for a person."
    )
    review_on_expiry: ExpiryAction = Field(
        default=ExpiryAction.continue_,
        description="When the deadline passes: continue with the AI critic, or escalate.",
    )
    profile: ProfileName | None = Field(
        default=None,
        description="The critic profile (the Critic's `GET /v1/profiles`); default: the "
        "task kind's own (`general` for text, `code` for code).",
    )
    depth: Depth | None = Field(
        default=None,
        description="The Critic's depth: L1, L2, L3 or auto; default: the profile's own.",
    )
    diff_lock: bool = Field(
        default=True,
        description="Revert the parts of a revision nobody asked for: outside the lines the "
        "critique quoted or the Actor named, code no kept change depends on (a definition or "
        "import a kept change uses stays), text only when the change is cosmetic (white "
        "space, punctuation, case, word order, a swap of a few words; a changed number, date "
        "or name, or added content, stays). A locked version that no longer parses or fails "
        "tests the revision passes is not shipped. False: keep the revision as the Actor "
        "wrote it; locked regions are kept either way.",
    )
    over_correction_guard: bool = Field(
        default=True,
        description="Roll back and re-ask once a revision that fails an evaluation the "
        "previous version passed, or reopens an issue the previous critique had closed; a "
        "second time keep the better version.",
    )
    drafts: Annotated[int, Field(ge=1, le=5)] = Field(
        default=1,
        description="Best of N: round 1 asks for this many drafts in parallel at spread "
        "temperatures, evaluates and critiques each, and keeps the best (1 = one draft).",
    )
    section_chars: Annotated[int, Field(ge=0, le=MAX_OUTPUT_CHARS)] = Field(
        default=16_000,
        description="Outputs longer than this are critiqued section by section (headings "
        "for text, top-level def/class for code) and only flagged sections are revised "
        "(0 = off).",
    )
    research: StrictBool | None = Field(
        default=None,
        description="Research before each critique: search queries from the previous "
        "critique, the draft, its [UNCERTAIN: ...] markers and its uncertainties go to the "
        "Research service, and the evidence to the Critic and the next revision. null: on "
        "when the critique's depth is L2 or L3 and the orchestrator has a research service "
        "(ORCHESTRATOR_RESEARCH_URL); that depth is `depth` when set, else the profile's "
        "default (legal L2, medical L3), `auto` by the profile's risk (high L3, medium L2, "
        "low L1), resolved once when the run is created (the Critic's profile list "
        "unavailable then: on only when `depth` is L2). true: on at any depth; false: off.",
    )
    require_citations: StrictBool = Field(
        default=False,
        description="With research evidence, a revision's new factual sentences must each "
        "cite a source `[n]`; an uncited one fails the citation check like a bad reference.",
    )
    latency_budget_s: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        default=None,
        description="How long each critique may take, in seconds (0 < s <= 3600): with "
        "`depth` auto the Critic steps down to the deepest depth whose own budget fits.",
    )


MAX_URL_CHARS = 2000


def http_url(value: str) -> str:
    """An absolute http(s) URL with a host and no credentials (they would be shown)."""
    try:
        parts = urlsplit(value)
        port = parts.port  # raises on a malformed port
    except ValueError as exc:
        raise ValueError(f"not a valid URL: {exc}") from None
    if not value.isascii() or not value.isprintable():
        raise ValueError("must be printable ASCII (percent-encode other characters)")
    if parts.scheme not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError("must name a host, as in https://example.com/hooks")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials (user:password@); the signature authenticates")
    if port == 0 or " " in value:
        raise ValueError("not a valid URL")
    return value


HttpUrlText = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_URL_CHARS), AfterValidator(http_url)
]


MAX_LOCKED = 20
MAX_LOCKED_CHARS = 20_000
# The provenance of a round holding the caller's own first version (``given_output``).
GIVEN_PROVENANCE = "given"


def _says_something(value: str) -> str:
    if not value.strip():
        raise ValueError("is blank: give the text a person should review")
    if "\x00" in value:
        raise ValueError("must not contain NUL characters (U+0000)")
    return value


GivenText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_OUTPUT_CHARS),
    AfterValidator(_says_something),
]


class RunCreate(WireModel):
    task: TaskText
    kind: TaskKind = TaskKind.text
    tests: Annotated[str, StringConstraints(max_length=MAX_OUTPUT_CHARS)] | None = None
    entry_point: (
        Annotated[str, StringConstraints(max_length=200, pattern=r"^[A-Za-z_]\w*$")] | None
    ) = None
    evaluator: EvaluatorKind | None = Field(
        default=None,
        description="Default: python_tests when a code task has tests, json_schema when a schema "
        "is given, else none.",
    )
    json_schema: dict[str, Any] | None = None
    policy: Policy = Field(default_factory=Policy)
    tags: Annotated[
        list[Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,49}$")]],
        Field(max_length=10),
    ] = Field(default_factory=list, description="Lessons scoped to these tags apply.")
    locked: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=MAX_LOCKED_CHARS)]],
        Field(max_length=MAX_LOCKED),
    ] = Field(
        default_factory=list,
        description="Exact texts of the task that no revision may change (each must occur "
        "in the task); a revision's changes to them are reverted.",
    )
    given_output: GivenText | None = Field(
        default=None,
        description="A first version you wrote (or got elsewhere): the Actor drafts nothing. "
        "Round 1 holds this text (provenance `given`) and goes to a person (a `pre_critique` "
        "review item, after the run's evaluator when it has one) who approves it (it ships), "
        "edits it, rejects it, or comments (the Actor revises by the points and the loop goes "
        "on). It never ships without a person's approval, whatever the Critic says.",
    )
    critic_first: StrictBool = Field(
        default=False,
        description="With `given_output`: the Critic critiques the given version first and the "
        "person decides with its critique in hand (a `pre_critique` item, or an `escalation` "
        "when the Critic passed it or asked for a person).",
    )
    callback_url: HttpUrlText | None = Field(
        default=None,
        description="Where this run's run.finished, run.escalated, review.created and "
        "review.decided are POSTed as signed webhooks (the platform secret "
        "ORCHESTRATOR_WEBHOOK_SECRET signs them; it must be configured). https, resolving to "
        "public addresses only: loopback, private, link-local, CGNAT and metadata targets, "
        "and plain http, are refused unless the host is in ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS.",
    )

    @model_validator(mode="after")
    def _evaluator_fits(self) -> RunCreate:
        if self.evaluator is None:
            if self.kind is TaskKind.code and self.tests:
                self.evaluator = EvaluatorKind.python_tests
            elif self.json_schema is not None:
                self.evaluator = EvaluatorKind.json_schema
            else:
                self.evaluator = EvaluatorKind.none
        if self.evaluator is EvaluatorKind.python_tests and not (
            self.kind is TaskKind.code and self.tests
        ):
            raise ValueError("the python_tests evaluator needs kind 'code' and non-empty tests")
        if self.evaluator is EvaluatorKind.json_schema and self.json_schema is None:
            raise ValueError("the json_schema evaluator needs a json_schema")
        if self.critic_first and self.given_output is None:
            raise ValueError("critic_first applies to a given_output: pass the text too")
        if self.given_output is not None and self.policy.drafts > 1:
            raise ValueError(
                "policy.drafts asks the Actor for several first drafts; a run with a "
                "given_output has its first version already: leave drafts at 1"
            )
        for index, text in enumerate(self.locked):
            if not text.strip():
                raise ValueError(f"locked[{index}] is blank: lock a text that says something")
            if text not in self.task:
                raise ValueError(
                    f"locked[{index}] does not occur in the task: a locked region is an exact "
                    "text of the task (whitespace and case included)"
                )
        return self


class RunCreated(WireModel):
    id: str
    status: RunStatus


class RoundPublic(WireModel):
    number: int
    output: str
    output_hash: str
    uncertainties: list[str] = []
    evaluation: dict[str, Any] | None = None
    critique: dict[str, Any] | None = None
    review: dict[str, Any] | None = None
    rolled_back: list[dict[str, Any]] = []
    adoption: float | None = None
    usage: dict[str, Any] = {}
    provenance: str = Field(
        default="actor",
        description="`actor`, `human` for a version a reviewer edited, or `given` for the "
        "first version the run's creator gave (`given_output`).",
    )
    responses: list[dict[str, Any]] = Field(
        default=[], description="How the Actor answered each of a reviewer's points."
    )
    actor_knowledge: list[str] = Field(
        default=[],
        description="The ids of the knowledge entries this round's Actor call received "
        "(the Critic's are in `critique.knowledge_used`).",
    )
    reverted_hunks: list[dict[str, Any]] = Field(
        default=[],
        description="Parts of the Actor's revision the diff lock reverted: line, before, "
        "after, reason (`locked`, `outside_flagged`, or for text `cosmetic_whitespace`, "
        "`cosmetic_punctuation`, `cosmetic_case`, `cosmetic_reorder`, `cosmetic_wording`), "
        "rule (the reason in a sentence), truncated; and `overridden` ({reason: `unparsable` "
        "or `failed_tests`, detail}) when the locked version broke and the revert was undone.",
    )
    unlocked_output: str | None = Field(
        default=None,
        description="The revision as the Actor wrote it, when the diff lock changed it "
        "(`output` is the version that went on).",
    )
    over_correction: dict[str, Any] | None = Field(
        default=None,
        description="Set when the over-correction guard rolled this round's revision back: "
        "reason, rollbacks (1: the re-asked revision was kept; 2: it broke again), kept "
        "(`retry`, or `previous` / `current` after the second time).",
    )
    drafts: list[dict[str, Any]] = Field(
        default=[],
        description="Round 1 of a best-of-N run: every draft with its temperature, "
        "evaluation, verdict, issues by severity, cost, and which one was chosen.",
    )
    sections: list[dict[str, Any]] = Field(
        default=[],
        description="A long version critiqued in sections: each section's index, title, "
        "size, whether the Critic flagged it and whether the next round revised it.",
    )
    search_queries: list[str] = Field(
        default=[],
        description="The search queries the Actor gave with this version.",
    )
    research: dict[str, Any] | None = Field(
        default=None,
        description="The research step before this round's critique: status (`ok` or "
        "`degraded`), queries, evidence (numbered sources) and failed_queries ({query, "
        "reason}); null when research was off for the round.",
    )
    citations: dict[str, Any] | None = Field(
        default=None,
        description="The citation check of this revision against the previous round's "
        "evidence: ok, cited (the numbers), problems ({kind, message, number, url, "
        "sentence}); null when that round had no evidence.",
    )
    unsourced: list[dict[str, Any]] = Field(
        default=[],
        description="Claims the previous critique flagged as hallucinations that this revision "
        "kept without a supporting source ({issue, quote, reason}): they hold back a pass.",
    )


class ReflectionPublic(WireModel):
    round: int
    source: str
    author: str
    content: str
    created_at: datetime


class RunPublic(WireModel):
    id: str
    status: RunStatus
    kind: TaskKind
    task: str
    evaluator: EvaluatorKind
    policy: Policy
    stop_reason: StopReason | None = None
    error_class: str | None = None
    detail: str | None = None
    final_output: str | None = None
    final_round: int | None = None
    shipped_by: ShippedBy | None = Field(
        default=None,
        description="Which gate let the final version out (succeeded runs only): `critic`, "
        "`evaluator+critic` or `person`.",
    )
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    models: dict[str, Any] = {}
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None
    rounds: list[RoundPublic] = []
    reflections: list[ReflectionPublic] = []
    tags: list[str] = []
    lessons_used: list[str] = Field(
        default=[], description="The lessons (knowledge entries of kind `lesson`) it received."
    )
    actor_knowledge: list[str] = Field(
        default=[],
        description="The knowledge entries every Actor call of this run receives, chosen "
        "once at the draft.",
    )
    binding_points: list[str] = Field(
        default=[], description="A reviewer's points the next version must still apply."
    )
    human_rounds: int = Field(
        default=0, description="Rounds a person started (they do not count against max_rounds)."
    )
    locked: list[str] = Field(default=[], description="Texts no revision may change.")


class RunSummary(WireModel):
    id: str
    status: RunStatus
    kind: TaskKind
    task: str
    stop_reason: StopReason | None = None
    rounds: int
    created_at: datetime
    updated_at: datetime


class RunPage(WireModel):
    items: list[RunSummary]
    next_cursor: str | None = None


class TrajectoryCall(WireModel):
    round: int
    role: str
    stage: str
    usage: dict[str, Any] | None = None
    exchanges: list[dict[str, Any]] = []
    latency_ms: float
    created_at: datetime


class Trajectory(WireModel):
    run_id: str
    task: str
    calls: list[TrajectoryCall]


class EventPublic(WireModel):
    seq: int
    run_id: str | None
    type: str
    data: dict[str, Any]
    created_at: datetime


class TokenCreate(WireModel):
    name: PrintableName
    role: Role


class TokenCreated(WireModel):
    id: str
    name: str
    role: Role
    token: str = Field(description="Shown once; only its hash is stored.")


class JudgementVerdict(StrEnum):
    agree = "agree"
    dismiss = "dismiss"


class CriticJudgement(WireModel):
    """A reviewer's word on one issue of the Critic: right (agree) or not (dismiss)."""

    issue: Annotated[int, Field(ge=0, le=1000)] = Field(
        description="The issue's index (from 0) in the critique of the item's round (the "
        "previous round's when that one is not critiqued yet)."
    )
    verdict: JudgementVerdict
    reason: Annotated[str, StringConstraints(strip_whitespace=True, max_length=300)] | None = Field(
        default=None, description="Why (required to dismiss), at most 300 characters."
    )

    @model_validator(mode="after")
    def _dismiss_says_why(self) -> CriticJudgement:
        if self.verdict is JudgementVerdict.dismiss and not self.reason:
            raise ValueError(f"dismissing issue {self.issue} needs a short reason")
        return self


def _one_per_issue(judgements: list[CriticJudgement] | None) -> list[CriticJudgement] | None:
    seen: set[int] = set()
    for judgement in judgements or []:
        if judgement.issue in seen:
            raise ValueError(f"issue {judgement.issue} is judged twice: one judgement per issue")
        seen.add(judgement.issue)
    return judgements


CriticJudgements = Annotated[
    list[CriticJudgement], Field(max_length=100), AfterValidator(_one_per_issue)
]


class JudgementsRequest(WireModel):
    """Judge the Critic's issues of a claimed item, before (or without) deciding it; a
    judgement on an issue judged before replaces it."""

    judgements: Annotated[CriticJudgements, Field(min_length=1)]


class JudgementPublic(WireModel):
    issue: int
    round: int = Field(description="The round whose critique the issue belongs to.")
    verdict: JudgementVerdict
    reason: str | None = None
    dimension: str
    error_type: str
    author: str = Field(description="The reviewer who judged it.")
    judged_at: datetime


class ExportKind(StrEnum):
    """The record kinds of ``GET /v1/datasets/export``."""

    chat = "chat"  # task -> the version a person approved or edited
    preference = "preference"  # prompt, chosen (approved / edited), rejected (pre-edit, ...)
    critique = "critique"  # output, the Critic's issues, the reviewer's agree / dismiss


class ReviewKind(StrEnum):
    pre_critique = "pre_critique"
    escalation = "escalation"


class ReviewStatus(StrEnum):
    pending = "pending"
    claimed = "claimed"
    resolved = "resolved"
    expired = "expired"


class ReviewSummary(WireModel):
    id: str
    run_id: str
    round: int
    kind: ReviewKind
    status: ReviewStatus
    reason: str | None = None
    task: str
    claimed_by: str | None = Field(default=None, description="The claiming token's id.")
    claimed_by_name: str | None = Field(
        default=None, description="Who claimed it: the reviewer's username or the token's name."
    )
    lease_expires_at: datetime | None = None
    deadline: datetime | None = None
    on_expiry: str | None = Field(
        default=None, description="What happens at the deadline: continue or escalate."
    )
    confidence: float | None = Field(
        default=None,
        description="The Critic's confidence on the item's round, or on the previous round "
        "when this one is not critiqued yet (a review before the critique); None if neither is.",
    )
    created_at: datetime


class ReviewPublic(ReviewSummary):
    context: dict[str, Any]
    decision: dict[str, Any] | None = None
    judgements: list[JudgementPublic] = Field(
        default=[], description="The reviewers' agree / dismiss on the Critic's issues."
    )


class ReviewPage(WireModel):
    items: list[ReviewSummary]
    next_cursor: str | None = None


class ClaimRequest(WireModel):
    lease_s: Annotated[int, Field(ge=1, le=3600)] = Field(
        default=300, description="How long the claim holds; claim again to renew."
    )


class DecisionAction(StrEnum):
    comment = "comment"
    approve = "approve"
    edit = "edit"
    reject = "reject"
    retry = "retry"


class DecisionRequest(WireModel):
    """What a reviewer decided. ``comment`` becomes a binding human reflection."""

    action: DecisionAction
    comment: Annotated[str, StringConstraints(min_length=1, max_length=8000)] | None = None
    points: (
        Annotated[
            list[Annotated[str, StringConstraints(min_length=1, max_length=MAX_POINT_CHARS)]],
            Field(max_length=MAX_POINTS),
        ]
        | None
    ) = Field(
        default=None,
        description="With comment: the comment's points, one instruction each; by default each "
        "non-empty line or bullet of the comment is a point. The next revision must apply "
        "every point and the Critic must find each satisfied before the run can pass.",
    )
    output: Annotated[str, StringConstraints(min_length=1, max_length=MAX_OUTPUT_CHARS)] | None = (
        None
    )
    finish: bool = Field(default=False, description="With edit: accept the edited output as final.")
    rounds: Annotated[int, Field(ge=1, le=10)] = Field(
        default=1, description="With retry: how many more rounds the run may take."
    )
    lesson: bool = Field(
        default=False, description="Also keep the comment as a lesson for similar future tasks."
    )
    lesson_scope: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,49}$")] = Field(
        default="global",
        description="'global' (every run of the reviewed run's owner), or a tag its runs opt "
        "into. A lesson reaches other tenants' runs only if an admin shares it.",
    )

    critic_judgements: CriticJudgements | None = Field(
        default=None,
        description="Agree or dismiss (with a reason) issues of the Critic's critique on "
        "the item's round; stored with the decision, as `POST .../judgements` would.",
    )

    @model_validator(mode="after")
    def _fields_fit_the_action(self) -> DecisionRequest:
        if self.action is DecisionAction.comment and not (self.comment or self.points):
            raise ValueError("a comment decision needs the comment text (or its points)")
        if self.points is not None and self.action is not DecisionAction.comment:
            raise ValueError("only a comment decision takes points")
        if self.action is DecisionAction.comment and not self.comment and self.points:
            self.comment = "\n".join(f"- {point}" for point in self.points)
        if self.action is DecisionAction.reject and not (self.comment or "").strip():
            raise ValueError("a reject decision needs the reason, in comment")
        if self.action is DecisionAction.edit and not self.output:
            raise ValueError("an edit decision needs the edited output")
        if self.output is not None and self.action is not DecisionAction.edit:
            raise ValueError("only an edit decision takes an output")
        if self.lesson and not self.comment:
            raise ValueError("a lesson is made from the comment: give one")
        return self


_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")


def comment_points(comment: str) -> list[str]:
    """The points of a comment: each non-empty line, without its bullet or number."""
    points = [_BULLET.sub("", line).strip() for line in comment.splitlines()]
    return [p[:MAX_POINT_CHARS] for p in points if p][:MAX_POINTS]


class DecisionResult(WireModel):
    review_id: str
    run_id: str
    action: DecisionAction
    run_status: RunStatus


class AccountCreate(WireModel):
    username: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.@-]{2,100}$")]
    password: Annotated[str, StringConstraints(min_length=12, max_length=200)]
    role: Role = Role.reviewer

    @model_validator(mode="after")
    def _people_only(self) -> AccountCreate:
        if self.role is Role.service:
            raise ValueError("accounts are for people: reviewer or admin (services use tokens)")
        return self


class AccountPublic(WireModel):
    id: str
    username: str
    role: Role


class LoginRequest(WireModel):
    username: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    password: Annotated[str, StringConstraints(min_length=1, max_length=200)]


class LoginResult(WireModel):
    token: str = Field(description="A bearer token for this session; shown once.")
    name: str
    role: Role
    expires_at: datetime


class WhoAmI(WireModel):
    """The caller, as the orchestrator knows its token."""

    id: str = Field(description="The token's id (never the token).")
    name: str
    role: Role


class LessonPublic(WireModel):
    id: str
    content: str
    scope: str
    author: str
    source_run_id: str | None
    owner: str | None = Field(
        default=None,
        description="The token whose runs it reaches (the one that started its source run); "
        "null: every tenant's (an admin wrote it). Shown to its owner and to people.",
    )
    shared: bool = Field(
        default=False, description="An admin offered this lesson to every tenant's runs."
    )
    uses: int
    retired: bool
    created_at: datetime


class RoundsBucket(WireModel):
    rounds: int = Field(description="Rounds a finished run took.")
    runs: int = Field(description="How many finished runs took that many rounds.")


class ProviderStats(WireModel):
    """Model calls of one provider in one role (actor or critic)."""

    provider: str
    role: str
    models: list[str] = Field(description="The models this provider served in this role.")
    calls: int
    latency_ms_total: float
    latency_ms_avg: float
    latency_ms_p50: float
    latency_ms_p95: float
    input_tokens: int
    output_tokens: int
    cost_usd: float = Field(description="Sum over the calls that have a price.")
    unpriced_calls: int = Field(description="Calls of a model with no price entry (cost 0).")


class AgreementStats(WireModel):
    """How often a person's decision agreed with the Critic's verdict on the same version."""

    provider: str = Field(description="The Critic's provider.")
    profile: str = Field(description="The critic profile the runs used.")
    decisions: int = Field(description="Decisions on a version the Critic had judged.")
    agreed: int
    overruled: int = Field(
        description="A comment, edit, reject or retry on what the Critic passed, or an "
        "approval of what it wanted revised."
    )
    rate: float = Field(description="agreed / decisions.")


class IssueAgreementStats(WireModel):
    """How often reviewers agreed with the Critic's issues of one error type, per profile."""

    profile: str = Field(description="The critic profile the runs used.")
    error_type: str = Field(description="The issues' error type (`other` when none fits).")
    dimension: str = Field(description="The issues' dimension (accuracy, clarity, ...).")
    judged: int = Field(description="Issues a reviewer agreed with or dismissed.")
    agreed: int
    dismissed: int = Field(description="Issues a reviewer said the Critic got wrong.")
    rate: float = Field(description="agreed / judged.")


ADOPTION_BAND = (0.15, 0.70)
TRIGGER_TARGET = 0.95


class StatsPublic(WireModel):
    """Aggregates of the read model: they survive restarts, unlike the Prometheus counters."""

    since: datetime | None = Field(description="Only runs created at or after this (UTC).")
    generated_at: datetime
    runs_total: int
    runs_by_status: dict[str, int]
    runs_by_stop_reason: dict[str, int] = Field(description="Finished runs only.")
    rounds_per_run: list[RoundsBucket] = Field(description="Finished runs, by rounds taken.")
    adoption_rate: float | None = Field(
        description="Mean share of the critic's previous issues the actor fixed (null: no data)."
    )
    adoption_rounds: int = Field(description="How many rounds the adoption rate is based on.")
    model_calls: int = Field(description="Model calls the provider figures are based on.")
    model_calls_truncated: bool = Field(
        description="True when only the newest calls were counted (see model_calls)."
    )
    providers: list[ProviderStats]
    critic_agreement: list[AgreementStats] = Field(
        default=[], description="Person vs Critic, per critic provider and profile."
    )
    critic_issue_agreement: list[IssueAgreementStats] = Field(
        default=[],
        description="Person vs Critic issue by issue (agree / dismiss), per critic profile, "
        "error type and dimension.",
    )
    versions: int = Field(
        default=0,
        description="Versions that settled: a later round revised them (the Actor's revision "
        "or a person's edit), or a succeeded run shipped them. A version still in flight, or "
        "the last version of a run that ended otherwise (escalated, failed, cancelled), is not "
        "counted.",
    )
    versions_judged: int = Field(
        default=0,
        description="Of those, versions the Critic critiqued or a person decided on (comment, "
        "approve, edit, reject) before they settled.",
    )
    versions_critiqued: int = Field(
        default=0, description="Of those, versions the Critic critiqued."
    )
    trigger_rate: float | None = Field(
        default=None, description="versions_judged / versions (target >= 0.95; null: none)."
    )
    critiques: int = Field(default=0, description="Critiques of runs in the period.")
    critiques_degraded: int = Field(
        default=0, description="Critiques whose depth timed out or failed and fell back to L1."
    )
    degraded_rate: float | None = Field(
        default=None, description="critiques_degraded / critiques (null: no critique)."
    )
    critiques_by_depth: dict[str, int] = Field(
        default={}, description="Critiques by the depth that produced them (L1, L2, L3)."
    )
    adoption_in_band: bool | None = Field(
        default=None,
        description="Whether the adoption rate is inside the healthy band "
        f"[{ADOPTION_BAND[0]}, {ADOPTION_BAND[1]}] (below: the critic is ignored or too "
        "timid; above: drafts are poor or the critic too aggressive).",
    )
    revisions: int = Field(
        default=0, description="Revised rounds the Actor wrote (round 2 on, not a person's edit)."
    )
    over_corrections: int = Field(
        default=0,
        description="Of those, rounds the over-correction guard rolled back at least once.",
    )
    over_correction_rate: float | None = Field(
        default=None, description="over_corrections / revisions (null: no revision)."
    )


class WebhookEvent(StrEnum):
    run_finished = "run.finished"
    run_escalated = "run.escalated"
    review_created = "review.created"
    review_decided = "review.decided"


class DeliveryStatus(StrEnum):
    pending = "pending"
    delivered = "delivered"
    failed = "failed"


MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 256
SECRET_PREFIX = "whsec_"


def webhook_secret_bytes(value: str) -> bytes:
    """The key a webhook secret signs with: ``whsec_<base64>`` decoded, else the UTF-8 bytes.

    Errors never quote the value."""
    if value.startswith(SECRET_PREFIX):
        encoded = value[len(SECRET_PREFIX) :]
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(
                "a secret starting with whsec_ must be followed by standard base64"
            ) from None
    else:
        key = value.encode()
    if len(key) < MIN_SECRET_BYTES:
        raise ValueError(
            f"must be at least {MIN_SECRET_BYTES} bytes (whsec_ secrets: after base64 decoding)"
        )
    if len(key) > MAX_SECRET_BYTES:
        raise ValueError(f"must be at most {MAX_SECRET_BYTES} bytes")
    return key


class WebhookCreate(WireModel):
    url: HttpUrlText = Field(
        description="https, resolving to public addresses only: loopback, private, "
        "link-local, CGNAT and metadata targets, and plain http, are refused unless the host "
        "is in ORCHESTRATOR_WEBHOOK_ALLOW_HOSTS (checked again before each delivery)."
    )
    events: Annotated[list[WebhookEvent], Field(min_length=1, max_length=len(WebhookEvent))] = (
        Field(description="Which events this subscription receives.")
    )
    secret: SecretStr = Field(
        description="The signing secret: `whsec_<base64>` (the Standard Webhooks format; the "
        "decoded bytes sign) or any other string (its UTF-8 bytes sign); at least 24 bytes "
        "either way. Stored encrypted, never shown again."
    )

    @field_validator("secret")
    @classmethod
    def _strong_secret(cls, value: SecretStr) -> SecretStr:
        webhook_secret_bytes(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _unique_events(self) -> WebhookCreate:
        self.events = list(dict.fromkeys(self.events))
        return self


class WebhookPublic(WireModel):
    id: str
    url: str
    events: list[WebhookEvent]
    created_at: datetime


class WebhookList(WireModel):
    items: list[WebhookPublic]


class WebhookDelivery(WireModel):
    """One message to one destination; ``id`` is its ``webhook-id`` (kept across retries)."""

    id: str
    subscription_id: str | None = Field(description="None: the run's own callback_url.")
    run_id: str | None
    url: str
    event_type: WebhookEvent
    status: DeliveryStatus
    attempts: int
    next_attempt_at: datetime | None = Field(description="When a pending delivery is tried next.")
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


class DeliveryPage(WireModel):
    items: list[WebhookDelivery]
    next_cursor: str | None = None


def int_or_none(value: Any) -> int | None:
    """An event field as a whole number, None when it is not one (read defensively)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def retry_wait_words(seconds: Any) -> str:
    """`` in 4 s``, `` in 0.5 s``, `` in 2 min``, `` at once``; empty when unknown."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds != seconds:
        return ""
    if seconds < 0:
        return ""
    if seconds < 0.05:
        return " at once"
    if seconds < 60:
        return f" in {round(seconds, 1):g} s"
    return f" in {int(seconds // 60)} min"


def retry_summary(data: dict[str, Any]) -> str:
    """A ``peer.retry`` event in a few words, as the CLI and the console show it:
    ``critic 504, retry 2/3 in 4 s``; without a status ``critic timed out, ...`` when the
    reason says so, else ``critic did not answer, ...``. Odd fields show as ``?``."""
    peer = str(data.get("peer") or "a peer")
    status = int_or_none(data.get("status"))
    reason = str(data.get("reason") or "").lower()
    if status is not None:
        what = f"{peer} {status}"
    elif "timed out" in reason or "timeout" in reason:
        what = f"{peer} timed out"
    else:
        what = f"{peer} did not answer"
    attempt, attempts = int_or_none(data.get("attempt")), int_or_none(data.get("attempts"))
    retry = f"retry {'?' if attempt is None else attempt}/{'?' if attempts is None else attempts}"
    return f"{what}, {retry}{retry_wait_words(data.get('wait_s'))}"
