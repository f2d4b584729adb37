"""Review deadlines: an item nobody decided in time expires, and its run does what the
run's policy says (carry on with the AI critic, or escalate).

The sweep reads the database, so it survives restarts. On Postgres only the leader replica
sweeps (``active``); even two sweepers would be safe: rows are locked with SKIP LOCKED and a
resumed segment is keyed by the review.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sqlmodel import Session, col, select

from orchestrator.db import Database
from orchestrator.engine import records
from orchestrator.engine.launch import start_segment
from orchestrator.engine.policy import Stop
from orchestrator.events.hub import EventHub
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.runs import load_run, set_status
from orchestrator.reviews.service import Resume
from orchestrator.tables import ReviewItem, utcnow
from shared.logging import get_logger
from shared.orchestration import ExpiryAction, ReviewStatus, RunStatus, StopReason

log = get_logger("crosscheck.reviews")


def expire_due(session: Session) -> list[Resume]:
    """Expire every item past its deadline; return the runs that carry on."""
    now = utcnow()
    query = (
        select(ReviewItem)
        .where(
            col(ReviewItem.status).in_([ReviewStatus.pending.value, ReviewStatus.claimed.value]),
            col(ReviewItem.deadline) <= now,
        )
        .with_for_update(skip_locked=True)
        .limit(100)
    )
    resumes: list[Resume] = []
    for item in session.exec(query):
        action = ExpiryAction(item.on_expiry or ExpiryAction.continue_.value)
        item.status = ReviewStatus.expired.value
        item.resolved_at = now
        item.lease_expires_at = None
        item.decision = {"action": "expired", "on_expiry": action.value, "at": now.isoformat()}
        session.add(item)
        append_event(
            session, item.run_id, "review.expired", {"review_id": item.id, "then": action.value}
        )
        run = load_run(session, item.run_id)
        if item.kind != "pre_critique" or run.status != RunStatus.awaiting_review.value:
            continue
        if action is ExpiryAction.escalate:
            stop = Stop(
                RunStatus.escalated,
                StopReason.review_expired,
                detail=f"nobody reviewed round {item.round} before its deadline",
            )
            records.finalize(session, run, stop, final_round=item.round)
        else:
            set_status(session, run, RunStatus.critiquing, round=item.round)
            resumes.append(Resume(run.id, item.id, item.round, "critique"))
    return resumes


class ExpirySweeper:
    def __init__(
        self,
        db: Database,
        hub: EventHub,
        interval_s: float,
        *,
        active: Callable[[], bool] | None = None,
    ) -> None:
        self.db = db
        self.hub = hub
        self.interval_s = interval_s
        self.active = active  # None: always (one process); else only while this is true

    async def sweep(self) -> int:
        resumes = await self.db.run(expire_due)
        for resume in resumes:
            await start_segment(resume.run_id, resume.segment, resume.round, resume.stage)
        if resumes:
            self.hub.notify()
        return len(resumes)

    async def run_forever(self) -> None:
        while True:
            try:
                if self.active is None or self.active():
                    await self.sweep()
            except Exception:
                log.exception("review expiry sweep failed")
            await asyncio.sleep(self.interval_s)
