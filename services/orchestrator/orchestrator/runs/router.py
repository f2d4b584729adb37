"""Runs API: the contract other services code against."""

from __future__ import annotations

import asyncio
import re
from typing import Annotated

from dbos import DBOS
from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from orchestrator.db import Database
from orchestrator.deps import Reader, ServiceCaller, SessionDep
from orchestrator.engine.launch import start_given, start_run
from orchestrator.evaluators.schema import check_schema
from orchestrator.events.hub import EventHub
from orchestrator.knowledge.profiles import ProfileCatalog
from orchestrator.readmodel.runs import load_run
from orchestrator.runs.service import MAX_PAGE, MAX_QUERY, RunService
from orchestrator.tables import Run
from orchestrator.webhooks.service import check_target
from shared import tracing
from shared.aio import wait_until_set
from shared.orchestration import (
    FINAL_STATUSES,
    RunCreate,
    RunCreated,
    RunPage,
    RunPublic,
    RunStatus,
    Trajectory,
)

router = APIRouter(prefix="/v1/runs", tags=["runs"])
service = RunService()

# `Prefer: wait=N` (RFC 7240): the longest a create request waits for the run's outcome.
MAX_WAIT_S = 60
# What ends the wait: a final status, or a run that waits for a person.
WAIT_ENDS = FINAL_STATUSES | {RunStatus.awaiting_review}
_DELTA_SECONDS = re.compile(r"[0-9]{1,10}")

CREATE_DESCRIPTION = f"""Start a reflection run; the same Idempotency-Key returns the same run.

**`Prefer: wait=N`** (RFC 7240, N whole seconds): wait up to N seconds (at most {MAX_WAIT_S};
larger values are capped) for the run to end or to wait for a person. If it gets there in time
the answer is **200 with the full run** (as `GET /v1/runs/{{id}}`); otherwise **202** with
`{{id, status}}` and `Location: /v1/runs/{{id}}`. Both carry `Preference-Applied: wait=N` with
the wait applied. A `wait` preference that is not a whole number of seconds from 1 up is
ignored, as RFC 7240 says (the request is answered as without it). A repeated request with the
same Idempotency-Key waits the same way. Without the preference: 201 (200 for a replay).
"""


def prefer_wait(values: list[str]) -> int | None:
    """The ``wait`` preference of ``Prefer`` header values in seconds, capped; None if absent.

    ``Prefer: respond-async, wait=10``: preferences are separated by commas, their parameters
    by semicolons. The first ``wait`` counts; one that is not 1*DIGIT >= 1 is ignored.
    """
    for value in values:
        for preference in value.split(","):
            name, _, raw = preference.split(";", 1)[0].partition("=")
            if name.strip().lower() != "wait":
                continue
            token = raw.strip()
            if len(token) >= 2 and token[0] == token[-1] == '"':
                token = token[1:-1]
            if not _DELTA_SECONDS.fullmatch(token) or int(token) < 1:
                return None
            return min(int(token), MAX_WAIT_S)
    return None


def _status(session: Session, run_id: str) -> RunStatus:
    return RunStatus(load_run(session, run_id).status)


