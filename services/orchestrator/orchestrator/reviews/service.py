"""Review queue use cases: list, read with context, claim with a lease, release.

A claim is a lease: it lapses by itself at ``lease_expires_at`` (the item is then pending
again for everyone), the holder renews it by claiming again, and nobody else can take the
item while it holds. On Postgres the row is locked for the check-and-set; on SQLite every
write already goes through one thread.
"""

from __future__ import annotations

import builtins
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, or_
from sqlmodel import Session, col, select

from orchestrator.auth.service import Principal
from orchestrator.engine import records, settled
from orchestrator.engine.policy import Stop, output_hash
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.reflections import add_reflection, all_reflections
from orchestrator.readmodel.rounds import add_round, all_rounds, critiques, load_round
from orchestrator.readmodel.rows import change
from orchestrator.readmodel.runs import load_run, reopened, tasks_of
from orchestrator.readmodel.visibility import may_see_review, visible_reviews
from orchestrator.reviews import judgements
from orchestrator.reviews.lessons import promote
from orchestrator.runs.service import parse_cursor
from orchestrator.tables import ReviewItem, Run, utcnow
from orchestrator.webhooks import outbox
from shared.errors import AppError, Conflict, Forbidden, NotFound
from shared.orchestration import (
    DecisionAction,
    DecisionRequest,
    DecisionResult,
    JudgementPublic,
    JudgementsRequest,
    Policy,
    ReviewKind,
    ReviewPage,
    ReviewPublic,
    ReviewStatus,
    ReviewSummary,
    Role,
    RunStatus,
    StopReason,
    comment_points,
)


