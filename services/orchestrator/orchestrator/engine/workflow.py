"""The reflection loop as one DBOS workflow: draft -> evaluate -> critique -> revise ...

Only the control flow lives here; it reads nothing but step results, so a workflow that
DBOS recovers after a crash replays to the same point and carries on after the last
finished step. Each step applies the stop rules to what it produced and reports a stop.
"""

from __future__ import annotations

from typing import Any

from dbos import DBOS
from dbos._error import DBOSException
from sqlmodel import Session

from orchestrator.engine import records
from orchestrator.engine.policy import Stop, needs_review_before_critique
from orchestrator.engine.runtime import current
from orchestrator.engine.steps import act, critique, evaluate, finish, resume_state
from orchestrator.events.repository import append_event
from orchestrator.peers.errors import PeerRejected, PeerUnavailable
from orchestrator.tables import ReviewItem, new_id
from orchestrator.webhooks import outbox
from shared.logging import get_logger
from shared.orchestration import Policy, RunStatus, StopReason

WORKFLOW_NAME = "crosscheck.run"
log = get_logger("crosscheck.workflow")


@DBOS.workflow(name=WORKFLOW_NAME)
async def run_workflow(run_id: str, start_round: int = 1, start_stage: str = "draft") -> str:
    """One segment of a run: from the start, or from where a reviewer's decision resumes it
    (``critique`` of a round a person looked at, or ``revise`` after a retry)."""
    try:
        return await _loop(run_id, start_round, start_stage)
    except PeerUnavailable as exc:
        result = await finish(
            run_id, RunStatus.escalated.value, StopReason.environment.value, "environment", str(exc)
        )
    except PeerRejected as exc:
        reason = (
            StopReason.invalid_model_output
            if exc.error == "InvalidModelOutput"
            else StopReason.environment
        )
        result = await finish(run_id, RunStatus.escalated.value, reason.value, "logic", str(exc))
    except DBOSException:
        raise  # the engine's own (cancellation, conflicts): DBOS handles them
    except Exception as exc:
        # A defect, not a decision: the run must not stay in a working state for ever.
        log.error(
            "run failed on an unexpected error",
            run_id=run_id,
            error_class=type(exc).__name__,
            error=str(exc)[:500],
            exc_info=True,
        )
        result = await fail_unexpectedly(run_id, type(exc).__name__, str(exc)[:2000])
    return str(result["stop"]["status"])


@DBOS.step(name="crosscheck.fail")
async def fail_unexpectedly(run_id: str, error_class: str, message: str) -> dict[str, Any]:
    """End the run ``failed`` (stop reason ``internal_error``, the error's class) and open an
    escalation item so a person sees it and can retry it."""
    rt = current()

    def work(session: Session) -> dict[str, Any]:
        run = records.load_run(session, run_id)
        if RunStatus(run.status).final:
            return {"stop": {"status": run.status, "reason": run.stop_reason}}
        stop = Stop(
            RunStatus.failed,
            StopReason.internal_error,
            error_class=error_class,
            detail=f"{error_class}: {message}",
        )
        records.finalize(session, run, stop, final_round=run.rounds or None)
        item = ReviewItem(
            id=new_id("rev"),
            run_id=run.id,
            round=run.rounds or 0,
            kind="escalation",
            status="pending",
            reason=StopReason.internal_error.value,
            context=records.escalation_context(session, run, stop),
        )
        session.add(item)
        append_event(
            session, run.id, "review.created", {"review_id": item.id, "kind": "escalation"}
        )
        outbox.review_created(session, run, item)
        return {"stop": {"status": stop.status.value, "reason": stop.reason.value}}

    result = await rt.db.run(work)
    rt.hub.notify()
    rt.metrics.runs_finished.labels(RunStatus.failed.value, StopReason.internal_error.value).inc()
    return result


def _stopped(result: dict[str, Any]) -> str | None:
    stop = result.get("stop")
    return str(stop["status"]) if stop else None


async def _loop(run_id: str, number: int, stage: str) -> str:
    seen_hashes: list[str] = []
    signature: str | None = None
    passed: bool | None = None
    if stage != "draft":
        state = await resume_state(run_id, number, stage)
        seen_hashes, signature, passed = state["hashes"], state["signature"], state["passed"]
    while True:
        if stage == "critique":  # resumed after a person looked at this round's output
            resumed, stage = True, "revise"
        else:
            resumed = False
            out = await act(run_id, number, stage, 1, seen_hashes)
            if out.get("shrank"):
                out = await act(run_id, number, stage, 2, seen_hashes)
            if (status := _stopped(out)) is not None:
                return status
            seen_hashes.append(out["output_hash"])
            policy = Policy.model_validate(out["policy"])
            pause = needs_review_before_critique(policy, number)
            passed = None
        if not resumed and (out["evaluator"] != "none" or pause):
            evaluation = await evaluate(run_id, number, pause)
            if (status := _stopped(evaluation)) is not None:
                return status
            if evaluation["paused"]:
                return RunStatus.awaiting_review.value
            passed = evaluation["passed"]
        verdict = await critique(run_id, number, signature, passed)
        if (status := _stopped(verdict)) is not None:
            return status
        if verdict.get("paused"):
            return RunStatus.awaiting_review.value
        signature = verdict["signature"]
        number, stage = number + 1, "revise"
