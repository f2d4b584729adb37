"""The reads and writes every round repeats, as SQLAlchemy Core statements.

The act and critique steps run these several times per run, and the ORM's unit of work
(identity map, attribute events, flush ordering) cost more CPU than the SQL itself: about
6 ms per step on this machine against well under 2 ms here. Everything goes through the
step's own ``Session`` (its connection), so it shares that step's transaction with the
ORM code of the rarer paths (finishing, pausing, knowledge), which load rows after these
writes and therefore see them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Session

from orchestrator.events.repository import hold_event_lock, lock_event_sequence, note_appended
from orchestrator.tables import (
    Event,
    ModelCall,
    Reflection,
    Round,
    Run,
    table_of,
    utcnow,
)
from shared.contracts import ActorResult, CritiqueResult, ModelExchange, Usage
from shared.errors import NotFound
from shared.orchestration import RunStatus

RUNS = table_of(Run)
ROUNDS = table_of(Round)
REFLECTIONS = table_of(Reflection)
CALLS = table_of(ModelCall)
EVENTS = table_of(Event)

_RUN_COLUMNS = (
    RUNS.c.id,
    RUNS.c.status,
    RUNS.c.kind,
    RUNS.c.task,
    RUNS.c.entry_point,
    RUNS.c.evaluator,
    RUNS.c.policy,
    RUNS.c.cancel_requested,
    RUNS.c.rounds,
    RUNS.c.input_tokens,
    RUNS.c.output_tokens,
    RUNS.c.cost_usd,
    RUNS.c.lessons_used,
    RUNS.c.actor_knowledge,
    RUNS.c.actor_notes,
    RUNS.c.critic_notes,
    RUNS.c.tags,
    RUNS.c.binding_points,
    RUNS.c.binding_attempts,
    RUNS.c.human_rounds,
    RUNS.c.locked,
    RUNS.c.critique_depth,
    RUNS.c.created_by,
)
_SELECT_RUN = sa.select(*_RUN_COLUMNS).where(RUNS.c.id == sa.bindparam("run_id"))


@dataclass(frozen=True)
class RunState:
    """What a step needs to know about its run (a read, not a live ORM object)."""

    id: str
    status: str
    kind: str
    task: str
    entry_point: str | None
    evaluator: str
    policy: dict[str, Any]
    cancel_requested: bool
    rounds: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    lessons_used: list[str] | None
    actor_knowledge: list[str] | None
    actor_notes: list[dict[str, Any]] | None
    critic_notes: list[dict[str, Any]] | None
    tags: list[str] | None
    binding_points: list[str] | None
    binding_attempts: int
    human_rounds: int
    locked: list[str] | None
    critique_depth: str | None = None
    created_by: str = ""  # the token that started it: whose lessons its prompts may get


@dataclass(frozen=True)
class RoundState:
    number: int
    output: str
    output_hash: str
    evaluation: dict[str, Any] | None
    critique: dict[str, Any] | None
    rolled_back: list[dict[str, Any]] | None
    responses: list[dict[str, Any]] | None = None
    drafts: list[dict[str, Any]] | None = None
    sections: list[dict[str, Any]] | None = None
    search_queries: list[str] | None = None
    research: dict[str, Any] | None = None
    citations: dict[str, Any] | None = None
    provenance: str = "actor"  # "human": a reviewer's edit
    uncertainties: list[str] | None = None
    unsourced: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class ReflectionRow:
    round: int
    source: str
    author: str
    content: str
    created_at: Any


@dataclass
class RunChanges:
    """Column updates a step collects and writes in one UPDATE at the end."""

    values: dict[str, Any]

    def bill(self, run: RunState, usage: dict[str, Any]) -> None:
        self.values["input_tokens"] = self.values.get("input_tokens", run.input_tokens) + int(
            usage.get("input_tokens", 0)
        )
        self.values["output_tokens"] = self.values.get("output_tokens", run.output_tokens) + int(
            usage.get("output_tokens", 0)
        )
        cost = self.values.get("cost_usd", run.cost_usd) + float(usage.get("cost_usd") or 0.0)
        self.values["cost_usd"] = round(cost, 8)

    def tokens(self, run: RunState) -> int:
        return int(self.values.get("input_tokens", run.input_tokens)) + int(
            self.values.get("output_tokens", run.output_tokens)
        )

    def cost(self, run: RunState) -> float:
        return float(self.values.get("cost_usd", run.cost_usd))


# Statements are built once; values travel as execution parameters, so SQLAlchemy compiles
# each shape once and reuses it (building ``.values(...)`` per call cost more than the SQL).
_INSERT_ROUND = ROUNDS.insert()
_UPDATE_ROUND = ROUNDS.update().where(
    ROUNDS.c.run_id == sa.bindparam("_run_id"), ROUNDS.c.number == sa.bindparam("_number")
)
_INSERT_REFLECTION = REFLECTIONS.insert()
_CALL_EXISTS = sa.select(CALLS.c.id).where(CALLS.c.call_key == sa.bindparam("key"))
_INSERT_CALL = CALLS.insert()
# One statement instead of a lookup and an insert: the unique call key decides, and a
# returned id says this was the first time (a skipped row returns none; psycopg reports no
# row count for it).
_INSERT_CALL_ONCE: dict[str, sa.sql.dml.ReturningInsert[tuple[int]]] = {
    "sqlite": sqlite_insert(CALLS)
    .on_conflict_do_nothing(index_elements=[CALLS.c.call_key])
    .returning(CALLS.c.id),
    "postgresql": postgresql_insert(CALLS)
    .on_conflict_do_nothing(index_elements=[CALLS.c.call_key])
    .returning(CALLS.c.id),
}
_INSERT_EVENT = EVENTS.insert()
UPDATE_RUN = RUNS.update().where(RUNS.c.id == sa.bindparam("_id"))


def _conn(session: Session) -> sa.Connection:
    """The connection of the session's transaction (skips the ORM's execute layers)."""
    return session.connection()


def load_run(session: Session, run_id: str) -> RunState:
    row = _conn(session).execute(_SELECT_RUN, {"run_id": run_id}).first()
    if row is None:
        raise NotFound(f"run {run_id} does not exist")
    return RunState(**row._asdict())


_SELECT_ROUND = sa.select(
    ROUNDS.c.number,
    ROUNDS.c.output,
    ROUNDS.c.output_hash,
    ROUNDS.c.evaluation,
    ROUNDS.c.critique,
    ROUNDS.c.rolled_back,
    ROUNDS.c.responses,
    ROUNDS.c.drafts,
    ROUNDS.c.sections,
    ROUNDS.c.search_queries,
    ROUNDS.c.research,
    ROUNDS.c.citations,
    ROUNDS.c.provenance,
    ROUNDS.c.uncertainties,
    ROUNDS.c.unsourced,
).where(ROUNDS.c.run_id == sa.bindparam("run_id"), ROUNDS.c.number == sa.bindparam("number"))


def load_round(session: Session, run_id: str, number: int) -> RoundState | None:
    row = _conn(session).execute(_SELECT_ROUND, {"run_id": run_id, "number": number}).first()
    return RoundState(**row._asdict()) if row is not None else None


def insert_round(session: Session, run_id: str, number: int, values: dict[str, Any]) -> None:
    now = utcnow()
    params = {"run_id": run_id, "number": number, "created_at": now, "updated_at": now}
    _conn(session).execute(_INSERT_ROUND, {**params, **values})


def update_round(session: Session, run_id: str, number: int, values: dict[str, Any]) -> None:
    params = {"_run_id": run_id, "_number": number, "updated_at": utcnow()}
    _conn(session).execute(_UPDATE_ROUND, {**params, **values})


_SELECT_REFLECTIONS = (
    sa.select(
        REFLECTIONS.c.round,
        REFLECTIONS.c.source,
        REFLECTIONS.c.author,
        REFLECTIONS.c.content,
        REFLECTIONS.c.created_at,
    )
    .where(REFLECTIONS.c.run_id == sa.bindparam("run_id"))
    .order_by(REFLECTIONS.c.round, REFLECTIONS.c.id)
)


def reflections(session: Session, run_id: str, source: str | None = None) -> list[ReflectionRow]:
    query = _SELECT_REFLECTIONS
    if source is not None:
        query = query.where(REFLECTIONS.c.source == source)
    rows = _conn(session).execute(query, {"run_id": run_id})
    return [ReflectionRow(**row._asdict()) for row in rows]


def add_reflection(session: Session, run_id: str, round: int, source: str, content: str) -> None:
    _conn(session).execute(
        _INSERT_REFLECTION,
        {
            "run_id": run_id,
            "round": round,
            "source": source,
            "author": "",
            "content": content,
            "created_at": utcnow(),
        },
    )


@dataclass(frozen=True)
class FailedCall:
    """The model calls behind a peer's refusal (an invalid or cut-off output): billed too."""

    usage: Usage
    exchanges: list[ModelExchange] = field(default_factory=list)