def decision_hash(decision: DecisionRequest) -> str:
    """What a repeated Idempotency-Key must match: the same decision, field for field."""
    body = json.dumps(decision.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


class Unprocessable(AppError):
    status_code = 422


@dataclass(frozen=True)
class Resume:
    """Where a decided run carries on: a new workflow segment keyed by the review."""

    run_id: str
    segment: str
    round: int
    stage: str


ALLOWED: dict[ReviewKind, tuple[DecisionAction, ...]] = {
    ReviewKind.pre_critique: (
        DecisionAction.comment,
        DecisionAction.approve,
        DecisionAction.edit,
        DecisionAction.reject,
    ),
    ReviewKind.escalation: (
        DecisionAction.comment,
        DecisionAction.retry,
        DecisionAction.approve,
        DecisionAction.edit,
        DecisionAction.reject,
    ),
}


def critic_agreement(
    session: Session, run: Run, round: int, action: DecisionAction
) -> tuple[str | None, bool | None]:
    """The Critic's verdict on the version the person decided on, and whether the person
    agreed: approving is a pass; commenting, editing, rejecting or retrying is not. None
    when the Critic had not judged that version (a review before the critique)."""
    row = load_round(session, run.id, round) if round else None
    verdict = (row.critique or {}).get("verdict") if row is not None else None
    if verdict is None:
        return None, None
    return str(verdict), (verdict == "pass") == (action is DecisionAction.approve)


def effective_status(item: ReviewItem, now: datetime) -> ReviewStatus:
    lease = item.lease_expires_at  # UTCDateTime: aware on every database
    if item.status == ReviewStatus.claimed.value and lease is not None and lease <= now:
        return ReviewStatus.pending  # the lease lapsed: the item is free again
    return ReviewStatus(item.status)


def critic_confidence(session: Session, items: list[ReviewItem]) -> dict[str, float]:
    """Each item's Critic confidence, in one query for the page: its round's critique, or the
    previous round's when its round is not critiqued yet (a review before the critique)."""
    wanted = {(i.run_id, n) for i in items for n in (i.round, i.round - 1) if n >= 1}
    found: dict[tuple[str, int], float] = {}
    for key, critique in critiques(session, wanted).items():
        value = (critique or {}).get("confidence")
        if isinstance(value, int | float):
            found[key] = float(value)
    out: dict[str, float] = {}
    for item in items:
        for number in (item.round, item.round - 1):
            if (item.run_id, number) in found:
                out[item.id] = found[(item.run_id, number)]
                break
    return out


class ReviewService:
    def list(
        self,
        session: Session,
        *,
        status: ReviewStatus | None,
        kind: ReviewKind | None,
        run_id: str | None,
        cursor: str | None,
        limit: int,
        principal: Principal | None = None,
    ) -> ReviewPage:
        now = utcnow()
        claimed = col(ReviewItem.status) == ReviewStatus.claimed.value
        lapsed = and_(claimed, col(ReviewItem.lease_expires_at) <= now)
        query = select(ReviewItem)
        scope = visible_reviews(principal)
        if scope is not None:
            query = query.where(scope)  # a service: its own runs' items
        if status is ReviewStatus.pending:
            query = query.where(or_(col(ReviewItem.status) == status.value, lapsed))
        elif status is ReviewStatus.claimed:
            query = query.where(claimed, col(ReviewItem.lease_expires_at) > now)
        elif status is not None:
            query = query.where(col(ReviewItem.status) == status.value)
        if kind is not None:
            query = query.where(col(ReviewItem.kind) == kind.value)
        if run_id is not None:
            query = query.where(col(ReviewItem.run_id) == run_id)
        if cursor:
            query = query.where(col(ReviewItem.seq) < parse_cursor(cursor))
        rows = list(session.exec(query.order_by(col(ReviewItem.seq).desc()).limit(limit + 1)))
        page, more = rows[:limit], len(rows) > limit
        confidence = critic_confidence(session, page)
        tasks = tasks_of(session, {item.run_id for item in page})
        return ReviewPage(
            items=[
                self._summary(item, tasks.get(item.run_id, ""), now, confidence.get(item.id))
                for item in page
            ],
            next_cursor=str(page[-1].seq) if more and page else None,
        )

    def get(
        self, session: Session, review_id: str, principal: Principal | None = None
    ) -> ReviewPublic:
        item = self._load(session, review_id)
        run = load_run(session, item.run_id)
        if not may_see_review(principal, run):  # another service's run: as if absent
            raise NotFound(f"review {review_id} does not exist")
        summary = self._summary(
            item, run.task, utcnow(), critic_confidence(session, [item]).get(item.id)
        )
        return ReviewPublic(
            **summary.model_dump(),
            context=self._context(session, item, run),
            decision=item.decision,
            judgements=judgements.listed(session, item.id),
        )

    def judge(
        self, session: Session, principal: Principal, review_id: str, body: JudgementsRequest
    ) -> builtins.list[JudgementPublic]:
        """Agree with or dismiss the Critic's issues on an item, before or after deciding."""
        item = self._load(session, review_id, lock=True)
        claimed = effective_status(item, utcnow()) is ReviewStatus.claimed
        judgements.may_judge(item, principal, claimed)
        judgements.record(session, principal, item, body.judgements)
        append_event(
            session,
            item.run_id,
            "review.judged",
            {"review_id": item.id, "by": principal.id, "issues": len(body.judgements)},
        )
        return judgements.listed(session, item.id)

    def claim(
        self, session: Session, principal: Principal, review_id: str, lease_s: int
    ) -> ReviewSummary:
        item = self._load(session, review_id, lock=True)
        now = utcnow()
        status = effective_status(item, now)
        if status in (ReviewStatus.resolved, ReviewStatus.expired):
            raise Conflict(f"review {review_id} is already {status.value}")
        if status is ReviewStatus.claimed and item.claimed_by != principal.id:
            until = item.lease_expires_at
            raise Conflict(
                f"review {review_id} is claimed by {item.claimed_by_name or item.claimed_by} until "
                f"{until.isoformat() if until else 'further notice'}"
            )
        renewal = status is ReviewStatus.claimed
        item.status = ReviewStatus.claimed.value
        item.claimed_by = principal.id
        item.claimed_by_name = principal.name
        item.lease_expires_at = now + timedelta(seconds=lease_s)
        session.add(item)
        append_event(
            session,
            item.run_id,
            "review.renewed" if renewal else "review.claimed",
            {
                "review_id": item.id,
                "by": principal.id,
                "until": item.lease_expires_at.isoformat(),
            },
        )
        return self._summary(item, load_run(session, item.run_id).task, now)

    def release(self, session: Session, principal: Principal, review_id: str) -> ReviewSummary:
        """Give a claimed item back: its holder, or an admin whoever holds it."""
        item = self._load(session, review_id, lock=True)
        now = utcnow()
        if effective_status(item, now) is not ReviewStatus.claimed:
            raise Conflict(f"review {review_id} is not claimed")
        if item.claimed_by != principal.id and principal.role is not Role.admin:
            raise Conflict(
                f"review {review_id} is claimed by {item.claimed_by_name or item.claimed_by}: "
                "only they or an admin can release it"
            )
        by = None if item.claimed_by == principal.id else principal.id
        self._free(session, item, by=by)
        return self._summary(item, load_run(session, item.run_id).task, now)

    def release_claims_of(self, session: Session, holder_id: str) -> int:
        """Give back every item token ``holder_id`` holds (it was revoked): nobody else
        could take them until the lease lapsed. How many it gave back."""
        query = (
            select(ReviewItem)
            .where(
                col(ReviewItem.claimed_by) == holder_id,
                col(ReviewItem.status) == ReviewStatus.claimed.value,
            )
            .with_for_update()
        )
        items = list(session.exec(query))
        for item in items:
            self._free(session, item, by=None, reason="token revoked")
        return len(items)

    @staticmethod
    def _free(
        session: Session, item: ReviewItem, *, by: str | None, reason: str | None = None
    ) -> None:
        holder = item.claimed_by
        item.status = ReviewStatus.pending.value
        item.claimed_by = None
        item.claimed_by_name = None
        item.lease_expires_at = None
        session.add(item)
        data: dict[str, object] = {"review_id": item.id}
        if by is not None or reason is not None:  # not the holder's own release
            data.update(holder=holder, by=by, reason=reason or "released by an admin")
        append_event(session, item.run_id, "review.released", data)

    def decide(
        self,
        session: Session,
        principal: Principal,
        review_id: str,
        decision: DecisionRequest,
        idempotency_key: str | None,
    ) -> tuple[DecisionResult, Resume | None]:
        """Apply a decision; say where the run resumes, if it does."""
        item = self._load(session, review_id, lock=True)
        now = utcnow()
        done = item.decision or {}
        if item.status == ReviewStatus.resolved.value:
            if idempotency_key and done.get("idempotency_key") == idempotency_key:
                if done.get("by") != principal.id:
                    raise Forbidden(
                        "this Idempotency-Key belongs to a decision another reviewer made"
                    )
                if done.get("request_hash") != decision_hash(decision):
                    raise Conflict("this Idempotency-Key was already used for a different decision")
                run = load_run(session, item.run_id)
                result = DecisionResult(
                    review_id=item.id,
                    run_id=item.run_id,
                    action=DecisionAction(done["action"]),
                    run_status=RunStatus(run.status),
                )
                return result, None
            raise Conflict(f"review {review_id} is already resolved ({done.get('action')})")
        status = effective_status(item, now)
        if status is not ReviewStatus.claimed or item.claimed_by != principal.id:
            raise Conflict(f"claim review {review_id} before deciding it")
        allowed = ALLOWED[ReviewKind(item.kind)]
        if decision.action not in allowed:
            raise Unprocessable(
                f"a {item.kind} review takes {', '.join(a.value for a in allowed)}, "
                f"not {decision.action.value}"
            )
        run = load_run(session, item.run_id)
        if run.status != RunStatus.awaiting_review.value and item.kind == "pre_critique":
            raise Conflict(f"run {run.id} is no longer waiting for this review ({run.status})")
        if decision.critic_judgements:
            judgements.record(session, principal, item, decision.critic_judgements)
        author = principal.name
        resume: Resume | None = None
        lesson_id: str | None = None
        if decision.comment:
            add_reflection(session, run.id, item.round, "human", decision.comment, author)
            if decision.lesson:
                lesson_id = promote(
                    session, run, decision.comment, decision.lesson_scope, author
                ).id
        action = decision.action
        final_round = item.round or None
        if action is DecisionAction.edit:
            # The edit is a new version (provenance "human"); the one it replaces stays.
            if load_round(session, run.id, item.round) is None:
                raise Conflict(f"run {run.id} has no output in round {item.round} to edit")
            assert decision.output is not None
            if item.round == run.rounds:  # the version it replaces settles, judged by this edit
                settled.settle(session, judged=True)
            final_round = run.rounds + 1
            edit = {"review_id": item.id, "edited_by": author, "from_round": item.round}
            digest = output_hash(decision.output)
            add_round(
                session,
                run.id,
                final_round,
                decision.output,
                digest,
                provenance="human",
                review=edit,
            )
            change(session, run, rounds=final_round, human_rounds=run.human_rounds + 1)
            append_event(
                session,
                run.id,
                "round.output",
                {
                    "round": final_round,
                    "stage": "edit",
                    "provenance": "human",
                    "output_hash": output_hash(decision.output),
                    "chars": len(decision.output),
                },
            )
            session.flush()
        if action is DecisionAction.approve or (action is DecisionAction.edit and decision.finish):
            stop = Stop(RunStatus.succeeded, StopReason.review_approved, error_class="none")
            records.finalize(session, run, stop, final_round=final_round)
        elif action is DecisionAction.reject:
            stop = Stop(
                RunStatus.failed,
                StopReason.review_rejected,
                detail=decision.comment or f"rejected by {author}",
            )
            records.finalize(session, run, stop, final_round=item.round or None)
        elif action is DecisionAction.retry:
            policy = Policy.model_validate(run.policy)
            policy.max_rounds = min(20, max(run.rounds, policy.max_rounds) + decision.rounds)
            change(session, run, policy=policy.model_dump(mode="json"))
            last = load_round(session, run.id, run.rounds) if run.rounds else None
            if last is not None and last.critique is None:
                # the run stopped before its last version was critiqued (the Critic was down,
                # say): carry on from there, never revise a version nobody has judged
                resume = Resume(run.id, item.id, run.rounds, "critique")
            else:
                resume = Resume(
                    run.id,
                    item.id,
                    run.rounds + 1 if run.rounds else 1,
                    "revise" if run.rounds else "draft",
                )
        elif action is DecisionAction.comment:
            # The comment binds the next revision: it comes next, whatever the item was.
            points = decision.points or comment_points(decision.comment or "")
            change(session, run, binding_points=points, binding_attempts=0)
            resume = Resume(run.id, item.id, run.rounds + 1, "revise")
        else:  # edit and carry on: the critic looks at the edited version now
            resume = Resume(run.id, item.id, final_round or item.round, "critique")
        if resume is not None:
            nxt = RunStatus.critiquing if resume.stage == "critique" else RunStatus.revising
            if resume.stage == "draft":
                nxt = RunStatus.drafting
            reopened(session, run, nxt, round=resume.round, resumed_by=item.id)
        item.status = ReviewStatus.resolved.value
        item.resolved_at = now
        item.lease_expires_at = None
        critic_verdict, agreed = critic_agreement(session, run, item.round, action)
        item.decision = {
            "critic_verdict": critic_verdict,
            "agreed_with_critic": agreed,
            "action": action.value,
            "by": principal.id,
            "author": author,
            "at": now.isoformat(),
            "comment": decision.comment,
            "points": run.binding_points if action is DecisionAction.comment else None,
            "edited": action is DecisionAction.edit,
            "rounds": decision.rounds if action is DecisionAction.retry else None,
            "idempotency_key": idempotency_key,
            "request_hash": decision_hash(decision) if idempotency_key else None,
            "lesson_id": lesson_id,
        }
        session.add(item)
        session.add(run)
        append_event(
            session,
            run.id,
            "review.decided",
            {
                "review_id": item.id,
                "action": action.value,
                "by": principal.id,
                "agreed_with_critic": agreed,
            },
        )
        outbox.review_decided(session, run, item, action.value, author)
        result = DecisionResult(
            review_id=item.id, run_id=run.id, action=action, run_status=RunStatus(run.status)
        )
        return result, resume

    @staticmethod
    def _load(session: Session, review_id: str, *, lock: bool = False) -> ReviewItem:
        query = select(ReviewItem).where(ReviewItem.id == review_id)
        if lock:
            query = query.with_for_update()
        item = session.exec(query).first()
        if item is None:
            raise NotFound(f"review {review_id} does not exist")
        return item

    @staticmethod
    def _summary(
        item: ReviewItem, task: str, now: datetime, confidence: float | None = None
    ) -> ReviewSummary:
        status = effective_status(item, now)
        held = status is ReviewStatus.claimed
        return ReviewSummary(
            id=item.id,
            run_id=item.run_id,
            round=item.round,
            kind=ReviewKind(item.kind),
            status=status,
            reason=item.reason,
            task=task.split("\n", 1)[0][:300],
            claimed_by=item.claimed_by if held else None,
            claimed_by_name=item.claimed_by_name if held else None,
            lease_expires_at=item.lease_expires_at if held else None,
            deadline=item.deadline,
            on_expiry=item.on_expiry if item.deadline is not None else None,
            confidence=confidence,
            created_at=item.created_at,
        )

    @staticmethod
    def _context(session: Session, item: ReviewItem, run: Run) -> dict[str, object]:
        """What a reviewer reads: the task, this round's output beside the previous one,
        evaluator results, earlier critiques and reflections."""
        rounds = all_rounds(session, run.id)
        current = next((r for r in rounds if r.number == item.round), None)
        previous = next((r for r in rounds if r.number == item.round - 1), None)
        return {
            **item.context,
            "task": run.task,
            "kind": run.kind,
            "round": item.round,
            "output": current.output if current else None,
            # who wrote it: the Actor, a reviewer (``human``), or the run's creator (``given``)
            "provenance": current.provenance if current else None,
            "previous_output": previous.output if previous else None,
            "evaluation": current.evaluation if current else None,
            "critiques": [
                {"round": r.number, **r.critique} for r in rounds if r.critique is not None
            ],
            "reflections": [
                {"round": f.round, "source": f.source, "author": f.author, "content": f.content}
                for f in all_reflections(session, run.id)
            ],
        }
