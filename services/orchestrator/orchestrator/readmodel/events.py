"""Events: the one place that appends and reads them. Appends are serialised so sequence
order equals commit order, and every append is the same Core insert (the ORM never adds an
``Event``), so a unit of work's events keep the order it appended them in."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from orchestrator.readmodel.visibility import events_in_review
from orchestrator.tables import Event, table_of, utcnow
from shared.errors import BadRequest
from shared.orchestration import EventPublic

# Postgres hands out sequence numbers before commit; without this lock a reader could see
# seq 11 committed before seq 10 and skip 10 for ever. SQLite already serialises writers.
EVENT_LOCK_KEY = 7_261_001
# Every replica LISTENs on this channel and wakes its websocket subscribers (Postgres only).
EVENTS_CHANNEL = "crosscheck_events"

# One round trip: the lock, and a notification Postgres delivers only if the transaction
# commits (repeats within one transaction fold into one). Its payload is the event's type,
# so a listener wakes only the subscribers that follow it (an empty payload: every one).
_EVENT_LOCK = sa.text(f"SELECT pg_advisory_xact_lock(:k), pg_notify('{EVENTS_CHANNEL}', :type)")


# ``session.info`` key: the event types a unit of work appended (see ``appended_types``).
APPENDED = "crosscheck.event_types"


def note_appended(session: Session, type_: str) -> None:
    session.info.setdefault(APPENDED, set()).add(type_)


def appended_types(session: Session) -> frozenset[str]:
    """The event types appended in this session so far (what a commit will publish)."""
    return frozenset(session.info.get(APPENDED, ()))


_LOCK_ONLY = sa.text("SELECT pg_advisory_xact_lock(:k)")
_NOTIFY_ONLY = sa.text(f"SELECT pg_notify('{EVENTS_CHANNEL}', :type)")
# ``session.info`` key: (the transaction that holds the lock, the types it announced). The
# lock lasts until that transaction ends, so one unit of work takes it once, however many
# events it appends, and announces each type once.
_HELD = "crosscheck.event_lock"


def _announced(session: Session) -> set[str] | None:
    """The types this transaction announced, when it already holds the lock (else None)."""
    held: tuple[object, set[str]] | None = session.info.get(_HELD)
    if held is not None and held[0] is session.get_transaction():
        return held[1]
    return None


def _take(
    session: Session, statement: sa.TextClause, params: dict[str, Any], types: set[str]
) -> None:
    with session.no_autoflush:
        session.execute(statement, params)
    session.info[_HELD] = (session.get_transaction(), types)


def lock_event_sequence(session: Session, type_: str = "") -> None:
    """Take the event-append lock for the rest of the transaction and, at commit, tell every
    replica's listener that events of ``type_`` were added (Postgres only; a transaction
    that holds the lock already announces a new type only, and a known one not at all).

    The lock is taken before the unit's pending row changes are flushed: a unit that had
    already written a run's row and then waited here could deadlock with one that holds this
    lock and is about to write the same row (seen with a cancel racing a step)."""
    if session.get_bind().dialect.name != "postgresql":
        return
    announced = _announced(session)
    if announced is None:
        _take(session, _EVENT_LOCK, {"k": EVENT_LOCK_KEY, "type": type_}, {type_})
    elif type_ not in announced:
        with session.no_autoflush:
            session.execute(_NOTIFY_ONLY, {"type": type_})
        announced.add(type_)


def hold_event_lock(session: Session) -> None:
    """Take the event-append lock without announcing anything: before a unit writes a run's
    row, so every unit that writes both takes this lock first and none waits for it while
    holding a row another one needs (Postgres only; once per transaction)."""
    if session.get_bind().dialect.name == "postgresql" and _announced(session) is None:
        _take(session, _LOCK_ONLY, {"k": EVENT_LOCK_KEY}, set())


_EVENTS = table_of(Event)
_INSERT_EVENT = _EVENTS.insert()


def append_event(session: Session, run_id: str | None, type_: str, data: dict[str, Any]) -> None:
    """Append one event to the unit of work's transaction (published when it commits)."""
    lock_event_sequence(session, type_)
    note_appended(session, type_)
    session.connection().execute(
        _INSERT_EVENT, {"run_id": run_id, "type": type_, "data": data, "created_at": utcnow()}
    )


