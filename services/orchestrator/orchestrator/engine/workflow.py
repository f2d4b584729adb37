"""The reflection loop as one DBOS workflow: draft -> evaluate -> critique -> revise ...

Only the control flow lives here; it reads nothing but step results, so a workflow that
DBOS recovers after a crash replays to the same point and carries on after the last
finished step. Each step applies the stop rules to what it produced and reports a stop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from dbos import DBOS
from dbos._error import DBOSException
from sqlmodel import Session

from orchestrator.engine import guard, records
from orchestrator.engine.policy import Stop, needs_review_before_critique
from orchestrator.engine.research import research
from orchestrator.engine.runtime import current
from orchestrator.engine.steps import (
    ActOutcome,
    CritiqueOutcome,
    EvaluateOutcome,
    FinishOutcome,
    act,
    critique,
    evaluate,
    finish,
    resume_state,
)
from orchestrator.peers.errors import PeerRejected, PeerUnavailable
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.runs import load_run
from orchestrator.tables import ReviewItem, new_id
from orchestrator.tracing import traced_step
from orchestrator.webhooks import outbox
from shared.errors import BudgetExceeded
from shared.logging import get_logger
from shared.orchestration import RunStatus, StopReason

WORKFLOW_NAME = "crosscheck.run"
# a peer's model answered, unusably (schema, record, cut off by its cap): its own error class
MODEL_OUTPUT_ERRORS = frozenset({"InvalidModelOutput", "OutputTruncated"})
# a peer ran out of its time (its own budget or the step's deadline): not retried
TIME_SPENT = BudgetExceeded.__name__
log = get_logger("crosscheck.workflow")


@DBOS.workflow(name=WORKFLOW_NAME)
async def run_workflow(run_id: str, start_round: int = 1, start_stage: str = "draft") -> str:
    """One segment of a run: from the start, or from where a reviewer's decision resumes it
    (``critique`` of a round a person looked at, or ``revise`` after a retry)."""
    return await guarded(run_id, lambda: _loop(run_id, start_round, start_stage))


async def guarded(run_id: str, segment: Callable[[], Awaitable[str]]) -> str:
    """Run a workflow's ``segment``; a peer that stayed down or refused escalates the run, a
    defect fails it (and opens an item), so no run stays in a working state for ever.
    Returns the run's status at the end of the segment."""
    try:
        return await segment()
    except (PeerUnavailable, PeerRejected) as exc:
        result = await stop_on_peer_error(run_id, exc)
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
        record = await fail_unexpectedly(run_id, type(exc).__name__, str(exc)[:2000])
        result = FinishOutcome.of(record)
    return result.stopped or RunStatus.failed.value


async def stop_on_peer_error(run_id: str, exc: PeerUnavailable | PeerRejected) -> FinishOutcome:
    """Escalate the run for a peer that stayed down (``environment``) or refused: a model's
    unusable answer (``invalid_model_output``), its time spent (``budget_exceeded``), any
    other refusal (``environment``, error class ``logic``), its failed call billed."""
    escalated = RunStatus.escalated.value
    if isinstance(exc, PeerUnavailable):
        return await finish(
            run_id, escalated, StopReason.environment.value, "environment", str(exc)
        )
    if exc.error in MODEL_OUTPUT_ERRORS:
        reason, error_class = StopReason.invalid_model_output, "invalid_model_output"
    elif exc.error == TIME_SPENT:
        reason, error_class = StopReason.budget_exceeded, "environment"
    else:
        reason, error_class = StopReason.environment, "logic"
    return await finish(run_id, escalated, reason.value, error_class, str(exc), exc.billing())


@DBOS.step(name="crosscheck.fail")
@traced_step
async def fail_unexpectedly(run_id: str, error_class: str, message: str) -> dict[str, Any]:
    """End the run ``failed`` (stop reason ``internal_error``, the error's class) and open an
    escalation item so a person sees it and can retry it."""
    rt = current()

    def work(session: Session) -> dict[str, Any]:
        run = load_run(session, run_id)
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


def _backoff(attempt: int) -> float:
    settings = current().settings
    return float(settings.peer_retry_initial_s * settings.peer_retry_backoff ** (attempt - 1))


async def _over_corrected(
    run_id: str, number: int, attempt: int, pause: bool, seen_hashes: list[str], summary: str
) -> ActOutcome | EvaluateOutcome:
    """Round ``number``'s revision broke a passing evaluation: roll it back and re-ask once;
    when the re-asked one breaks it again, keep the better version (``guard.keep_better``)."""
    note = guard.regression_note(number, summary)
    retry = attempt + 1
    out = await act(run_id, number, "revise", retry, seen_hashes[:-1], "over_correction", note)
    if out.stopped is not None:
        return out
    seen_hashes[-1] = out.output_hash
    evaluation = await evaluate(run_id, number, pause, retry)
    seen_hashes[-1] = evaluation.output_hash or seen_hashes[-1]
    if evaluation.stopped is not None or not evaluation.regressed:
        return evaluation
    return EvaluateOutcome.of(await guard.keep_better(run_id, number, retry, "evaluation", pause))


