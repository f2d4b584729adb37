"""Review queue API: what waits for a person, and who holds it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Header, Query, Request

from orchestrator.db import Database
from orchestrator.deps import Admin, Reader, Reviewer, SessionDep
from orchestrator.engine.launch import start_segment
from orchestrator.reviews import lessons
from orchestrator.reviews.service import ReviewService
from shared.orchestration import (
    ClaimRequest,
    DecisionRequest,
    DecisionResult,
    JudgementPublic,
    JudgementsRequest,
    LessonPublic,
    ReviewKind,
    ReviewPage,
    ReviewPublic,
    ReviewStatus,
    ReviewSummary,
    Role,
)

router = APIRouter(prefix="/v1/reviews", tags=["reviews"])
service = ReviewService()


@router.get("", response_model=ReviewPage)
def list_reviews(
    caller: Reader,
    session: SessionDep,
    status_filter: Annotated[ReviewStatus | None, Query(alias="status")] = None,
    kind: ReviewKind | None = None,
    run_id: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=20)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> ReviewPage:
    """Review items, newest first; a lapsed claim counts as pending. A service token sees the
    items of its own runs only."""
    return service.list(
        session,
        status=status_filter,
        kind=kind,
        run_id=run_id,
        cursor=cursor,
        limit=limit,
        principal=caller,
    )


@router.get("/{review_id}", response_model=ReviewPublic)
def get_review(review_id: str, caller: Reader, session: SessionDep) -> ReviewPublic:
    """One item with everything needed to decide it."""
    return service.get(session, review_id, caller)


@router.post("/{review_id}/claim", response_model=ReviewSummary)
async def claim_review(
    review_id: str,
    reviewer: Reviewer,
    request: Request,
    body: Annotated[ClaimRequest | None, Body()] = None,
) -> ReviewSummary:
    """Hold an item for a while (claim again to renew); someone else's claim is a 409."""
    db: Database = request.app.state.db
    lease_s = (body or ClaimRequest()).lease_s
    summary = await db.run(lambda s: service.claim(s, reviewer, review_id, lease_s))
    request.app.state.hub.notify()
    return summary


@router.post("/{review_id}/release", response_model=ReviewSummary)
async def release_review(review_id: str, reviewer: Reviewer, request: Request) -> ReviewSummary:
    """Give an item back to the queue: its holder, or an admin whoever holds it (another
    reviewer gets a 409)."""
    db: Database = request.app.state.db
    summary = await db.run(lambda s: service.release(s, reviewer, review_id))
    request.app.state.hub.notify()
    return summary


@router.post("/{review_id}/decision", response_model=DecisionResult)
async def decide_review(
    review_id: str,
    body: DecisionRequest,
    reviewer: Reviewer,
    request: Request,
    idempotency_key: Annotated[
        str | None, Header(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
    ] = None,
) -> DecisionResult:
    """Decide a claimed item: comment, approve, edit, reject, or (escalations) retry."""
    db: Database = request.app.state.db
    result, resume = await db.run(
        lambda s: service.decide(s, reviewer, review_id, body, idempotency_key)
    )
    request.app.state.hub.notify()
    if resume is not None:
        await start_segment(resume.run_id, resume.segment, resume.round, resume.stage)
    return result


@router.post("/{review_id}/judgements", response_model=list[JudgementPublic])
async def judge_critic(
    review_id: str, body: JudgementsRequest, reviewer: Reviewer, request: Request
) -> list[JudgementPublic]:
    """Agree with or dismiss (with a reason) the Critic's issues on an item you hold or
    decided (admins: any); returns every judgement of the item."""
    db: Database = request.app.state.db
    return await db.run(lambda s: service.judge(s, reviewer, review_id, body))


lessons_router = APIRouter(prefix="/v1/lessons", tags=["lessons"])


@lessons_router.get("", response_model=list[LessonPublic])
def list_lessons(
    caller: Reader,
    session: SessionDep,
    scope: Annotated[str | None, Query(max_length=100)] = None,
    include_retired: bool = False,
) -> list[LessonPublic]:
    """Lessons reviewers kept, newest first, with how often runs used them (the knowledge
    entries of kind `lesson`, also listed by `GET /v1/knowledge?kind=lesson`). A service
    sees the lessons of its own runs and those an admin shared (without their source run)."""
    tenant = caller.id if caller.role is Role.service else None
    return lessons.listed(session, scope, include_retired, tenant)


@lessons_router.post("/{lesson_id}/retire", response_model=LessonPublic)
async def retire_lesson(lesson_id: str, reviewer: Reviewer, request: Request) -> LessonPublic:
    """Stop offering a lesson to new runs (runs that used it keep the record)."""
    db: Database = request.app.state.db
    return await db.run(lambda s: lessons.retire(s, lesson_id))


@lessons_router.post("/{lesson_id}/share", response_model=LessonPublic)
async def share_lesson(lesson_id: str, admin: Admin, request: Request) -> LessonPublic:
    """Offer a lesson to every tenant's runs, not only its owner's (admin)."""
    db: Database = request.app.state.db
    return await db.run(lambda s: lessons.share(s, lesson_id))
