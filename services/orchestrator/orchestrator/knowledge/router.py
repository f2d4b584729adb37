"""Knowledge API: admins write entries, reviewers (and services) read and search them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status

from orchestrator.auth.service import Principal
from orchestrator.db import Database
from orchestrator.deps import Admin, Reader, SessionDep
from orchestrator.knowledge.schemas import (
    KnowledgeCreate,
    KnowledgeMatch,
    KnowledgePublic,
    KnowledgeUpdate,
)
from orchestrator.knowledge.service import KnowledgeService, public
from shared.contracts import KnowledgeKind, ProfileName
from shared.orchestration import Role

router = APIRouter(prefix="/v1/knowledge", tags=["knowledge"])


def tenant_of(caller: Principal) -> str | None:
    """Whose lessons a caller sees: a service its own; reviewers and admins every one."""
    return caller.id if caller.role is Role.service else None


def _service(request: Request) -> KnowledgeService:
    service: KnowledgeService = request.app.state.knowledge
    return service


@router.post("", response_model=KnowledgePublic, status_code=status.HTTP_201_CREATED)
async def create_entry(body: KnowledgeCreate, caller: Admin, request: Request) -> KnowledgePublic:
    """Add an entry (admin): a rule anchor, a logic pitfall, an evidence weight or a lesson."""
    db: Database = request.app.state.db
    service = _service(request)
    return await db.run(lambda s: service.create(s, body, caller.name))


@router.get("", response_model=list[KnowledgePublic])
def list_entries(
    caller: Reader,
    session: SessionDep,
    request: Request,
    kind: KnowledgeKind | None = None,
    profile: ProfileName | None = None,
    include_retired: bool = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> list[KnowledgePublic]:
    """Entries, newest first; ``profile`` keeps those for that profile (and for every one);
    ``kind=lesson`` lists the lessons reviewers promoted (a service: of its own runs)."""
    return _service(request).listed(
        session,
        kind=kind,
        profile=profile,
        include_retired=include_retired,
        limit=limit,
        tenant=tenant_of(caller),
    )


@router.get("/search", response_model=list[KnowledgeMatch])
async def search_entries(
    caller: Reader,
    request: Request,
    q: Annotated[str, Query(min_length=1, max_length=20_000)],
    profile: ProfileName | None = None,
    tag: Annotated[list[str], Query(max_length=20)] = [],  # noqa: B006  (FastAPI copies it)
) -> list[KnowledgeMatch]:
    """What the Actor and the Critic would receive for a task with this text (and these run
    tags): the top entries above the threshold, best first, with their scores (a service: for
    its own runs; a reviewer or an admin: counting every tenant's lessons)."""
    db: Database = request.app.state.db
    service = _service(request)
    vector = await service.query_vector(db, q)
    tenant = tenant_of(caller)
    return await db.read(lambda s: service.search(s, q, profile, tag, vector, tenant))


@router.get("/{entry_id}", response_model=KnowledgePublic)
def get_entry(
    entry_id: str, caller: Reader, session: SessionDep, request: Request
) -> KnowledgePublic:
    tenant = tenant_of(caller)
    return public(_service(request).load(session, entry_id, tenant), tenant)


@router.patch("/{entry_id}", response_model=KnowledgePublic)
async def update_entry(
    entry_id: str, body: KnowledgeUpdate, caller: Admin, request: Request
) -> KnowledgePublic:
    """Change an entry (admin); only the fields sent change."""
    db: Database = request.app.state.db
    service = _service(request)
    return await db.run(lambda s: service.update(s, entry_id, body))


@router.delete("/{entry_id}", response_model=KnowledgePublic)
async def retire_entry(entry_id: str, caller: Admin, request: Request) -> KnowledgePublic:
    """Retire an entry (admin): no new call receives it; calls that did keep its id
    (``PATCH`` with ``retired: false`` brings it back)."""
    db: Database = request.app.state.db
    service = _service(request)
    return await db.run(lambda s: service.retire(s, entry_id))
