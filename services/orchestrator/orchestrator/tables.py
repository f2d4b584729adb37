"""The read model: SQLModel tables the API and the console query.

DBOS keeps its own system tables for durable execution; these tables are what users see.
Table models never cross the service boundary: routers answer with the DTOs in
``*/schemas.py``.
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id(prefix: str) -> str:
    """Sortable, unguessable ids: time in hex, then 10 random bytes."""
    return f"{prefix}_{time.time_ns():016x}{secrets.token_hex(10)}"


class UTCDateTime(sa.types.TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC on the way out, on every database.

    Postgres keeps the offset; SQLite keeps none and would hand back naive values, so the
    API would answer ``2026-01-01T10:00:00`` for one database and ``...+00:00`` for the
    other. Values are stored in UTC and come back tagged as UTC.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


def table_of(model: type[SQLModel]) -> sa.Table:
    """A table model's Core ``Table``, for statements that skip the ORM."""
    return cast(sa.Table, sa.inspect(model).local_table)


def json_column(nullable: bool = True) -> Any:
    return Field(default=None, sa_column=sa.Column(sa.JSON, nullable=nullable))


class Run(SQLModel, table=True):
    __tablename__ = "runs"
    __table_args__ = (sa.UniqueConstraint("created_by", "idempotency_key"),)

    seq: int | None = Field(default=None, primary_key=True)
    id: str = Field(unique=True, index=True, max_length=64)
    status: str = Field(index=True, max_length=32)
    kind: str = Field(max_length=16)
    task: str
    tests: str | None = None
    entry_point: str | None = Field(default=None, max_length=200)
    evaluator: str = Field(max_length=32)
    json_schema: dict[str, Any] | None = json_column()
    policy: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    idempotency_key: str | None = Field(default=None, max_length=200)
    request_hash: str | None = Field(default=None, max_length=64)
    created_by: str = Field(max_length=64)
    stop_reason: str | None = Field(default=None, max_length=64)
    error_class: str | None = Field(default=None, max_length=32)
    detail: str | None = None
    final_output: str | None = None
    final_round: int | None = None
    # which gate let the final version out: critic, evaluator+critic or person (succeeded only)
    shipped_by: str | None = Field(default=None, max_length=32)
    rounds: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cancel_requested: bool = False
    actor_info: dict[str, Any] | None = json_column()
    critic_info: dict[str, Any] | None = json_column()
    lessons_used: list[str] | None = json_column()
    # The knowledge entries the Actor receives on every call of this run: chosen once, at the
    # draft (before the call), so a replayed step and every revision get the same ones.
    actor_knowledge: list[str] | None = json_column()
    # What the Actor's and the Critic's calls of this run receive of those entries, content
    # included, kept from the first call: a step re-run after a crash sends its peer the same
    # request (the peer replays its answer only then), whatever was edited meanwhile.
    actor_notes: list[dict[str, Any]] | None = json_column()
    critic_notes: list[dict[str, Any]] | None = json_column()
    tags: list[str] | None = json_column()
    # A reviewer's open points: every revision must apply them until the Critic finds all
    # satisfied; ``binding_attempts`` counts the revisions that missed one.
    binding_points: list[str] | None = json_column()
    binding_attempts: int = 0
    human_rounds: int = 0  # rounds a person started: they do not count against max_rounds
    callback_url: str | None = Field(default=None, max_length=2000)  # this run's webhooks
    locked: list[str] | None = json_column()  # texts of the task no revision may change
    # The depth its critiques default to, resolved once at creation from the Critic's
    # profiles (policy.research null: research when L2 or L3); null: not resolved.
    critique_depth: str | None = Field(default=None, max_length=8)
    # The W3C traceparent of the request that created it (tracing on): every segment of its
    # workflow, wherever it runs or is recovered, puts its step spans in that trace.
    traceparent: str | None = Field(default=None, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    finished_at: datetime | None = Field(default=None, sa_type=UTCDateTime())


class Round(SQLModel, table=True):
    __tablename__ = "rounds"
    __table_args__ = (sa.UniqueConstraint("run_id", "number"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True, max_length=64)
    number: int
    output: str
    output_hash: str = Field(max_length=64)
    uncertainties: list[str] | None = json_column()
    actor_usage: dict[str, Any] | None = json_column()
    rolled_back: list[dict[str, Any]] | None = json_column()
    evaluation: dict[str, Any] | None = json_column()
    critique: dict[str, Any] | None = json_column()
    critic_usage: dict[str, Any] | None = json_column()
    review: dict[str, Any] | None = json_column()
    adoption: float | None = None
    provenance: str = Field(default="actor", max_length=16)  # "human": a reviewer's edit
    responses: list[dict[str, Any]] | None = json_column()  # the Actor's answer to each point
    actor_knowledge: list[str] | None = json_column()  # the entries the Actor's call received
    reverted_hunks: list[dict[str, Any]] | None = json_column()  # what the diff lock undid
    unlocked_output: str | None = None  # the revision as the Actor wrote it, when locked
    over_correction: dict[str, Any] | None = json_column()  # a revision that broke twice
    drafts: list[dict[str, Any]] | None = json_column()  # round 1 of best-of-N: every draft
    sections: list[dict[str, Any]] | None = json_column()  # a long version's sections
    search_queries: list[str] | None = json_column()  # the Actor's queries for this version
    research: dict[str, Any] | None = json_column()  # the research step before the critique
    citations: dict[str, Any] | None = json_column()  # this revision's citation check
    # claims flagged as hallucinations this revision kept without a supporting source
    unsourced: list[dict[str, Any]] | None = json_column()
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())


class Reflection(SQLModel, table=True):
    __tablename__ = "reflections"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True, max_length=64)
    round: int
    source: str = Field(max_length=16)
    author: str = Field(default="", max_length=200)
    content: str
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())


