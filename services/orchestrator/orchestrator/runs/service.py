"""Run use cases. The caller's unit of work commits; this class never does."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from sqlmodel import Session, col, select

from orchestrator.auth.service import Principal
from orchestrator.engine import records
from orchestrator.engine.policy import Stop
from orchestrator.readmodel.calls import calls_of
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.reflections import all_reflections
from orchestrator.readmodel.rounds import all_rounds
from orchestrator.readmodel.runs import (
    created_with_key,
    flag_cancel,
    insert_run,
    load_run,
    newest_runs,
)
from orchestrator.readmodel.visibility import load_visible, visible_runs
from orchestrator.runs import given
from orchestrator.tables import ReviewItem, Run, new_id, utcnow
from orchestrator.webhooks import outbox
from orchestrator.webhooks.service import WebhookRefused
from shared.contracts import Depth, TaskKind
from shared.errors import BadRequest, Conflict
from shared.orchestration import (
    EvaluatorKind,
    Policy,
    ReflectionPublic,
    ReviewStatus,
    RoundPublic,
    RunCreate,
    RunPage,
    RunPublic,
    RunStatus,
    RunSummary,
    ShippedBy,
    StopReason,
    Trajectory,
    TrajectoryCall,
)

MAX_PAGE = 200
MAX_QUERY = 200
_CURSOR = re.compile(r"[0-9]{1,19}")  # ASCII digits only: str.isdigit() also takes '²'


def parse_cursor(cursor: str) -> int:
    """A page cursor (the ``seq`` of the last item seen); anything else is a 400."""
    if not _CURSOR.fullmatch(cursor) or int(cursor) > 2**62:
        raise BadRequest("cursor is not valid: pass the next_cursor of a previous page")
    return int(cursor)


def request_hash(body: RunCreate) -> str:
    # Without a callback_url (locked, given_output, policy.latency_budget_s) the hash is what
    # it was before the field existed.
    skip: dict[str, Any] = {"callback_url": True} if body.callback_url is None else {}
    if not body.locked:
        skip["locked"] = True
    if body.given_output is None:
        skip.update(given_output=True, critic_first=True)
    if body.policy.latency_budget_s is None:
        skip["policy"] = {"latency_budget_s"}
    return hashlib.sha256(
        json.dumps(body.model_dump(mode="json", exclude=skip), sort_keys=True).encode()
    ).hexdigest()


class RunService:
    def create(
        self,
        session: Session,
        principal: Principal,
        body: RunCreate,
        idempotency_key: str | None,
        critique_depth: Depth | None = None,
        traceparent: str | None = None,
    ) -> tuple[Run, bool]:
        """A new run, or the one this key already created (same body) -> (run, created).
        ``critique_depth``: the depth its critiques default to, as resolved from the
        Critic's profiles (None: not resolved); ``traceparent``: the trace its steps join."""
        digest = request_hash(body)
        if idempotency_key:
            existing = created_with_key(session, principal.id, idempotency_key)
            if existing is not None:
                if existing.request_hash != digest:
                    raise Conflict(
                        "this Idempotency-Key was already used for a different request body"
                    )
                return existing, False
        if body.callback_url is not None and not outbox.callbacks_enabled(session):
            raise WebhookRefused(
                "callback_url",
                "callbacks are signed with the platform secret and none is configured: set "
                "ORCHESTRATOR_WEBHOOK_SECRET (whsec_<base64> or at least 24 random bytes) on "
                "the orchestrator, or subscribe through POST /v1/webhooks",
            )
        run = Run(
            id=new_id("run"),
            status=(given.first_status(body) if body.given_output else RunStatus.drafting).value,
            rounds=1 if body.given_output else 0,
            kind=body.kind.value,
            task=body.task,
            tests=body.tests,
            entry_point=body.entry_point,
            evaluator=(body.evaluator or EvaluatorKind.none).value,
            json_schema=body.json_schema,
            policy=body.policy.model_dump(mode="json"),
            idempotency_key=idempotency_key,
            request_hash=digest,
            created_by=principal.id,
            tags=body.tags,
            callback_url=body.callback_url,
            locked=body.locked or None,
            critique_depth=critique_depth.value if critique_depth else None,
            traceparent=traceparent,
        )
        insert_run(session, run)
        if body.given_output is not None:
            given.add_round(session, principal, run, body.given_output, body.critic_first)
        return run, True

    def get(self, session: Session, run_id: str, principal: Principal | None = None) -> RunPublic:
        run = (
            load_run(session, run_id)
            if principal is None
            else load_visible(session, principal, run_id)
        )
        rounds = all_rounds(session, run_id)
        reflections = all_reflections(session, run_id)
        return RunPublic(
            id=run.id,
            status=RunStatus(run.status),
            kind=TaskKind(run.kind),
            task=run.task,
            evaluator=EvaluatorKind(run.evaluator),
            policy=Policy.model_validate(run.policy),
            stop_reason=StopReason(run.stop_reason) if run.stop_reason else None,
            error_class=run.error_class,
            detail=run.detail,
            final_output=run.final_output,
            final_round=run.final_round,
            shipped_by=ShippedBy(run.shipped_by) if run.shipped_by else None,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cost_usd=run.cost_usd,
            models={"actor": run.actor_info or {}, "critic": run.critic_info or {}},
            created_at=run.created_at,
            updated_at=run.updated_at,
            finished_at=run.finished_at,
            tags=run.tags or [],
            lessons_used=run.lessons_used or [],
            actor_knowledge=run.actor_knowledge or [],
            binding_points=run.binding_points or [],
            human_rounds=run.human_rounds,
            locked=run.locked or [],
            rounds=[
                RoundPublic(
                    number=r.number,
                    output=r.output,
                    output_hash=r.output_hash,
                    uncertainties=r.uncertainties or [],
                    evaluation=r.evaluation,
                    critique=r.critique,
                    review=r.review,
                    rolled_back=r.rolled_back or [],
                    adoption=r.adoption,
                    usage={"actor": r.actor_usage, "critic": r.critic_usage},
                    provenance=r.provenance,
                    responses=r.responses or [],
                    actor_knowledge=r.actor_knowledge or [],
                    reverted_hunks=r.reverted_hunks or [],
                    unlocked_output=r.unlocked_output,
                    over_correction=r.over_correction,
                    drafts=r.drafts or [],
                    sections=r.sections or [],
                    search_queries=r.search_queries or [],
                    research=r.research,
                    citations=r.citations,
                    unsourced=r.unsourced or [],
                )
                for r in rounds
            ],
            reflections=[
                ReflectionPublic(
                    round=f.round,
                    source=f.source,
                    author=f.author,
                    content=f.content,
                    created_at=f.created_at,
                )
                for f in reflections
            ],
        )

    def list(
        self,
        session: Session,
        *,
        status: RunStatus | None,
        cursor: str | None,
        limit: int,
        q: str | None = None,
        principal: Principal | None = None,
    ) -> RunPage:
        scope = visible_runs(principal) if principal is not None else None
        before = parse_cursor(cursor) if cursor else None
        rows = newest_runs(session, scope, status, (q or "").strip(), before, limit + 1)
        page, more = rows[:limit], len(rows) > limit
        return RunPage(
            items=[
                RunSummary(
                    id=r.id,
                    status=RunStatus(r.status),
                    kind=TaskKind(r.kind),
                    task=r.task[:300],
                    stop_reason=StopReason(r.stop_reason) if r.stop_reason else None,
                    rounds=r.rounds,
                    created_at=r.created_at,
                    updated_at=r.updated_at,
                )
                for r in page
            ],
            next_cursor=str(page[-1].seq) if more and page else None,
        )

    def request_cancel(
        self, session: Session, run_id: str, principal: Principal
    ) -> tuple[Run, bool]:
        """Flag a run for cancellation -> (run, finished_now).

        A run waiting for a person has no step in flight, so it ends at once and its open
        review items are closed (nobody can claim them any more); otherwise the next step
        sees the flag and ends the run before calling any peer.
        """
        run = load_visible(session, principal, run_id)
        if RunStatus(run.status).final:
            raise Conflict(f"run {run_id} already finished ({run.status})")
        flag_cancel(session, run, principal.id)
        if run.status == RunStatus.awaiting_review.value:
            self.cancel_now(session, run, principal)
            return run, True
        return run, False

    def cancel_now(self, session: Session, run: Run, principal: Principal) -> None:
        """End a run ``cancelled`` at once and close its open review items."""
        stop = Stop(RunStatus.cancelled, StopReason.cancelled, error_class="none")
        records.finalize(session, run, stop, final_round=run.rounds or None)
        now = utcnow()
        open_items = session.exec(
            select(ReviewItem)
            .where(col(ReviewItem.run_id) == run.id)
            .where(
                col(ReviewItem.status).in_([ReviewStatus.pending.value, ReviewStatus.claimed.value])
            )
            .with_for_update()
        )
        for item in open_items:
            item.status = ReviewStatus.resolved.value
            item.resolved_at = now
            item.lease_expires_at = None
            item.decision = {
                "action": "cancelled",
                "by": principal.id,
                "author": principal.name,
                "at": now.isoformat(),
                "critic_verdict": None,
                "agreed_with_critic": None,
            }
            session.add(item)
            append_event(
                session, run.id, "review.closed", {"review_id": item.id, "reason": "cancelled"}
            )

    def cancel_stalled(self, session: Session, run_id: str, principal: Principal) -> Run:
        """End a flagged run that no workflow is driving any more (nothing else would)."""
        run = load_visible(session, principal, run_id)
        if not RunStatus(run.status).final:
            self.cancel_now(session, run, principal)
        return run

    def trajectory(
        self, session: Session, run_id: str, principal: Principal | None = None
    ) -> Trajectory:
        run = (
            load_run(session, run_id)
            if principal is None
            else load_visible(session, principal, run_id)
        )
        calls = calls_of(session, run_id)
        return Trajectory(
            run_id=run.id,
            task=run.task,
            calls=[
                TrajectoryCall(
                    round=c.round,
                    role=c.role,
                    stage=c.stage,
                    usage=c.usage,
                    exchanges=c.exchanges or [],
                    latency_ms=c.latency_ms,
                    created_at=c.created_at,
                )
                for c in calls
            ],
        )
