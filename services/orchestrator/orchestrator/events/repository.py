"""Append and read events. Appends are serialised so sequence order equals commit order."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, select

from orchestrator.tables import Event, table_of
from shared.orchestration import EventPublic

# Postgres hands out sequence numbers before commit; without this lock a reader could see
# seq 11 committed before seq 10 and skip 10 for ever. SQLite already serialises writers.
EVENT_LOCK_KEY = 7_261_001
# Every replica LISTENs on this channel and wakes its websocket subscribers (Postgres only).
EVENTS_CHANNEL = "crosscheck_events"

# One round trip: the lock, and a notification Postgres delivers only if the transaction
# commits (repeats within one transaction fold into one).
_EVENT_LOCK = sa.text(f"SELECT pg_advisory_xact_lock(:k), pg_notify('{EVENTS_CHANNEL}', '')")


def lock_event_sequence(session: Session) -> None:
    """Take the event-append lock for the rest of the transaction and, at commit, tell every
    replica's listener that events were added (Postgres only)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(_EVENT_LOCK, {"k": EVENT_LOCK_KEY})


def append_event(session: Session, run_id: str | None, type_: str, data: dict[str, Any]) -> None:
    lock_event_sequence(session)
    session.add(Event(run_id=run_id, type=type_, data=data))


_EVENTS = table_of(Event)
_AFTER = sa.select(
    _EVENTS.c.seq, _EVENTS.c.run_id, _EVENTS.c.type, _EVENTS.c.data, _EVENTS.c.created_at
).where(_EVENTS.c.seq > sa.bindparam("since"))
_AFTER_ALL = _AFTER.order_by(_EVENTS.c.seq).limit(sa.bindparam("limit"))
_AFTER_RUN = (
    _AFTER.where(_EVENTS.c.run_id == sa.bindparam("run_id"))
    .order_by(_EVENTS.c.seq)
    .limit(sa.bindparam("limit"))
)


def events_after(
    session: Session, *, since: int, run_id: str | None = None, limit: int = 500
) -> list[EventPublic]:
    """Events after ``since``, oldest first. A Core read: every websocket wake-up runs it."""
    params: dict[str, Any] = {"since": since, "limit": limit}
    query = _AFTER_ALL
    if run_id is not None:
        query, params = _AFTER_RUN, {**params, "run_id": run_id}
    rows = session.connection().execute(query, params)
    return [EventPublic(**row._asdict()) for row in rows]


def last_seq(session: Session) -> int:
    value = session.exec(select(sa.func.max(Event.seq))).one()
    return int(value or 0)
