"""Events over HTTP (catch-up) and websockets (live, resumable with ``since``)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Query, WebSocket, WebSocketDisconnect, status

from orchestrator.db import Database
from orchestrator.deps import Reader, SessionDep, authenticate
from orchestrator.events.hub import EventHub
from orchestrator.events.repository import events_after, follow_types, parse_types
from orchestrator.runs.service import check_event_scope
from shared.errors import AppError
from shared.orchestration import EventPublic, Role

router = APIRouter(tags=["events"])

MAX_SEQ = 2**62  # beyond any sequence number; larger values would overflow the database


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
    (comma-separated, e.g. ``run.finished``) keeps only those types. A service token passes
    the ``run_id`` of one of its own runs."""
    types = parse_types(type)
    check_event_scope(session, caller, run_id)
    return events_after(session, since=since, run_id=run_id, types=types, limit=limit)


@router.websocket("/v1/events")
async def stream_events(
    websocket: WebSocket,
    since: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    run_id: Annotated[str | None, Query(max_length=64)] = None,
    type: Annotated[str | None, Query(max_length=1000)] = None,
) -> None:
    """Every event after ``since`` in order, then live ones; reconnect with the last seq seen.
    ``type`` (comma-separated) keeps only those event types, e.g. ``run.finished``."""
    db: Database = websocket.app.state.db
    hub: EventHub = websocket.app.state.hub
    try:
        types = parse_types(type)
        principal = await db.read(lambda session: authenticate(websocket, session))  # type: ignore[arg-type]
        if not principal.can(Role.service, Role.reviewer):
            raise AppError("forbidden", status_code=403)
        await db.read(lambda session: check_event_scope(session, principal, run_id))
    except AppError as exc:
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason=exc.message)
        return
    await websocket.accept()
    waiter = hub.subscribe(types)
    gone = asyncio.create_task(_until_disconnect(websocket))
    last = since
    try:
        while not gone.done():
            waiter.clear()
            while True:
                if types:
                    batch, upto, more = await db.read(
                        partial(follow_types, since=last, run_id=run_id, types=types)
                    )
                else:
                    batch = await db.read(partial(events_after, since=last, run_id=run_id))
                    upto = batch[-1].seq if batch else last
                    more = len(batch) >= 500
                for event in batch:
                    await websocket.send_text(event.model_dump_json())
                last = upto
                if not more:
                    break
            woken = asyncio.create_task(waiter.wait())
            await asyncio.wait(
                {woken, gone}, timeout=hub.poll_s, return_when=asyncio.FIRST_COMPLETED
            )
            woken.cancel()
    except WebSocketDisconnect:
        pass
    finally:
        gone.cancel()
        hub.unsubscribe(waiter)


async def _until_disconnect(websocket: WebSocket) -> None:
    """Clients only listen; reading is how a closed connection is noticed at once."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
