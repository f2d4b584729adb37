"""The evaluate step: the run's evaluator (tests in the sandbox, a JSON schema, ...) judges
the new version. A failure becomes an evaluator reflection: a fact, not an opinion."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from dbos import DBOS
from sqlmodel import Session

from orchestrator.engine import drafts, guard, records
from orchestrator.engine.policy import Stop, output_hash
from orchestrator.engine.runtime import Runtime, current
from orchestrator.engine.steps.common import (
    CANCELLED,
    cancelled,
    step_budget,
    unit,
    with_retries,
)
from orchestrator.engine.steps.outcomes import EvaluateOutcome, StopInfo, read_back
from orchestrator.evaluators.base import EvaluationJob, Evaluator
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.reflections import add_reflection
from orchestrator.readmodel.rounds import load_round, read_round
from orchestrator.readmodel.rows import change
from orchestrator.readmodel.runs import RunChanges, RunState, load_run, state_of, update_run
from shared.orchestration import Policy, RunStatus


@DBOS.step(name="crosscheck.evaluate")
@step_budget
async def evaluate_step(
    run_id: str, round: int, pause_after: bool, attempt: int = 1
) -> dict[str, Any]:
    """Run the evaluator; a failure becomes an evaluator reflection (a fact, not an opinion).
    ``regressed``: this version fails where the previous one passed (the guard re-asks)."""
    rt = current()
    started = time.perf_counter()

    def prepare(
        session: Session,
    ) -> tuple[EvaluationJob, Evaluator | None, dict[str, Any] | None, str | None, RunState] | None:
        run = load_run(session, run_id)
        if cancelled(rt, session, run):
            return None
        row = load_round(session, run_id, round)
        assert row is not None
        job = EvaluationJob(
            run.kind, row.output, run.tests, run.entry_point, run.json_schema, run.created_by
        )
        # best of N evaluated every draft already: the chosen one's evaluation is this round's
        reused = drafts.chosen_evaluation(row.drafts, row.output_hash)
        unlocked = guard.unlocked_candidate(session, run, row)  # when the lock changed it
        # read once: the commit writes this run
        return job, rt.evaluators.get(run.evaluator), reused, unlocked, state_of(run)

    prepared = await unit(rt, prepare)
    if prepared is None:
        return EvaluateOutcome(stop=StopInfo.of(CANCELLED)).record()
    job, evaluator, reused, unlocked, run = prepared
    passed: bool | None = None
    override: guard.LockOverride | None = None
    evaluation: dict[str, Any] | None = None
    # each evaluation records the hash of the version it judged: the gate ships no other on
    # its strength
    if reused is not None:
        passed = bool(reused["passed"])
        evaluation = {**reused, "output_hash": output_hash(job.output)}
    elif evaluator is not None:
        key = f"{run_id}:{round}:evaluator" + (f":{attempt}" if attempt > 1 else "")
        outcome = await with_retries(
            rt, "sandbox", lambda: evaluator.evaluate(job, key=key), run_id=run_id
        )
        passed = outcome.passed
        evaluation = {**outcome.as_dict(), "output_hash": output_hash(job.output)}
        override = await guard.prefer_unlocked(
            evaluation,
            unlocked,
            lambda text: _evaluate_unlocked(rt, evaluator, job, text, key, run_id),
        )
        if override is not None:  # the unlocked revision ships: its evaluation holds its hash
            passed, evaluation = bool(override.evaluation["passed"]), override.evaluation
        rt.metrics.stage_latency.labels("evaluate").observe(time.perf_counter() - started)

    regressed = False

    def commit(session: Session) -> Stop | None:
        nonlocal regressed
        policy = Policy.model_validate(run.policy)
        if evaluation is not None and passed is not None:
            before = read_round(session, run_id, round - 1)
            regressed = before is not None and guard.regressed(policy, before.evaluation, passed)
        if evaluation is not None:
            row = load_round(session, run_id, round)
            assert row is not None
            if override is not None:
                guard.apply_override(session, row, attempt, override)
            change(session, row, evaluation=evaluation)
            if not passed:
                text = f"Round {round} failed evaluation ({run.evaluator}):\n"
                add_reflection(
                    session, run_id, round, "evaluator", text + str(evaluation["summary"])
                )
            append_event(
                session,
                run_id,
                "round.evaluation",
                {"round": round, "passed": passed, "summary": str(evaluation["summary"])[:500]},
            )
        if regressed:
            pass  # the workflow rolls this version back or keeps the better one
        elif pause_after:  # a person's pause: the review item needs the whole row
            records.pause_for_review(session, load_run(session, run_id), round)
        else:
            update_run(
                session, run, RunChanges({}), status=RunStatus.critiquing, event={"round": round}
            )
        return None

    stop = await unit(rt, commit)
    return EvaluateOutcome(
        stop=StopInfo.of(stop),
        passed=passed,
        # the version this round now holds (the unlocked revision, when the lock gave way)
        output_hash=evaluation.get("output_hash") if evaluation else None,
        paused=stop is None and pause_after and not regressed,
        regressed=regressed,
        summary=str(evaluation["summary"]) if evaluation and regressed else "",
    ).record()


evaluate = read_back(EvaluateOutcome)(evaluate_step)  # the outcome, typed


async def _evaluate_unlocked(
    rt: Runtime, evaluator: Evaluator, job: EvaluationJob, output: str, key: str, run_id: str
) -> dict[str, Any]:
    unlocked = replace(job, output=output)
    outcome = await with_retries(
        rt, "sandbox", lambda: evaluator.evaluate(unlocked, key=f"{key}:unlocked"), run_id=run_id
    )
    return outcome.as_dict()
