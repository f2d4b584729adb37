"""Read-model writes the steps share: status changes, finishing a run, escalation context."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from orchestrator.engine import settled, store
from orchestrator.engine.policy import Stop
from orchestrator.events.repository import append_event
from orchestrator.tables import Reflection, ReviewItem, Round, Run, new_id, utcnow
from orchestrator.webhooks import outbox
from shared.errors import NotFound
from shared.orchestration import RunStatus


def load_run(session: Session, run_id: str) -> Run:
    run = session.exec(select(Run).where(Run.id == run_id)).first()
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


def load_round(session: Session, run_id: str, number: int) -> Round | None:
    return session.exec(select(Round).where(Round.run_id == run_id, Round.number == number)).first()


def all_rounds(session: Session, run_id: str) -> list[Round]:
    return list(
        session.exec(select(Round).where(Round.run_id == run_id).order_by(col(Round.number)))
    )


def all_reflections(session: Session, run_id: str) -> list[Reflection]:
    query = select(Reflection).where(Reflection.run_id == run_id)
    return list(session.exec(query.order_by(col(Reflection.round), col(Reflection.id))))


def set_status(session: Session, run: Run, status: RunStatus, **data: Any) -> None:
    if run.status == status.value:
        return
    run.status = status.value
    run.updated_at = utcnow()
    session.add(run)
    append_event(session, run.id, "run.status", {"status": status.value, **data})


def escalation_context(session: Session, run: Run, stop: Stop) -> dict[str, Any]:
    """Everything a person needs to decide, in one document."""
    return {
        "task": run.task,
        "kind": run.kind,
        "tests": run.tests,
        "entry_point": run.entry_point,
        "stop_reason": stop.reason.value,
        "error_class": stop.error_class,
        "detail": stop.detail,
        "binding_points": run.binding_points or [],
        "rounds": [
            {
                "number": r.number,
                "provenance": r.provenance,
                "output": r.output,
                "responses": r.responses or [],
                "rolled_back": r.rolled_back or [],
                "evaluation": r.evaluation,
                "critique": r.critique,
                "review": r.review,
                "research": r.research,
                "citations": r.citations,
                "reverted_hunks": r.reverted_hunks or [],
                "over_correction": r.over_correction,
                "drafts": r.drafts or [],
                "sections": r.sections or [],
                "actor_knowledge": r.actor_knowledge or [],
            }
            for r in all_rounds(session, run.id)
        ],
        "reflections": [
            {"round": f.round, "source": f.source, "author": f.author, "content": f.content}
            for f in all_reflections(session, run.id)
        ],
    }


def finished_data(stop: Stop, final_round: int | None) -> dict[str, Any]:
    """The ``run.finished`` event's data."""
    return {
        "status": stop.status.value,
        "stop_reason": stop.reason.value,
        "error_class": stop.error_class,
        "detail": stop.detail,
        "final_round": final_round,
    }


def finalize(session: Session, run: Run, stop: Stop, *, final_round: int | None) -> None:
    """Put a run in its final state; an escalation also opens a review item."""
    final = load_round(session, run.id, final_round) if final_round else None
    run.final_round = final_round
    run.final_output = final.output if final else None
    run.stop_reason = stop.reason.value
    run.error_class = stop.error_class
    run.detail = stop.detail or None
    run.finished_at = utcnow()
    if stop.status is RunStatus.succeeded and run.status != stop.status.value:
        settled.shipped(session, run.id, final, rounds=run.rounds, reason=stop.reason)
    set_status(session, run, stop.status, stop_reason=stop.reason.value)
    item: ReviewItem | None = None
    if stop.status is RunStatus.escalated:
        item = ReviewItem(
            id=new_id("rev"),
            run_id=run.id,
            round=final_round or 0,
            kind="escalation",
            status="pending",
            reason=stop.reason.value,
            context=escalation_context(session, run, stop),
        )
        session.add(item)
        append_event(
            session, run.id, "review.created", {"review_id": item.id, "kind": "escalation"}
        )
        outbox.review_created(session, run, item)
    append_event(
        session,
        run.id,
        "run.finished",
        finished_data(stop, final_round),
    )
    outbox.run_finished(session, run, review=item, context=item.context if item else None)


_SELECT_FULL_RUN = sa.select(store.RUNS).where(store.RUNS.c.id == sa.bindparam("run_id"))


def finalize_fast(session: Session, run_id: str, stop: Stop, *, final_round: int | None) -> Run:
    """``finalize`` in Core statements for a stop that opens no review item (an escalation
    goes through ``finalize``): the same row, the same events in the same order, the same
    webhooks, without the ORM's load and flush (a third of a run's read-model CPU went to
    the flush of this one row and its two events). Returns the finished run, detached."""
    if stop.status is RunStatus.escalated:
        run = load_run(session, run_id)
        finalize(session, run, stop, final_round=final_round)
        return run
    if session.new or session.dirty or session.deleted:
        session.flush()  # ORM writes queued earlier in this step keep their place in order
    conn = session.connection()
    row = conn.execute(_SELECT_FULL_RUN, {"run_id": run_id}).first()
    if row is None:
        raise NotFound(f"run {run_id} does not exist")
    values = row._asdict()
    final = store.load_round(session, run_id, final_round) if final_round else None
    now = utcnow()
    changes: dict[str, Any] = {
        "final_round": final_round,
        "final_output": final.output if final else None,
        "stop_reason": stop.reason.value,
        "error_class": stop.error_class,
        "detail": stop.detail or None,
        "finished_at": now,
        "updated_at": now,
    }
    if stop.status is RunStatus.succeeded and values["status"] != stop.status.value:
        settled.shipped(session, run_id, final, rounds=values["rounds"], reason=stop.reason)
    if values["status"] != stop.status.value:
        changes["status"] = stop.status.value
        store.append_event(
            session,
            run_id,
            "run.status",
            {"status": stop.status.value, "stop_reason": stop.reason.value},
        )
    conn.execute(store.UPDATE_RUN, {"_id": run_id, **changes})
    values.update(changes)
    store.append_event(
        session,
        run_id,
        "run.finished",
        finished_data(stop, final_round),
    )
    run = Run(**values)  # transient: what the webhooks read, never added to the session
    outbox.run_finished(session, run, review=None, context=None)
    return run
