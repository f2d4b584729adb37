"""Model calls: every request and response behind a run, stored once per call key (the
key makes billing exactly-once across retries and recovery)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from pydantic import TypeAdapter
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlmodel import Session, col, select

from orchestrator.tables import ModelCall, table_of, utcnow
from shared.contracts import ActorResult, CritiqueResult, ModelExchange, Usage

CALLS = table_of(ModelCall)
_CALL_EXISTS = sa.select(CALLS.c.id).where(CALLS.c.call_key == sa.bindparam("key"))
_INSERT_CALL = CALLS.insert()
# The exchanges (every request and response of the call, the largest value a step writes)
# arrive as JSON text pydantic wrote straight from the DTOs, several times faster than
# dumping them to dicts for the JSON column to encode again; Postgres casts the text to its
# JSON column, SQLite stores it as it stores any JSON value.
_EXCHANGES = sa.bindparam("exchanges_json", type_=sa.Text())
_EXCHANGE_LIST = TypeAdapter(list[ModelExchange])
# One statement instead of a lookup and an insert: the unique call key decides, and a
# returned id says this was the first time (a skipped row returns none; psycopg reports no
# row count for it).
_INSERT_CALL_ONCE: dict[str, sa.sql.dml.ReturningInsert[tuple[int]]] = {
    "sqlite": sqlite_insert(CALLS)
    .values(exchanges=_EXCHANGES)
    .on_conflict_do_nothing(index_elements=[CALLS.c.call_key])
    .returning(CALLS.c.id),
    "postgresql": postgresql_insert(CALLS)
    .values(exchanges=sa.cast(_EXCHANGES, postgresql.JSON))
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
    row: dict[str, Any] = {
        "run_id": run_id,
        "call_key": key,
        "round": round,
        "role": role,
        "stage": stage,
        "usage": usage,
        "latency_ms": result.usage.latency_ms,
        "created_at": utcnow(),
    }
    if once is None:
        row["exchanges"] = _EXCHANGE_LIST.dump_python(result.exchanges, mode="json")
        conn.execute(_INSERT_CALL, row)
        return usage
    row["exchanges_json"] = _EXCHANGE_LIST.dump_json(result.exchanges).decode()
    return usage if conn.execute(once, row).first() is not None else None


def calls_of(session: Session, run_id: str) -> list[ModelCall]:
    """A run's calls, oldest first (its trajectory)."""
    return list(
        session.exec(
            select(ModelCall).where(ModelCall.run_id == run_id).order_by(col(ModelCall.id))
        )
    )