async def _reopened(
    run_id: str,
    number: int,
    attempt: int,
    signature: str | None,
    seen_hashes: list[str],
    issues: list[str],
) -> ActOutcome | EvaluateOutcome | CritiqueOutcome:
    """Round ``number``'s revision reopened issues the previous critique had closed: roll it
    back, re-ask once, evaluate and critique the new version (the critique step keeps the
    better version when it reopens them again). Under ``review: before_critique`` the new
    version waits for a person before its critique, as every version does; the resumed
    segment critiques it as the re-ask (see ``resume_state``)."""
    retry = attempt + 1
    note = guard.reopened_note(number, issues)
    out = await act(
        run_id, number, "revise", retry, seen_hashes[:-1], "over_correction", note, "reopened_issue"
    )
    if out.stopped is not None:
        return out
    seen_hashes[-1] = out.output_hash
    assert out.policy is not None
    pause = needs_review_before_critique(out.policy, number)
    passed: bool | None = None
    if out.evaluator != "none" or pause:
        evaluation = await evaluate(run_id, number, pause, retry)
        if evaluation.stopped is not None or evaluation.paused:
            return evaluation
        passed = evaluation.passed
    return await critique_with_retries(run_id, number, signature, passed, retry)


async def _loop(run_id: str, number: int, stage: str) -> str:
    seen_hashes: list[str] = []
    signature: str | None = None
    passed: bool | None = None
    researching = False  # decided by a step (recorded), so a recovered run decides the same
    reasked = False  # the version a resumed segment critiques is a reopened-issue re-ask
    unevaluated = False  # the version a resumed segment critiques has no evaluation yet
    if stage != "draft":
        state = await resume_state(run_id, number, stage)
        seen_hashes, signature, passed = state.hashes, state.signature, state.passed
        researching, reasked, unevaluated = state.research, state.reasked, state.unevaluated
    while True:
        # A resumed segment does not know which attempts its round used (a shrink re-ask,
        # then an over-correction one: at most 3), so its own re-ask starts past them.
        attempt = 3
        pause = False
        if stage == "critique":  # resumed after a person looked at this round's output
            resumed, stage = True, "revise"
            if unevaluated:  # a person's edit: its evaluator runs before anything ships
                evaluation = await evaluate(run_id, number, False, attempt)
                if evaluation.stopped is not None:
                    return evaluation.stopped
                passed, unevaluated = evaluation.passed, False
        else:
            resumed, attempt = False, 1
            out = await act(run_id, number, stage, 1, seen_hashes)
            if out.shrank:
                attempt = 2
                out = await act(run_id, number, stage, 2, seen_hashes)
            if out.stopped is not None:
                return out.stopped
            seen_hashes.append(out.output_hash)
            assert out.policy is not None
            researching = out.research
            pause = needs_review_before_critique(out.policy, number)
            passed = None
        if not resumed and (out.evaluator != "none" or pause):
            checked: ActOutcome | EvaluateOutcome = await evaluate(run_id, number, pause, attempt)
            if checked.stopped is not None:
                return checked.stopped
            assert isinstance(checked, EvaluateOutcome)
            if checked.output_hash:  # the lock gave way: the revision is this round's
                seen_hashes[-1] = checked.output_hash
            if checked.regressed:
                checked = await _over_corrected(
                    run_id, number, attempt, pause, seen_hashes, checked.summary
                )
                attempt += 1
                if checked.stopped is not None:
                    return checked.stopped
            assert isinstance(checked, EvaluateOutcome)
            if checked.paused:
                return RunStatus.awaiting_review.value
            passed = checked.passed
        if researching:
            await research(run_id, number)  # evidence for this round's critique
        # a re-ask's critique: its own key, and a second reopening keeps the better version
        verdict = await critique_with_retries(
            run_id, number, signature, passed, attempt if reasked else 1
        )
        reasked = False
        if verdict.stopped is not None:
            return verdict.stopped
        if verdict.reopened:
            again = await _reopened(
                run_id, number, attempt, signature, seen_hashes, verdict.reopened
            )
            if again.stopped is not None:
                return again.stopped
            if isinstance(again, EvaluateOutcome):  # the re-ask waits for a person
                return RunStatus.awaiting_review.value
            assert isinstance(again, CritiqueOutcome)
            verdict = again
        if verdict.paused:
            return RunStatus.awaiting_review.value
        signature = verdict.signature
        number, stage = number + 1, "revise"


async def critique_with_retries(
    run_id: str, number: int, signature: str | None, passed: bool | None, attempt: int = 1
) -> CritiqueOutcome:
    """The critique of this version; one that blames the environment is asked again after a
    backoff (same round, its own key) until the critique step gives up and stops the run."""
    verdict = await critique(run_id, number, signature, passed, attempt)
    retry = 0
    while verdict.retry:
        retry += 1
        await DBOS.sleep_async(_backoff(retry))
        verdict = await critique(run_id, number, signature, passed, attempt, retry)
    return verdict