def record_call(
    session: Session,
    run_id: str,
    *,
    round: int,
    role: str,
    stage: str,
    key: str,
    result: ActorResult | CritiqueResult | FailedCall,
) -> dict[str, Any] | None:
    """Store a model call once per key; return its usage when this is the first time."""
    conn = _conn(session)
    once = _INSERT_CALL_ONCE.get(conn.dialect.name)
    if once is None and conn.execute(_CALL_EXISTS, {"key": key}).first() is not None:
        return None
    usage = result.usage.model_dump(mode="json")
    row = {
        "run_id": run_id,
        "call_key": key,
        "round": round,
        "role": role,
        "stage": stage,
        "usage": usage,
        "exchanges": [e.model_dump(mode="json") for e in result.exchanges],
        "latency_ms": result.usage.latency_ms,
        "created_at": utcnow(),
    }
    if once is None:
        conn.execute(_INSERT_CALL, row)
        return usage
    return usage if conn.execute(once, row).first() is not None else None


def append_event(session: Session, run_id: str | None, type_: str, data: dict[str, Any]) -> None:
    """The Core twin of ``events.repository.append_event`` (same lock, same row)."""
    lock_event_sequence(session, type_)
    note_appended(session, type_)
    _conn(session).execute(
        _INSERT_EVENT, {"run_id": run_id, "type": type_, "data": data, "created_at": utcnow()}
    )


def update_run(
    session: Session,
    run: RunState,
    changes: RunChanges,
    *,
    status: RunStatus | None = None,
    event: dict[str, Any] | None = None,
) -> None:
    """Write the collected changes; a status change also appends its ``run.status`` event."""
    values = dict(changes.values)
    if status is not None and status.value != run.status:
        values["status"] = status.value
        append_event(session, run.id, "run.status", {"status": status.value, **(event or {})})
    if not values:
        return
    values["updated_at"] = utcnow()
    hold_event_lock(session)  # before the run's row: see events.repository.hold_event_lock
    _conn(session).execute(UPDATE_RUN, {"_id": run.id, **values})