class ModelCall(SQLModel, table=True):
    """Every request and response of a model-facing call, for replay and audit."""

    __tablename__ = "model_calls"

    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="runs.id", index=True, max_length=64)
    call_key: str = Field(unique=True, max_length=200)
    round: int
    role: str = Field(max_length=16)
    stage: str = Field(max_length=16)
    usage: dict[str, Any] | None = json_column()
    exchanges: list[dict[str, Any]] | None = json_column()
    latency_ms: float = 0.0
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())


class Event(SQLModel, table=True):
    __tablename__ = "events"

    seq: int | None = Field(default=None, primary_key=True)
    run_id: str | None = Field(default=None, index=True, max_length=64)
    type: str = Field(max_length=64)
    data: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())


class ApiToken(SQLModel, table=True):
    __tablename__ = "api_tokens"

    id: str = Field(primary_key=True, max_length=64)
    name: str = Field(max_length=200)
    role: str = Field(max_length=16)
    token_hash: str = Field(unique=True, max_length=64)
    created_by: str | None = Field(default=None, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    revoked_at: datetime | None = Field(default=None, sa_type=UTCDateTime())
    expires_at: datetime | None = Field(default=None, sa_type=UTCDateTime())


class Account(SQLModel, table=True):
    """A person who logs in to the console; the password is stored as an argon2 hash."""

    __tablename__ = "accounts"

    id: str = Field(primary_key=True, max_length=64)
    username: str = Field(unique=True, index=True, max_length=100)
    password_hash: str = Field(max_length=200)
    role: str = Field(max_length=16)
    disabled: bool = False
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())


class ReviewItem(SQLModel, table=True):
    """Work for a person: a paused run (``pre_critique``) or an escalated one."""

    __tablename__ = "review_items"

    seq: int | None = Field(default=None, primary_key=True)
    id: str = Field(unique=True, index=True, max_length=64)
    run_id: str = Field(foreign_key="runs.id", index=True, max_length=64)
    round: int
    kind: str = Field(max_length=32)
    status: str = Field(index=True, max_length=16)
    reason: str | None = Field(default=None, max_length=64)
    context: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    deadline: datetime | None = Field(default=None, sa_type=UTCDateTime())
    on_expiry: str | None = Field(default=None, max_length=16)
    claimed_by: str | None = Field(default=None, max_length=200)
    claimed_by_name: str | None = Field(default=None, max_length=200)
    lease_expires_at: datetime | None = Field(default=None, sa_type=UTCDateTime())
    decision: dict[str, Any] | None = json_column()
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    resolved_at: datetime | None = Field(default=None, sa_type=UTCDateTime())


class Replica(SQLModel, table=True):
    """One orchestrator process sharing the database (Postgres), kept fresh by its heartbeat.

    The leader recovers the durable work of a replica whose heartbeat stopped; the rows are
    what ``GET /v1/cluster`` lists. Times are the database's clock, so replicas on machines
    with skewed clocks still agree on who is stale.
    """

    __tablename__ = "replicas"

    executor_id: str = Field(primary_key=True, max_length=100)
    hostname: str = Field(default="", max_length=255)
    address: str = Field(default="", max_length=300)
    pid: int = 0
    leader: bool = False
    started_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    heartbeat_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    stopped_at: datetime | None = Field(default=None, sa_type=UTCDateTime())
    recovered_at: datetime | None = Field(default=None, sa_type=UTCDateTime())
    recovered_workflows: int = 0


class WebhookSubscription(SQLModel, table=True):
    """An admin's subscription: these events, POSTed to this URL, signed with its secret."""

    __tablename__ = "webhook_subscriptions"

    id: str = Field(primary_key=True, max_length=64)
    url: str = Field(max_length=2000)
    events: list[str] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    secret_encrypted: str  # Fernet token of the signing key; never leaves the process
    created_by: str | None = Field(default=None, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())


