"""Start and recover runs on the DBOS engine."""

from __future__ import annotations

import sqlalchemy as sa
from dbos import DBOS, SetWorkflowID
from sqlmodel import Session, select

from orchestrator.engine.workflow import run_workflow
from orchestrator.tables import Run
from shared.orchestration import FINAL_STATUSES, RunStatus


async def start_run(run_id: str) -> None:
    """Start the run's workflow; the run id is the workflow id, so a repeat is a no-op."""
    with SetWorkflowID(run_id):
        await DBOS.start_workflow_async(run_workflow, run_id)


async def start_segment(run_id: str, segment_id: str, start_round: int, start_stage: str) -> None:
    """Resume a run after a decision: a new workflow, keyed by the decision, so a repeat of
    the same decision cannot start it twice."""
    with SetWorkflowID(f"{run_id}:{segment_id}"):
        await DBOS.start_workflow_async(run_workflow, run_id, start_round, start_stage)


async def start_orphans(engine: sa.Engine) -> int:
    """Runs stored but never started (a crash between commit and start) are started now."""
    active = [
        s.value for s in RunStatus if s not in FINAL_STATUSES and s is not RunStatus.awaiting_review
    ]
    with Session(engine) as session:
        ids = list(session.exec(select(Run.id).where(sa.column("status").in_(active))))
    started = 0
    for run_id in ids:
        status = await DBOS.get_workflow_status_async(run_id)
        if status is None:
            await start_run(run_id)
            started += 1
    return started
