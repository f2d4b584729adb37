"""Run use cases. The caller's unit of work commits; this class never does."""

from __future__ import annotations

import hashlib
import json

from sqlmodel import Session, col, or_, select

from orchestrator.auth.service import Principal
from orchestrator.engine import records
from orchestrator.engine.policy import Stop
from orchestrator.events.repository import append_event
from orchestrator.tables import ModelCall, Run, new_id, utcnow
from orchestrator.webhooks import outbox
from orchestrator.webhooks.service import WebhookRefused
from shared.contracts import TaskKind
from shared.errors import BadRequest, Conflict
from shared.orchestration import (
    EvaluatorKind,
    Policy,
    ReflectionPublic,
    RoundPublic,
    RunCreate,
    RunPage,
    RunPublic,
    RunStatus,
    RunSummary,
    StopReason,
    Trajectory,
    TrajectoryCall,
)

MAX_PAGE = 200
MAX_QUERY = 200


def request_hash(body: RunCreate) -> str:
    # Without a callback_url the hash is what it was before the field existed.
    skip = {"callback_url"} if body.callback_url is None else None
    return hashlib.sha256(
        json.dumps(body.model_dump(mode="json", exclude=skip), sort_keys=True).encode()
    ).hexdigest()


class RunService:
    def create(
        self, session: Session, principal: Principal, body: RunCreate, idempotency_key: str | None
    ) -> tuple[Run, bool]:
        """A new run, or the one this key already created (same body) -> (run, created)."""
        digest = request_hash(body)
        if idempotency_key:
            existing = session.exec(
                select(Run).where(
                    Run.created_by == principal.id, Run.idempotency_key == idempotency_key
                )
            ).first()
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
            status=RunStatus.drafting.value,
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
        )
        session.add(run)
        append_event(session, run.id, "run.created", {"status": run.status, "kind": run.kind})
        return run, True

    def get(self, session: Session, run_id: str) -> RunPublic:
        run = records.load_run(session, run_id)
        rounds = records.all_rounds(session, run_id)
        reflections = records.all_reflections(session, run_id)
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
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cost_usd=run.cost_usd,
            models={"actor": run.actor_info or {}, "critic": run.critic_info or {}},
            created_at=run.created_at,
            updated_at=run.updated_at,
            finished_at=run.finished_at,
            tags=run.tags or [],
            lessons_used=run.lessons_used or [],
            binding_points=run.binding_points or [],
            human_rounds=run.human_rounds,
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
    ) -> RunPage:
        query = select(Run)
        if status is not None:
            query = query.where(Run.status == status.value)
        needle = (q or "").strip()
        if needle:
            # LIKE wildcards in the search are literal characters (autoescape).
            query = query.where(
                or_(col(Run.id) == needle, col(Run.task).icontains(needle, autoescape=True))
            )
        if cursor:
            if not cursor.isdigit() or int(cursor) > 2**62:
                raise BadRequest("cursor is not valid: pass the next_cursor of a previous page")
            query = query.where(col(Run.seq) < int(cursor))
        rows = list(session.exec(query.order_by(col(Run.seq).desc()).limit(limit + 1)))
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

    def request_cancel(self, session: Session, run_id: str) -> tuple[Run, bool]:
        """Flag a run for cancellation -> (run, finished_now).

        A run waiting for a person has no step in flight, so it ends at once; otherwise the
        next step sees the flag and ends the run before calling any peer.
        """
        run = records.load_run(session, run_id)
        if RunStatus(run.status).final:
            raise Conflict(f"run {run_id} already finished ({run.status})")
        run.cancel_requested = True
        run.updated_at = utcnow()
        session.add(run)
        append_event(session, run.id, "run.cancel_requested", {})
        if run.status == RunStatus.awaiting_review.value:
            stop = Stop(RunStatus.cancelled, StopReason.cancelled, error_class="none")
            records.finalize(session, run, stop, final_round=run.rounds or None)
            return run, True
        return run, False

    def trajectory(self, session: Session, run_id: str) -> Trajectory:
        run = records.load_run(session, run_id)
        calls = session.exec(
            select(ModelCall).where(ModelCall.run_id == run_id).order_by(col(ModelCall.id))
        )
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
