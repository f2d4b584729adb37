"""Model calls: every request and response behind a run, stored once per call key (the
key makes billing exactly-once across retries and recovery)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Session, col, select

from orchestrator.tables import ModelCall, table_of, utcnow
from shared.contracts import ActorResult, CritiqueResult, ModelExchange, Usage

CALLS = table_of(ModelCall)
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
    conn = session.connection()
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


def calls_of(session: Session, run_id: str) -> list[ModelCall]:
    """A run's calls, oldest first (its trajectory)."""
    return list(
        session.exec(
            select(ModelCall).where(ModelCall.run_id == run_id).order_by(col(ModelCall.id))
        )
    )
