"""Start and recover runs on the DBOS engine."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID
from sqlmodel import Session

from orchestrator.engine.research import research, research_on
from orchestrator.engine.runtime import current
from orchestrator.engine.steps import evaluate
from orchestrator.engine.workflow import critique_with_retries, guarded, run_workflow
from orchestrator.readmodel.rounds import given_first_rounds
from orchestrator.readmodel.runs import active_run_ids, load_run
from shared.orchestration import (
    Policy,
    RunStatus,
)

GIVEN_WORKFLOW = "crosscheck.given"
AWAITING = RunStatus.awaiting_review.value


async def start_run(run_id: str) -> None:
    """Start the run's workflow; the run id is the workflow id, so a repeat is a no-op."""
    with SetWorkflowID(run_id):
        await DBOS.start_workflow_async(run_workflow, run_id)


async def start_given(run_id: str, critic_first: bool) -> None:
    """Start a given run's workflow (``given_workflow``), keyed by the run id like any run."""
    with SetWorkflowID(run_id):
        await DBOS.start_workflow_async(given_workflow, run_id, critic_first)


async def start_segment(run_id: str, segment_id: str, start_round: int, start_stage: str) -> None:
    """Resume a run after a decision: a new workflow, keyed by the decision, so a repeat of
    the same decision cannot start it twice."""
    with SetWorkflowID(f"{run_id}:{segment_id}"):
        await DBOS.start_workflow_async(run_workflow, run_id, start_round, start_stage)


async def start_orphans(engine: sa.Engine) -> int:
    """Runs stored but never started (a crash between commit and start) are started now; a
    run whose first version was given starts where a given run starts, never at a draft."""
    with Session(engine) as session:
        ids = active_run_ids(session)
        given = {
            run_id: bool(review.get("critic_first"))
            for run_id, review in given_first_rounds(session, ids).items()
        }
    started = 0
    for run_id in ids:
        status = await DBOS.get_workflow_status_async(run_id)
        if status is None:
            if run_id in given:
                await start_given(run_id, given[run_id])
            else:
                await start_run(run_id)
            started += 1
    return started


@DBOS.workflow(name=GIVEN_WORKFLOW)
async def given_workflow(run_id: str, critic_first: bool) -> str:
    """The first segment of a run whose round 1 the caller gave: no Actor draft. Round 1 is
    evaluated (when the run has an evaluator) and put before a person; ``critic_first``: it
    is critiqued first, and a person decides whatever the Critic said (the critique step
    pauses a given version; the gate ships one only by a person). The person's decision
    resumes the run as any decision does (``start_segment``)."""
    return await guarded(run_id, lambda: _given(run_id, critic_first))


async def _given(run_id: str, critic_first: bool) -> str:
    if not critic_first:
        checked = await evaluate(run_id, 1, True)  # opens the review item
        return checked.stopped or AWAITING
    state = await given_state(run_id)
    passed: bool | None = None
    if state["evaluated"]:
        checked = await evaluate(run_id, 1, False)
        if checked.stopped is not None:
            return checked.stopped
        passed = checked.passed
    if state["research"]:
        await research(run_id, 1)
    # the loop's own critique, its environment retries included
    verdict = await critique_with_retries(run_id, 1, None, passed)
    return verdict.stopped or AWAITING  # not stopped: paused for a person


@DBOS.step(name="crosscheck.given_state")
async def given_state(run_id: str) -> dict[str, Any]:
    """What a critic-first given run does before its critique (recorded, so a recovered
    workflow decides the same): evaluate, research."""
    rt = current()

    def read(session: Session) -> dict[str, Any]:
        run = load_run(session, run_id)
        policy = Policy.model_validate(run.policy)
        return {
            "evaluated": run.evaluator != "none",
            "research": research_on(policy, bool(rt.settings.research_url), run.critique_depth),
        }

    return await rt.db.read(read)
