"""Runs API: the contract other services code against."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status
from sqlalchemy.exc import IntegrityError

from orchestrator.db import Database
from orchestrator.deps import Reader, ServiceCaller, SessionDep
from orchestrator.engine.launch import start_run
from orchestrator.runs.service import MAX_PAGE, MAX_QUERY, RunService
from shared.orchestration import RunCreate, RunCreated, RunPage, RunPublic, RunStatus, Trajectory

router = APIRouter(prefix="/v1/runs", tags=["runs"])
service = RunService()


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=RunCreated,
    responses={200: {"model": RunCreated, "description": "replayed for a known Idempotency-Key"}},
)
async def create_run(
    body: RunCreate,
    caller: ServiceCaller,
    request: Request,
    response: Response,
    idempotency_key: Annotated[
        str | None, Header(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
    ] = None,
) -> RunCreated:
    """Start a reflection run; the same Idempotency-Key returns the same run."""
    db: Database = request.app.state.db
    try:
        run, created = await db.run(lambda s: service.create(s, caller, body, idempotency_key))
    except IntegrityError:
        # Two requests raced with one key: the loser replays the winner's run.
        run, created = await db.run(lambda s: service.create(s, caller, body, idempotency_key))
    request.app.state.hub.notify()
    if created:
        await start_run(run.id)
    else:
        response.status_code = status.HTTP_200_OK
    return RunCreated(id=run.id, status=RunStatus(run.status))


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
    return service.list(session, status=status_filter, cursor=cursor, limit=limit, q=q)


@router.get("/{run_id}", response_model=RunPublic)
def get_run(run_id: str, caller: Reader, session: SessionDep) -> RunPublic:
    """A run with every round, its reflections and its usage."""
    return service.get(session, run_id)


@router.post("/{run_id}/cancel", response_model=RunCreated, status_code=status.HTTP_202_ACCEPTED)
async def cancel_run(run_id: str, caller: ServiceCaller, request: Request) -> RunCreated:
    """Cancel a run; it stops before its next model or sandbox call."""
    db: Database = request.app.state.db
    run, _ = await db.run(lambda s: service.request_cancel(s, run_id))
    request.app.state.hub.notify()
    return RunCreated(id=run.id, status=RunStatus(run.status))


@router.get("/{run_id}/trajectory", response_model=Trajectory)
def get_trajectory(run_id: str, caller: Reader, session: SessionDep) -> Trajectory:
    """Every model request and response of the run, for replay and audit."""
    return service.trajectory(session, run_id)
