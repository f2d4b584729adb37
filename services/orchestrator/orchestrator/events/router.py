"""Events over HTTP (catch-up) and websockets (live, resumable with ``since``)."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Query, WebSocket, WebSocketDisconnect, status

from orchestrator.auth.service import Principal, TokenService
from orchestrator.db import Database
from orchestrator.deps import Reader, SessionDep, authenticate
from orchestrator.events.hub import EventHub
from orchestrator.readmodel.events import events_after, follow_types, parse_types
from orchestrator.readmodel.visibility import check_event_scope
from orchestrator.tables import utcnow
from shared.errors import AppError
from shared.orchestration import EventPublic, Role

router = APIRouter(tags=["events"])

MAX_SEQ = 2**62  # beyond any sequence number; larger values would overflow the database
# Close code of a socket whose token was revoked or expired (4000-4999: the application's;
# 4401 mirrors HTTP 401, so a client knows to log in again instead of reconnecting).
TOKEN_ENDED = 4401
# Without cross-replica notifications, how often an open socket reads its token row again.
TOKEN_CHECK_S = 0.5


@router.get("/v1/events", response_model=list[EventPublic])
def list_events(
    caller: Reader,
    session: SessionDep,
    since: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    run_id: Annotated[str | None, Query(max_length=64)] = None,
    type: Annotated[str | None, Query(max_length=1000)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> list[EventPublic]:
    """Events after ``since``, oldest first (what a websocket would have pushed); ``type``
    (comma-separated, e.g. ``run.finished``) keeps only those types. Only the events of runs
    the caller may see: a service passes the ``run_id`` of one of its own runs, a reviewer
    gets those of runs in review."""
    types = parse_types(type)
    reviewed = check_event_scope(session, caller, run_id)
    return events_after(
        session, since=since, run_id=run_id, types=types, limit=limit, reviewed=reviewed
    )


@router.websocket("/v1/events")
async def stream_events(
    websocket: WebSocket,
    since: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    run_id: Annotated[str | None, Query(max_length=64)] = None,
    type: Annotated[str | None, Query(max_length=1000)] = None,
) -> None:
    """Every event after ``since`` in order, then live ones; reconnect with the last seq seen.
    ``type`` (comma-separated) keeps only those event types, e.g. ``run.finished``. The
    socket closes (4401) within a second once its token is revoked or expires."""
    db: Database = websocket.app.state.db
    hub: EventHub = websocket.app.state.hub
    try:
        types = parse_types(type)
        principal = await db.read(lambda session: authenticate(websocket, session))  # type: ignore[arg-type]
        if not principal.can(Role.service, Role.reviewer):
            raise AppError("forbidden", status_code=403)
        reviewed = await db.read(lambda session: check_event_scope(session, principal, run_id))
    except AppError as exc:
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason=exc.message)
        return
    await websocket.accept()
    waiter = hub.subscribe(types)
    gone = asyncio.create_task(_until_disconnect(websocket))
    token = _TokenWatch(principal, hub)
    last = since
    read = True  # the events table is read when woken or when the poll is due, not on a
    read_at = 0.0  # token check alone (SQLite checks tokens twice as often as it polls)
    try:
        while not gone.done():
            ended = await token.ended(db)
            if ended is not None:
                await websocket.close(code=TOKEN_ENDED, reason=ended)
                return
            while read:
                waiter.clear()
                if types:
                    batch, upto, more = await db.read(
                        partial(
                            follow_types, since=last, run_id=run_id, types=types, reviewed=reviewed
                        )
                    )
                else:
                    batch = await db.read(
                        partial(events_after, since=last, run_id=run_id, reviewed=reviewed)
                    )
                    upto = batch[-1].seq if batch else last
                    more = len(batch) >= 500
                for event in batch:
                    await websocket.send_text(event.model_dump_json())
                last = upto
                read = more
                read_at = time.monotonic() + hub.poll_s
            woken = asyncio.create_task(waiter.wait())
            await asyncio.wait(
                {woken, gone},
                timeout=token.wait_s(max(read_at - time.monotonic(), 0.0)),
                return_when=asyncio.FIRST_COMPLETED,
            )
            woken.cancel()
            read = waiter.is_set() or time.monotonic() >= read_at
    except WebSocketDisconnect:
        pass
    finally:
        gone.cancel()
        hub.unsubscribe(waiter)


class _TokenWatch:
    """Whether an open socket's token still works.

    A revocation on this replica, or one another replica announces (Postgres NOTIFY), bumps
    the hub's ``tokens_generation`` and wakes every socket, which then reads its token row
    again; an expiry is known from the token itself. Where no notification can arrive (SQLite
    or a listener that is reconnecting) the row is read every ``TOKEN_CHECK_S`` as well.
    """

    def __init__(self, principal: Principal, hub: EventHub) -> None:
        self.principal = principal
        self.hub = hub
        self.generation = hub.tokens_generation
        self.checked = time.monotonic()

    async def ended(self, db: Database) -> str | None:
        """Why the token no longer works, or None while it does."""
        if self.principal.expired():
            return "token expired"
        now = time.monotonic()
        due = not self.hub.listening and now - self.checked >= TOKEN_CHECK_S
        if self.generation == self.hub.tokens_generation and not due:
            return None
        self.generation, self.checked = self.hub.tokens_generation, now
        current = await db.read(lambda s: TokenService().current(s, self.principal.id))
        if current is None:
            return "token revoked or expired"
        return None

    def wait_s(self, poll_s: float) -> float:
        """How long the socket may sleep: until its next poll, or its token's next check."""
        wait = poll_s if self.hub.listening else min(poll_s, TOKEN_CHECK_S)
        if self.principal.expires_at is not None:
            left = (self.principal.expires_at - utcnow()).total_seconds()
            wait = min(wait, max(left, 0.0) + 0.01)
        return wait


async def _until_disconnect(websocket: WebSocket) -> None:
    """Clients only listen; reading is how a closed connection is noticed at once."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
