"""The act step: the Actor drafts (round 1) or revises (later rounds), and the rules that
read a new version run on it (the diff lock, sourced claims, citations, shrink, repeats)."""

from __future__ import annotations

import time
from typing import Any

from dbos import DBOS
from sqlmodel import Session

from orchestrator.engine import drafts, guard, research, sectioned
from orchestrator.engine.runtime import Runtime, current
from orchestrator.engine.steps import requests
from orchestrator.engine.steps.act_commit import ActInput, ActStep, commit, revised_version
from orchestrator.engine.steps.common import (
    CANCELLED,
    Call,
    as_billed,
    cancelled,
    step_budget,
    unit,
    with_retries,
)
from orchestrator.engine.steps.critique import load_critique_request
from orchestrator.engine.steps.outcomes import ActOutcome, StopInfo, read_back
from orchestrator.evaluators.base import EvaluationJob
from orchestrator.readmodel.reflections import read_reflections
from orchestrator.readmodel.rounds import read_round
from orchestrator.readmodel.runs import load_run, read_run
from shared.contracts import ActorResult, DraftRequest, ReviseRequest, TaskKind
from shared.orchestration import Policy


def _prepare(
    rt: Runtime,
    session: Session,
    run_id: str,
    round: int,
    stage: str,
    attempt: int,
    guard_note: str | None,
    vector: list[float] | None,
) -> ActInput:
    run = read_run(session, run_id)
    if cancelled(rt, session, run):
        return ActInput(cancelled=True)
    knowledge = rt.knowledge.for_actor(session, run, stage, vector)  # chosen at the draft
    policy = Policy.model_validate(run.policy)
    if stage == "draft":
        draft = DraftRequest(
            task=run.task, kind=TaskKind(run.kind), entry_point=run.entry_point, knowledge=knowledge
        )
        if policy.drafts == 1:
            return ActInput(False, draft, policy, run=run)
        full = load_run(session, run_id)
        return ActInput(
            False,
            draft,
            policy,
            drafts=policy.drafts,
            critique_template=load_critique_request(
                rt, session, run, policy, "", round, None, vector
            ),
            job_template=EvaluationJob(
                run.kind, "", full.tests, run.entry_point, full.json_schema, full.created_by
            ),
            evaluator=rt.evaluators.get(run.evaluator),
            run=run,
        )
    previous = read_round(session, run_id, round - 1)
    assert previous is not None, "a revision needs the previous round"
    rows = read_reflections(session, run_id)
    reflections = requests.reflections_of(rows)
    evidence = research.evidence_of(previous.research)
    rollback_note = requests.rollback_note(policy, round, attempt, guard_note)
    if rollback_note is not None:
        reflections.append(requests.note(rollback_note))
    unverified = research.unverified_before(session, run_id, round)
    request = requests.revise_request(
        run, previous, reflections, knowledge, evidence, unverified, round
    )
    parts = None
    if policy.section_chars > 0 and not run.binding_points:
        parts = sectioned.plan(previous.output, run.kind, previous.sections)
    return ActInput(
        False,
        request,
        policy,
        previous.output,
        rollback_note,
        previous.critique,
        guard.lock_rules(run, policy, previous, rows, round),
        sections=parts,
        section_record=previous.sections if parts else None,
        evidence=evidence or None,
        run=run,
    )


async def _best_of(
    rt: Runtime, run_id: str, prepared: ActInput, request: DraftRequest
) -> tuple[ActorResult, list[Call], list[Any]]:
    """N drafts, each evaluated and critiqued; the best one is round 1's output."""
    assert prepared.critique_template is not None
    assert prepared.job_template is not None
    candidates = await drafts.make(
        request,
        prepared.drafts,
        run_id=run_id,
        draft=lambda r, k: rt.actor.draft(r, key=k),
        critique=lambda r, k: rt.critic.critique(r, key=k),
        critique_template=prepared.critique_template,
        evaluator=prepared.evaluator,
        job_template=prepared.job_template,
        retry=lambda peer, call: with_retries(rt, peer, call, run_id=run_id),
    )
    chosen = drafts.choose(candidates)
    calls: list[Call] = []
    for c in candidates:
        calls.append((c.key, c.result, "actor", "draft"))
        if c.critique is not None:
            calls.append((c.critic_key, c.critique, "critic", "critique"))
    return chosen.result, calls, drafts.trajectory(candidates, chosen)


