"""Append and read events. Appends are serialised so sequence order equals commit order."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from orchestrator.tables import Event

# Postgres hands out sequence numbers before commit; without this lock a reader could see
# seq 11 committed before seq 10 and skip 10 for ever. SQLite already serialises writers.
_EVENT_LOCK_KEY = 7_261_001


def append_event(session: Session, run_id: str | None, type_: str, data: dict[str, Any]) -> None:
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        session.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _EVENT_LOCK_KEY})
    session.add(Event(run_id=run_id, type=type_, data=data))


def events_after(
    session: Session, *, since: int, run_id: str | None = None, limit: int = 500
) -> list[Event]:
    query = select(Event).where(col(Event.seq) > since)
    if run_id is not None:
        query = query.where(Event.run_id == run_id)
    return list(session.exec(query.order_by(col(Event.seq)).limit(limit)))


def last_seq(session: Session) -> int:
    value = session.exec(select(sa.func.max(Event.seq))).one()
    return int(value or 0)
