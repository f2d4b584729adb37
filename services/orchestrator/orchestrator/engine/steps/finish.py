"""The steps that end or resume a run outside the loop's own rules: ``finish`` (a peer
down or refusing), and ``resume_state`` (what a resumed segment must know)."""

from __future__ import annotations

from typing import Any

from dbos import DBOS
from sqlmodel import Session

from orchestrator.engine import research
from orchestrator.engine.policy import Stop, critique_signature
from orchestrator.engine.runtime import current
from orchestrator.engine.steps.common import bill_failed, finish_loaded, unit
from orchestrator.engine.steps.outcomes import FinishOutcome, ResumeState, StopInfo, read_back
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.rounds import all_rounds
from orchestrator.readmodel.runs import load_run
from orchestrator.tracing import traced_step
from shared.orchestration import Policy, RunStatus, StopReason


@DBOS.step(name="crosscheck.finish")
@traced_step
async def finish_step(
    run_id: str,
    status: str,
    reason: str,
    error_class: str,
    detail: str,
    failed_call: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """End a run the loop could not carry on (environment failure, a peer's refusal).
    ``failed_call`` (``PeerRejected.billing``): the refused call's model usage, billed to
    the run and counted in the stats like any call."""
    rt = current()

    def work(session: Session) -> dict[str, Any]:
        if failed_call is not None:
            bill_failed(rt, session, run_id, failed_call)
        run = load_run(session, run_id)
        if RunStatus(run.status).final:
            return FinishOutcome(stop=StopInfo(status=run.status, reason=run.stop_reason)).record()
        stop = Stop(RunStatus(status), StopReason(reason), error_class=error_class, detail=detail)
        finish_loaded(rt, session, run, stop, run.rounds or None)
        return FinishOutcome(stop=StopInfo.of(stop)).record()

    result = await unit(rt, work)
    return result


finish = read_back(FinishOutcome)(finish_step)  # the outcome, typed


@DBOS.step(name="crosscheck.resume_state")
async def resume_state_step(run_id: str, round: int, stage: str) -> dict[str, Any]:
    """What a resumed segment needs to apply the same rules the first one did."""
    rt = current()

    def work(session: Session) -> dict[str, Any]:
        rounds = all_rounds(session, run_id)
        upto = round if stage == "critique" else round - 1
        earlier = [r for r in rounds if r.number <= upto]
        before = next((r for r in rounds if r.number == round - 1), None)
        current_round = next((r for r in rounds if r.number == round), None)
        evaluation = current_round.evaluation if current_round and stage == "critique" else None
        # paused after a reopened-issue re-ask (the round's first version was critiqued)
        correction = (current_round.over_correction if current_round else None) or {}
        reasked = stage == "critique" and (correction.get("reason"), correction.get("kept")) == (
            "reopened_issue",
            "retry",
        )
        append_event(session, run_id, "run.resumed", {"round": round, "stage": stage})
        run = load_run(session, run_id)
        policy = Policy.model_validate(run.policy)
        unevaluated = (
            stage == "critique"
            and run.evaluator != "none"
            and current_round is not None
            and (current_round.evaluation or {}).get("output_hash") != current_round.output_hash
        )
        return ResumeState(
            unevaluated=unevaluated,
            research=research.research_on(
                policy, bool(rt.settings.research_url), run.critique_depth
            ),
            hashes=[r.output_hash for r in earlier],
            signature=critique_signature(before.critique) if before and before.critique else None,
            passed=bool(evaluation["passed"]) if evaluation else None,
            reasked=reasked,
        ).record()

    state = await unit(rt, work)
    return state


resume_state = read_back(ResumeState)(resume_state_step)  # the state, typed
