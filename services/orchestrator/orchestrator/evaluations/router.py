"""Evaluations API: the harness (a service or an admin token) publishes, readers read."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status

from orchestrator.auth.service import Principal
from orchestrator.db import Database
from orchestrator.deps import Reader, ServiceCaller, SessionDep
from orchestrator.evaluations.service import EvaluationService
from shared.evaluations import Dataset, EvaluationCreate, EvaluationPublic
from shared.orchestration import Role

router = APIRouter(prefix="/v1/evaluations", tags=["evaluations"])
service = EvaluationService()


def publisher(caller: Principal) -> str | None:
    """Whose evaluations a caller reads: a service its own; reviewers and admins all."""
    return caller.id if caller.role is Role.service else None


@router.post("", response_model=EvaluationPublic, status_code=status.HTTP_201_CREATED)
async def publish(
    body: EvaluationCreate, caller: ServiceCaller, request: Request
) -> EvaluationPublic:
    """Keep the summary of an evaluation (service or admin token: the tokens that can start
    the runs an evaluation makes). The items stay in the harness's ``var/eval/``."""
    db: Database = request.app.state.db
    return await db.run(lambda s: service.create(s, body, caller))


@router.get("", response_model=list[EvaluationPublic])
def list_evaluations(
    caller: Reader,
    session: SessionDep,
    dataset: Annotated[Dataset | None, Query(description="Only this set, e.g. text.")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> list[EvaluationPublic]:
    """Summaries, newest first (by the time the evaluation finished); a service token gets
    those it published, reviewers and admins every one."""
    return service.listed(session, dataset=dataset, limit=limit, publisher=publisher(caller))


@router.get(
    "/latest",
    response_model=EvaluationPublic,
    responses={404: {"description": "none published yet (of that dataset)"}},
)
def latest_evaluation(
    caller: Reader,
    session: SessionDep,
    dataset: Annotated[Dataset | None, Query(description="Only this set, e.g. text.")] = None,
    exclude: Annotated[
        Dataset | None,
        Query(description="Any set but this one, e.g. intercept (the Critic alone)."),
    ] = None,
) -> EvaluationPublic:
    """The evaluation that finished last (of ``dataset``, or of any set but ``exclude``):
    what the console's Metrics page shows (a service token: of those it published)."""
    return service.latest(session, dataset=dataset, exclude=exclude, publisher=publisher(caller))