_AFTER = sa.select(
    _EVENTS.c.seq, _EVENTS.c.run_id, _EVENTS.c.type, _EVENTS.c.data, _EVENTS.c.created_at
).where(_EVENTS.c.seq > sa.bindparam("since"))
_OF_RUN = _EVENTS.c.run_id == sa.bindparam("run_id")
_OF_TYPES = _EVENTS.c.type.in_(sa.bindparam("types", expanding=True))
# A reviewer's scope: the events of runs that are or were in review.
_IN_REVIEW = events_in_review(_EVENTS.c.run_id)
# One prebuilt statement per filter combination: (run_id given, types given, in review only).
_QUERIES = {
    (with_run, with_types, reviewed): _AFTER.where(
        *([_OF_RUN] if with_run else []),
        *([_OF_TYPES] if with_types else []),
        *([_IN_REVIEW] if reviewed else []),
    )
    .order_by(_EVENTS.c.seq)
    .limit(sa.bindparam("limit"))
    for with_run in (False, True)
    for with_types in (False, True)
    for reviewed in (False, True)
}
MAX_TYPES = 20


def parse_types(value: str | None) -> list[str] | None:
    """``run.finished,run.status`` as a list; None (every type) for an empty value."""
    if value is None:
        return None
    types = sorted({t.strip() for t in value.split(",") if t.strip()})
    if not types:
        return None
    if len(types) > MAX_TYPES:
        raise BadRequest(f"type: at most {MAX_TYPES} event types")
    return types


def events_after(
    session: Session,
    *,
    since: int,
    run_id: str | None = None,
    types: list[str] | None = None,
    limit: int = 500,
    reviewed: bool = False,
) -> list[EventPublic]:
    """Events after ``since``, oldest first, of one run and of the given types when asked
    (``reviewed``: only of runs that are or were in review, a reviewer's scope).
    A Core read: every websocket wake-up runs it, so a client that needs one event type
    has the others filtered in SQL instead of serialised, sent and parsed."""
    params: dict[str, Any] = {"since": since, "limit": limit}
    if run_id is not None:
        params["run_id"] = run_id
    if types:
        params["types"] = types
    query = _QUERIES[(run_id is not None, bool(types), reviewed)]
    rows = session.connection().execute(query, params)
    return [EventPublic(**row._asdict()) for row in rows]


_NEWEST_SEQ = sa.select(sa.func.max(_EVENTS.c.seq))
_OF_TYPE = _EVENTS.c.type == sa.bindparam("type")
_UPTO = _EVENTS.c.seq <= sa.bindparam("upto")
# (run_id given, one type or several, in review only)
_FOLLOW = {
    (with_run, one, reviewed): _AFTER.where(
        _UPTO,
        _OF_TYPE if one else _OF_TYPES,
        *([_OF_RUN] if with_run else []),
        *([_IN_REVIEW] if reviewed else []),
    )
    .order_by(_EVENTS.c.seq)
    .limit(sa.bindparam("limit"))
    for with_run in (False, True)
    for one in (False, True)
    for reviewed in (False, True)
}


def follow_types(
    session: Session,
    *,
    since: int,
    types: list[str],
    run_id: str | None = None,
    limit: int = 500,
    reviewed: bool = False,
) -> tuple[list[EventPublic], int, bool]:
    """For a live feed of a few event types: the matching events after ``since``, the
    sequence number read up to, and whether more may follow at once (a full batch).

    The newest sequence number is read first and the feed moves past it, so the events of
    other types are skipped once instead of scanned again on every wake-up. Appends hold
    the event lock until they commit, so every event up to that number is already visible.
    """
    conn = session.connection()
    newest = conn.execute(_NEWEST_SEQ).scalar()
    if newest is None or newest <= since:
        return [], since, False
    params: dict[str, Any] = {"since": since, "upto": newest, "limit": limit}
    one = len(types) == 1
    if one:
        params["type"] = types[0]
    else:
        params["types"] = types
    if run_id is not None:
        params["run_id"] = run_id
    rows = list(conn.execute(_FOLLOW[(run_id is not None, one, reviewed)], params))
    events = [EventPublic(**row._asdict()) for row in rows]
    if len(rows) >= limit:
        return events, rows[-1].seq, True
    return events, int(newest), False


def last_seq(session: Session) -> int:
    return int(session.connection().execute(_NEWEST_SEQ).scalar() or 0)
