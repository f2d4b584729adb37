"""The reflection loop as one DBOS workflow: draft -> evaluate -> critique -> revise ...

Only the control flow lives here; it reads nothing but step results, so a workflow that
DBOS recovers after a crash replays to the same point and carries on after the last
finished step. Each step applies the stop rules to what it produced and reports a stop.
"""

from __future__ import annotations

from typing import Any

from dbos import DBOS

from orchestrator.engine.policy import needs_review_before_critique
from orchestrator.engine.steps import act, critique, evaluate, finish, resume_state
from orchestrator.peers.errors import PeerRejected, PeerUnavailable
from shared.orchestration import Policy, RunStatus, StopReason

WORKFLOW_NAME = "crosscheck.run"


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
    return str(result["stop"]["status"])


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