async def _ask(
    rt: Runtime, run_id: str, round: int, stage: str, attempt: int, prepared: ActInput
) -> tuple[ActorResult, list[Call], dict[str, Any], list[dict[str, Any]] | None]:
    """The Actor's call(s): one draft or revision, best of N drafts, or one per section.
    Returns the result, the calls to bill, more columns of the round, and the previous
    round's sections as revised."""
    key = f"{run_id}:{round}:actor:{attempt}"
    request = prepared.request
    if isinstance(request, DraftRequest) and prepared.drafts > 1:
        result, calls, trajectory = await _best_of(rt, run_id, prepared, request)
        return result, calls, {"drafts": trajectory}, None
    if isinstance(request, DraftRequest):
        draft = request
        result = await with_retries(
            rt, "actor", lambda: rt.actor.draft(draft, key=key), run_id=run_id
        )
        return result, [(key, result, "actor", stage)], {}, None
    assert isinstance(request, ReviseRequest)
    revise = request
    if prepared.sections and prepared.section_record:
        revised = await sectioned.revise(
            prepared.sections,
            prepared.section_record,
            prepared.previous_critique or {},
            revise,
            run_id=run_id,
            round=round,
            attempt=attempt,
            ask=lambda r, k: rt.actor.revise(r, key=k),
            retry=lambda peer, call: with_retries(rt, peer, call, run_id=run_id),
        )
        result = sectioned.reassemble(prepared.sections, revised)
        per_section: list[Call] = [(k, r, "actor", stage) for _, k, r in revised]
        return result, per_section, {}, sectioned.mark_revised(prepared.section_record, revised)
    result = await with_retries(
        rt, "actor", lambda: rt.actor.revise(revise, key=key), run_id=run_id
    )
    return result, [(key, result, "actor", stage)], {}, None


@DBOS.step(name="crosscheck.act")
@step_budget
async def act_step(
    run_id: str,
    round: int,
    stage: str,
    attempt: int,
    seen_hashes: list[str],
    reason: str = "shrank",
    note: str | None = None,
    cause: str = "evaluation",
) -> dict[str, Any]:
    """Draft (round 1) or revise (later rounds); apply the rules that read a new version.
    A later attempt re-asks after a rollback (``reason``: ``shrank``, or ``over_correction``
    with the guard's ``note``; ``cause``: ``evaluation`` or ``reopened_issue``). Returns an
    ``ActOutcome`` record."""
    rt = current()
    started = time.perf_counter()
    vector = await rt.knowledge.actor_vector(rt.db, run_id, stage)
    prepared = await unit(
        rt, lambda s: _prepare(rt, s, run_id, round, stage, attempt, note, vector)
    )
    if prepared.cancelled:
        return ActOutcome(stop=StopInfo.of(CANCELLED)).record()
    assert prepared.request is not None
    assert prepared.policy is not None
    assert prepared.run is not None
    policy, request = prepared.policy, prepared.request
    result, calls, extra, revised_sections = await _ask(rt, run_id, round, stage, attempt, prepared)
    rt.metrics.stage_latency.labels(stage).observe(time.perf_counter() - started)
    version = await revised_version(rt, prepared, request, result, stage)
    step = ActStep(run_id, round, stage, attempt, reason, cause, seen_hashes)
    run = as_billed(prepared.run)  # read once, at the start
    outcome = await unit(
        rt,
        lambda s: commit(
            rt, s, step, prepared, run, policy, result, version, calls, extra, revised_sections
        ),
    )
    return outcome.record()


act = read_back(ActOutcome)(act_step)  # what the workflow calls: the outcome, typed
