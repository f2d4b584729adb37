"""A reviewer's word on the Critic: agree or dismiss each issue of the critique an item
shows, kept per item and issue (the latest word wins) for the stats and the datasets."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from orchestrator.auth.service import Principal
from orchestrator.readmodel.rounds import load_round
from orchestrator.tables import CriticJudgement, ReviewItem, utcnow
from shared.errors import AppError, Conflict
from shared.orchestration import (
    CriticJudgement as JudgementIn,
)
from shared.orchestration import (
    JudgementPublic,
    JudgementVerdict,
    ReviewStatus,
    Role,
)


class InvalidJudgement(AppError):
    status_code = 422


def judged_critique(session: Session, item: ReviewItem) -> tuple[int, dict[str, Any]] | None:
    """The critique an item's reviewer sees: its round's, or the previous round's when its
    round is not critiqued yet (a review before the critique); None if neither is."""
    for number in (item.round, item.round - 1):
        row = load_round(session, item.run_id, number) if number >= 1 else None
        if row is not None and row.critique is not None:
            return number, row.critique
    return None


def may_judge(item: ReviewItem, principal: Principal, claimed: bool) -> None:
    """The reviewer holding the claim, the one who decided the item, or an admin."""
    if principal.role is Role.admin:
        return
    if claimed and item.claimed_by == principal.id:
        return
    if item.status == ReviewStatus.resolved.value:
        if (item.decision or {}).get("by") == principal.id:
            return
        raise Conflict(f"review {item.id} was decided by someone else: only they can judge it")
    raise Conflict(f"claim review {item.id} before judging the Critic's issues")


def record(
    session: Session, principal: Principal, item: ReviewItem, judgements: list[JudgementIn]
) -> None:
    """Store the judgements; an index outside the critique's issues is a 422 naming it."""
    found = judged_critique(session, item)
    if found is None:
        raise InvalidJudgement(
            f"review {item.id} has no critique to judge: the Critic has not judged round "
            f"{item.round} or the one before"
        )
    number, critique = found
    issues: list[dict[str, Any]] = list(critique.get("issues") or [])
    for judgement in judgements:
        if judgement.issue >= len(issues):
            raise InvalidJudgement(
                f"issue {judgement.issue} does not exist: the critique of round {number} has "
                f"{len(issues)} issue(s), numbered from 0"
            )
    existing = {
        row.issue: row
        for row in session.exec(select(CriticJudgement).where(CriticJudgement.review_id == item.id))
    }
    now = utcnow()
    for judgement in judgements:
        issue = issues[judgement.issue]
        row = existing.get(judgement.issue) or CriticJudgement(
            review_id=item.id,
            run_id=item.run_id,
            round=number,
            issue=judgement.issue,
            verdict=judgement.verdict.value,
            by=principal.id,
        )
        row.verdict = judgement.verdict.value
        row.reason = judgement.reason or None
        row.dimension = str(issue.get("dimension") or "")[:200]
        row.error_type = str(issue.get("error_type") or "other")[:200]
        row.by = principal.id
        row.author = principal.name[:200]
        row.updated_at = now
        session.add(row)
    session.flush()


def public(row: CriticJudgement) -> JudgementPublic:
    return JudgementPublic(
        issue=row.issue,
        round=row.round,
        verdict=JudgementVerdict(row.verdict),
        reason=row.reason,
        dimension=row.dimension,
        error_type=row.error_type,
        author=row.author,
        judged_at=row.updated_at,
    )


def listed(session: Session, review_id: str) -> list[JudgementPublic]:
    query = (
        select(CriticJudgement)
        .where(CriticJudgement.review_id == review_id)
        .order_by(col(CriticJudgement.issue))
    )
    return [public(row) for row in session.exec(query)]


def by_review(session: Session, review_ids: set[str]) -> dict[str, list[CriticJudgement]]:
    """Every judgement of these items, by item, in issue order."""
    out: dict[str, list[CriticJudgement]] = {}
    if not review_ids:
        return out
    query = (
        select(CriticJudgement)
        .where(col(CriticJudgement.review_id).in_(review_ids))
        .order_by(col(CriticJudgement.issue))
    )
    for row in session.exec(query):
        out.setdefault(row.review_id, []).append(row)
    return out
