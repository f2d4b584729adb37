"""How a run ends and pauses: through the gate, finished, escalated with its whole context,
or paused for a person. Every row it touches goes through ``orchestrator.readmodel``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlmodel import Session

from orchestrator.engine import gate, settled
from orchestrator.engine.policy import Stop
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.reflections import all_reflections
from orchestrator.readmodel.rounds import RoundState, all_rounds, load_round, read_round
from orchestrator.readmodel.runs import (
    detached,
    finished,
    load_run,
    read_full_run,
    set_status,
    write_columns,
)
from orchestrator.tables import ReviewItem, Round, Run, new_id, utcnow
from orchestrator.webhooks import outbox
from shared.logging import get_logger
from shared.orchestration import GIVEN_PROVENANCE, Policy, RunStatus, ShippedBy

log = get_logger("crosscheck.gate")


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


def finished_data(
    stop: Stop, final_round: int | None, shipped_by: ShippedBy | None = None
) -> dict[str, Any]:
    """The ``run.finished`` event's data."""
    return {
        "status": stop.status.value,
        "stop_reason": stop.reason.value,
        "error_class": stop.error_class,
        "detail": stop.detail,
        "final_round": final_round,
        "shipped_by": shipped_by.value if shipped_by else None,
    }


def through_gate(
    stop: Stop,
    *,
    evaluator: str,
    policy: dict[str, Any],
    binding_points: list[str] | None,
    final: Round | RoundState | None,
) -> tuple[Stop, ShippedBy | None]:
    """A ``succeeded`` stop, past the one gate out (``engine/gate.py``): the same stop and
    which gate let the version out, or an escalation that says why the version cannot ship.
    A version the run's creator gave (provenance ``given``) ships only by a person."""
    if stop.status is not RunStatus.succeeded:
        return stop, None
    if final is not None and final.provenance == GIVEN_PROVENANCE:
        if stop.reason not in gate.PERSON_STOPS:
            # expected, not a defect: the caller asked for a person's decision on their text
            detail = (
                f"round {final.number} is the text the run's creator gave: the Critic passed "
                "it, and it ships only when a person approves it"
            )
            return Stop(RunStatus.escalated, stop.reason, error_class="none", detail=detail), None
    if final is None:
        verdict = gate.Verdict(None, "there is no version to ship")
    else:
        verdict = gate.check(
            reason=stop.reason,
            output_hash=final.output_hash,
            evaluator=evaluator,
            evaluation=final.evaluation,
            critique=final.critique,
            citations=final.citations,
            unsourced=final.unsourced,
            binding_points=binding_points,
            policy=Policy.model_validate(policy),
        )
    if verdict.shipped_by is not None:
        return stop, verdict.shipped_by
    number = final.number if final is not None else None
    log.error(
        "the gate refused to ship a version; escalating",
        stop_reason=stop.reason.value,
        round=number,
        why=verdict.why_not,
    )
    detail = f"round {number} was not shipped: {verdict.why_not} (stop rule {stop.reason.value}"
    detail += f": {stop.detail})" if stop.detail else ")"
    return Stop(RunStatus.escalated, stop.reason, error_class="logic", detail=detail), None


def finalize(session: Session, run: Run, stop: Stop, *, final_round: int | None) -> Stop:
    """Put a run in its final state (a ``succeeded`` one only past the gate); an escalation
    also opens a review item. Returns the stop as applied."""
    final = load_round(session, run.id, final_round) if final_round else None
    stop, shipped_by = through_gate(
        stop,
        evaluator=run.evaluator,
        policy=run.policy,
        binding_points=run.binding_points,
        final=final,
    )
    finished(
        session,
        run,
        final_round=final_round,
        final_output=final.output if final else None,
        shipped_by=shipped_by.value if shipped_by else None,
        stop_reason=stop.reason.value,
        error_class=stop.error_class,
        detail=stop.detail or None,
    )
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
        finished_data(stop, final_round, shipped_by),
    )
    outbox.run_finished(session, run, review=item, context=item.context if item else None)
    return stop


def finalize_fast(
    session: Session, run_id: str, stop: Stop, *, final_round: int | None
) -> tuple[Run, Stop]:
    """``finalize`` in Core statements for a stop that opens no review item (an escalation
    goes through ``finalize``): the same row, the same events in the same order, the same
    webhooks, without the ORM's load and flush (a third of a run's read-model CPU went to
    the flush of this one row and its two events). Returns the finished run, detached, and
    the stop as applied (a ``succeeded`` one only past the gate)."""
    if stop.status is RunStatus.escalated:
        run = load_run(session, run_id)
        return run, finalize(session, run, stop, final_round=final_round)
    if session.new or session.dirty or session.deleted:
        session.flush()  # ORM writes queued earlier in this step keep their place in order
    values = read_full_run(session, run_id)
    final = read_round(session, run_id, final_round) if final_round else None
    stop, shipped_by = through_gate(
        stop,
        evaluator=values["evaluator"],
        policy=values["policy"],
        binding_points=values["binding_points"],
        final=final,
    )
    if stop.status is RunStatus.escalated:  # refused at the gate: a person decides
        run = load_run(session, run_id)
        return run, finalize(session, run, stop, final_round=final_round)
    now = utcnow()
    changes: dict[str, Any] = {
        "final_round": final_round,
        "final_output": final.output if final else None,
        "shipped_by": shipped_by.value if shipped_by else None,
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
        append_event(
            session,
            run_id,
            "run.status",
            {"status": stop.status.value, "stop_reason": stop.reason.value},
        )
    write_columns(session, run_id, changes)
    values.update(changes)
    append_event(
        session,
        run_id,
        "run.finished",
        finished_data(stop, final_round, shipped_by),
    )
    run = detached(values)
    outbox.run_finished(session, run, review=None, context=None)
    return run, stop


def pause_for_review(
    session: Session, run: Run, round: int, reason: str = "before_critique"
) -> None:
    """Open a pre-critique review item for ``round`` and set the run awaiting review (the
    policy's pause, a low-confidence pause, a guard's pause)."""
    policy = Policy.model_validate(run.policy)
    item = ReviewItem(
        id=new_id("rev"),
        run_id=run.id,
        round=round,
        kind="pre_critique",
        status="pending",
        reason=reason,
        deadline=utcnow() + timedelta(seconds=policy.review_deadline_s),
        on_expiry=policy.review_on_expiry.value,
        context={"task": run.task, "round": round},
    )
    session.add(item)
    set_status(session, run, RunStatus.awaiting_review, round=round, review_id=item.id)
    append_event(
        session,
        run.id,
        "review.created",
        {"review_id": item.id, "kind": "pre_critique", "round": round},
    )
    outbox.review_created(session, run, item)