class WebhookDelivery(SQLModel, table=True):
    """The outbox: one message for one destination, written in the transaction of the event
    that caused it. ``id`` is the ``webhook-id`` header, the same on every retry."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (sa.Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),)

    id: str = Field(primary_key=True, max_length=64)
    subscription_id: str | None = Field(default=None, index=True, max_length=64)  # None: callback
    run_id: str | None = Field(default=None, index=True, max_length=64)
    url: str = Field(max_length=2000)
    destination: str = Field(max_length=300)  # scheme://host:port: in-flight cap per receiver
    event_type: str = Field(max_length=32)
    body: str  # the exact JSON sent on every attempt
    status: str = Field(max_length=16)  # pending, delivered, failed
    attempts: int = 0
    next_attempt_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    claimed_by: str | None = Field(default=None, max_length=100)  # executor id of the sender
    last_attempt_at: datetime | None = Field(default=None, sa_type=UTCDateTime())
    last_status_code: int | None = None
    last_error: str | None = Field(default=None, max_length=500)
    queued_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())  # budget start
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    delivered_at: datetime | None = Field(default=None, sa_type=UTCDateTime())


class KnowledgeEntry(SQLModel, table=True):
    """A hand-written piece of domain knowledge the Actor and the Critic get when a task is
    about it: a rule anchor, a logic pitfall, a step of an evidence hierarchy, or a lesson (a
    reviewer's comment promoted for similar future tasks; ``scope`` is ``global`` or a run
    tag, ``source_task`` is indexed with it; ``owner`` keeps a lesson to its tenant's runs)."""

    __tablename__ = "knowledge_entries"

    id: str = Field(primary_key=True, max_length=200)
    kind: str = Field(index=True, max_length=32)
    title: str = Field(max_length=200)
    body: str
    profiles: list[str] = Field(default_factory=list, sa_column=sa.Column(sa.JSON, nullable=False))
    weight: float = 1.0
    pack: str = Field(default="api", index=True, max_length=100)
    author: str = Field(default="", max_length=200)
    retired: bool = False
    scope: str = Field(default="global", max_length=100)
    source_task: str = ""
    source_run_id: str | None = Field(default=None, max_length=64)
    # Whose runs it reaches: a lesson belongs to the token that started its source run (its
    # tenant); None: every run (packs, entries an admin wrote). ``shared``: an admin offered
    # an owned lesson to every tenant's runs (its owner still the only one to see its run).
    owner: str | None = Field(default=None, index=True, max_length=64)
    shared: bool = False
    uses: int = 0  # runs whose Actor received it
    # With embeddings on: the vector of title and body, and what it was computed from (a
    # hash of the model and the text), so an edited entry is embedded again.
    embedding: list[float] | None = json_column()
    embedding_key: str | None = Field(default=None, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())


class Evaluation(SQLModel, table=True):
    """A summary ``crosscheck eval`` published: per-mode figures and the configuration (the
    items stay in ``var/eval/`` on the machine that ran it). ``finished_at`` orders them."""

    __tablename__ = "evaluations"
    __table_args__ = (sa.Index("ix_evaluations_dataset_finished", "dataset", "finished_at"),)

    id: str = Field(primary_key=True, max_length=64)
    dataset: str = Field(max_length=50)
    items: int = 0
    item_limit: int | None = None
    seed: int | None = Field(default=None, sa_type=sa.BigInteger())
    modes: list[dict[str, Any]] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    config: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    commit: str | None = Field(default=None, max_length=64)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime())
    finished_at: datetime = Field(index=True, sa_type=UTCDateTime())
    published_by: str = Field(default="", max_length=200)
    published_by_id: str = Field(default="", max_length=64)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())


class CriticJudgement(SQLModel, table=True):
    """A reviewer's agree / dismiss on one issue of the Critic (by index in the critique of
    the review item's round); one per issue and item, the latest word kept. ``dimension``
    and ``error_type`` are copied from the issue for the stats."""

    __tablename__ = "critic_judgements"
    __table_args__ = (sa.UniqueConstraint("review_id", "issue"),)

    id: int | None = Field(default=None, primary_key=True)
    review_id: str = Field(foreign_key="review_items.id", index=True, max_length=64)
    run_id: str = Field(foreign_key="runs.id", index=True, max_length=64)
    round: int
    issue: int
    verdict: str = Field(max_length=16)
    reason: str | None = Field(default=None, max_length=300)
    dimension: str = Field(default="", max_length=200)
    error_type: str = Field(default="other", max_length=200)
    by: str = Field(max_length=64)
    author: str = Field(default="", max_length=200)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime())