async def wait_for_outcome(
    db: Database, hub: EventHub, run_id: str, seconds: float
) -> RunPublic | RunStatus:
    """The full run once it ends or waits for a person, else its status after ``seconds``.

    Sleeps on the event hub (every status change appends an event and wakes it) and reads
    the run's status on each wake; a slow safety poll covers writers in other replicas.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    waiter = hub.subscribe()
    try:
        while True:
            waiter.clear()  # before the read: a change committed after it still wakes us
            current = await db.read(lambda s: _status(s, run_id))
            if current in WAIT_ENDS:
                return await db.read(lambda s: service.get(s, run_id))  # the creator's run
            remaining = deadline - loop.time()
            if remaining <= 0:
                return current
            await wait_until_set(waiter, min(remaining, hub.poll_s))
    finally:
        hub.unsubscribe(waiter)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=RunCreated,
    description=CREATE_DESCRIPTION,
    responses={
        200: {
            "model": RunPublic | RunCreated,
            "description": "With `Prefer: wait=N`: the run, ended or waiting for a person, "
            "within N seconds (RunPublic). Without it: replayed for a known Idempotency-Key "
            "(RunCreated).",
        },
        202: {
            "model": RunCreated,
            "description": "With `Prefer: wait=N`: still running after N seconds; follow "
            "`Location`.",
            "headers": {
                "Location": {"schema": {"type": "string"}, "description": "/v1/runs/{id}"},
                "Preference-Applied": {"schema": {"type": "string"}, "description": "wait=N"},
            },
        },
    },
)
async def create_run(
    body: RunCreate,
    caller: ServiceCaller,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None, Header(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
    ] = None,
) -> RunCreated | Response:
    db: Database = request.app.state.db
    if body.json_schema is not None:
        # Refused here (422 naming the problem), not found out later by the running workflow.
        limits = request.app.state.settings.schema_limits()
        await asyncio.to_thread(check_schema, body.json_schema, limits)
    profiles: ProfileCatalog = request.app.state.profiles
    if body.policy.profile is not None:
        await profiles.require(body.policy.profile, body.kind)
    if body.callback_url is not None:  # never a target inside (checked again at delivery)
        await check_target(request.app.state.webhook_guard, "callback_url", body.callback_url)
    depth = None
    if body.policy.research is None and request.app.state.settings.research_url:
        # decided here, once, and kept on the run: a step re-run after a crash must decide
        # the same, whatever the Critic's list says by then
        depth = await profiles.effective_depth(body.policy, body.kind)

    # the request's span (a child of the caller's traceparent), read here: the database
    # thread does not see this task's context
    traceparent = tracing.current_traceparent()

    def create(s: Session) -> tuple[Run, bool]:
        return service.create(
            s, caller, body, idempotency_key, critique_depth=depth, traceparent=traceparent
        )

    try:
        run, created = await db.run(create)
    except IntegrityError:
        # Two requests raced with one key: the loser replays the winner's run.
        run, created = await db.run(create)
    # only a new run appended an event (run.created): wake only the feeds that follow it
    request.app.state.hub.notify({"run.created"} if created else ())
    if created and body.given_output is not None:
        await start_given(run.id, body.critic_first)
    elif created:
        await start_run(run.id)
    wait = prefer_wait(request.headers.getlist("prefer"))
    if wait is None:
        if not created:
            response.status_code = status.HTTP_200_OK
        return RunCreated(id=run.id, status=RunStatus(run.status))
    applied = {"Preference-Applied": f"wait={wait}"}
    outcome = await wait_for_outcome(db, request.app.state.hub, run.id, wait)
    if isinstance(outcome, RunPublic):
        return JSONResponse(outcome.model_dump(mode="json"), headers=applied)
    return JSONResponse(
        RunCreated(id=run.id, status=outcome).model_dump(mode="json"),
        status_code=status.HTTP_202_ACCEPTED,
        headers={**applied, "Location": f"/v1/runs/{run.id}"},
    )


@router.get("", response_model=RunPage)
def list_runs(
    caller: Reader,
    session: SessionDep,
    status_filter: Annotated[RunStatus | None, Query(alias="status")] = None,
    cursor: Annotated[str | None, Query(max_length=20)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    q: Annotated[
        str | None,
        Query(
            max_length=MAX_QUERY,
            pattern=r"^[^\x00]*$",
            description="Search: a run id (exact), or text the task contains (any case).",
        ),
    ] = None,
) -> RunPage:
    """Runs, newest first; pass next_cursor to get the following page."""
    return service.list(
        session, status=status_filter, cursor=cursor, limit=limit, q=q, principal=caller
    )


@router.get("/{run_id}", response_model=RunPublic)
async def get_run(run_id: str, caller: Reader, request: Request) -> Response:
    """A run with every round, its reflections and its usage."""
    # A run with long outputs is hundreds of kilobytes of JSON: it is read, built and
    # serialised on a reader thread in one hop, and the event loop only sends the bytes.
    db: Database = request.app.state.db
    body = await db.read(lambda s: service.get(s, run_id, caller).model_dump_json())
    return Response(body, media_type="application/json")


@router.post("/{run_id}/cancel", response_model=RunCreated, status_code=status.HTTP_202_ACCEPTED)
async def cancel_run(run_id: str, caller: ServiceCaller, request: Request) -> RunCreated:
    """Cancel a run in any unfinished state: a paused run ends at once (its review item can
    no longer be claimed), a working one before its next model or sandbox call."""
    db: Database = request.app.state.db
    run, finished = await db.run(lambda s: service.request_cancel(s, run_id, caller))
    if not finished and not await _driven(run_id):
        # No workflow will see the flag (it ended on a defect): end the run here.
        run = await db.run(lambda s: service.cancel_stalled(s, run_id, caller))
    request.app.state.hub.notify()
    return RunCreated(id=run.id, status=RunStatus(run.status))


async def _driven(run_id: str) -> bool:
    """Whether a workflow of the run (its first segment or a resumed one) is still going."""
    going = await DBOS.list_workflows_async(
        workflow_id_prefix=run_id,
        status=["PENDING", "ENQUEUED"],
        load_input=False,
        load_output=False,
        limit=1,
    )
    return bool(going)


@router.get("/{run_id}/trajectory", response_model=Trajectory)
def get_trajectory(run_id: str, caller: Reader, session: SessionDep) -> Trajectory:
    """Every model request and response of the run, for replay and audit."""
    return service.trajectory(session, run_id, caller)
