"""The critique step: the Critic's structured verdict on one version, and only that, drives
the stop rules (``critique_commit``). A critique that blames the environment is asked again
and costs no round."""

from __future__ import annotations

import time
from typing import Any

from dbos import DBOS
from sqlmodel import Session

from orchestrator.engine import discipline, drafts, offloop, research, sectioned
from orchestrator.engine.policy import change_ratio
from orchestrator.engine.runtime import Runtime, current
from orchestrator.engine.steps import critique_commit, requests
from orchestrator.engine.steps.common import CANCELLED, cancelled, step_budget, unit, with_retries
from orchestrator.engine.steps.critique_commit import CritiqueInput
from orchestrator.engine.steps.outcomes import CritiqueOutcome, StopInfo, read_back
from orchestrator.knowledge.service import profile_for
from orchestrator.readmodel.reflections import read_reflections
from orchestrator.readmodel.rounds import read_round
from orchestrator.readmodel.runs import RunState, read_run
from shared.contracts import (
    MAX_EVIDENCE,
    CritiqueRequest,
    CritiqueResult,
    DeclinedIssue,
    Depth,
    Evaluation,
    TaskKind,
)
from shared.orchestration import GIVEN_PROVENANCE, Policy


def load_critique_request(
    rt: Runtime,
    session: Session,
    run: RunState,
    policy: Policy,
    output: str,
    round: int,
    evaluation: Evaluation | None,
    vector: list[float] | None,
    declined: list[DeclinedIssue] | None = None,
) -> CritiqueRequest:
    """The Critic's request for ``output``, with the reviewers' reflections and the
    knowledge chosen for the run's profile."""
    human = read_reflections(session, run.id, source="human")
    profile = profile_for(policy.profile, TaskKind(run.kind))
    knowledge = rt.knowledge.for_critic(session, run, profile, vector)
    return requests.critique_request(
        run, policy, output, round, evaluation, human, knowledge, declined
    )


def _prepare(
    rt: Runtime, session: Session, run_id: str, round: int, vector: list[float] | None
) -> CritiqueInput | None:
    run = read_run(session, run_id)
    if cancelled(rt, session, run):
        return None
    row = read_round(session, run_id, round)
    assert row is not None
    previous = read_round(session, run_id, round - 1)
    evaluation = (
        Evaluation(
            passed=bool(row.evaluation["passed"]), summary=str(row.evaluation["summary"])[:8000]
        )
        if row.evaluation
        else None
    )
    policy = Policy.model_validate(run.policy)
    declined = discipline.declined(previous.critique, row.responses) if previous else []
    request = load_critique_request(
        rt, session, run, policy, row.output, round, evaluation, vector, declined
    )
    # what the author was unsure of: the Critic checks it especially
    request.uncertainties = research.for_critic(row.uncertainties)
    parts = sectioned.parts_of(policy.section_chars, row.output, run.kind)
    if row.research is not None:
        # the evidence goes to the Critic; research that failed leaves it at L1
        update: dict[str, Any] = {
            "evidence": research.evidence_of(row.research)[:MAX_EVIDENCE],
            "research": True,
        }
        if research.is_degraded(row.research):
            update["depth"] = Depth.L1
        request = request.model_copy(update=update)
    # a best-of-N round 1 was critiqued already: the chosen draft's critique is its own
    # (unless a person spoke since, research ran, or the draft is long enough to judge in
    # sections)
    plain = (
        not request.reflections
        and not request.binding_points
        and parts is None
        and row.research is None
    )
    by_actor = previous is not None and row.provenance == "actor"
    return CritiqueInput(
        request,
        policy,
        # adoption measures the Actor's revisions: a person's edit answers no critique
        previous.critique if previous and by_actor else None,
        row.responses,
        reused=drafts.chosen_critique(row.drafts, row.output_hash) if plain else None,
        parts=parts,
        research=row.research,
        requested_depth=policy.depth.value if policy.depth else None,
        citations_failed=row.citations is not None and not row.citations.get("ok", True),
        output_hash=row.output_hash,
        # how much the Actor changed: a small revision that passes its check is the last
        revised_from=previous.output if previous and by_actor and not run.binding_points else None,
        citations_reason=research.citations_reason(row.citations),
        unsourced=row.unsourced,
        given=row.provenance == GIVEN_PROVENANCE,
        run=run,
    )


async def _ask(
    rt: Runtime,
    run_id: str,
    round: int,
    key: str,
    suffix: str,
    prepared: CritiqueInput,
    fresh: bool,
) -> tuple[CritiqueResult, list[tuple[str, CritiqueResult]], dict[str, Any], Any]:
    """The Critic's call(s): reused from best of N, one per section, or one. Returns the
    result (usage summed over sections), the calls to bill, the verdict document, and the
    section record (None: not judged in sections)."""
    request = prepared.request
    if prepared.reused is not None and fresh:
        key, result = prepared.reused
        return (
            result,
            [(key, result)],
            result.model_dump(mode="json", exclude={"usage", "exchanges"}),
            None,
        )
    if prepared.parts is not None:
        calls = await sectioned.critique(
            prepared.parts,
            request,
            run_id=run_id,
            round=round,
            ask=lambda r, k: rt.critic.critique(r, key=k),
            retry=lambda peer, call: with_retries(rt, peer, call, run_id=run_id),
            suffix=suffix,
        )
        results = [r for _, r in calls]
        total = sectioned.total_usage([r.usage for r in results])
        result = results[0].model_copy(update={"usage": total})
        doc = sectioned.merge(prepared.parts, results)
        return result, calls, doc, sectioned.record(prepared.parts, results)
    result = await with_retries(
        rt, "critic", lambda: rt.critic.critique(request, key=key), run_id=run_id
    )
    return (
        result,
        [(key, result)],
        result.model_dump(mode="json", exclude={"usage", "exchanges"}),
        None,
    )


async def _change_ratio(previous: str, now: str) -> float:
    size = len(previous) + len(now)
    return await offloop.sized(size, offloop.CHANGE_RATIO_CHARS, change_ratio, previous, now)


@DBOS.step(name="crosscheck.critique")
@step_budget
async def critique_step(
    run_id: str,
    round: int,
    previous_signature: str | None,
    evaluation_passed: bool | None,
    attempt: int = 1,
    retry: int = 0,
) -> dict[str, Any]:
    """Ask the Critic; its structured verdict, and only that, drives the stop rules.

    A critique blaming the environment is asked again (``retry``: 1, 2, ... under its own
    idempotency key) and costs no round. ``reopened``: this version reopened an issue the
    previous critique had closed (the workflow re-asks the Actor; on a later ``attempt``, the
    version's, the guard keeps the better version). Returns a ``CritiqueOutcome`` record."""
    rt = current()
    started = time.perf_counter()
    vector = await rt.knowledge.run_vector(rt.db, run_id)
    prepared = await unit(rt, lambda s: _prepare(rt, s, run_id, round, vector))
    if prepared is None:
        return CritiqueOutcome(stop=StopInfo.of(CANCELLED)).record()
    suffix = (f":{attempt}" if attempt > 1 else "") + (f":retry{retry}" if retry else "")
    key = f"{run_id}:{round}:critic{suffix}"
    fresh = attempt == 1 and not retry
    result, calls, doc, section_record = await _ask(rt, run_id, round, key, suffix, prepared, fresh)
    if research.is_degraded(prepared.research):
        # the Critic's own degraded flag: this critique is L1 because research failed
        assert prepared.research is not None
        doc = {
            **doc,
            "degraded": True,
            "degraded_reason": doc.get("degraded_reason")
            or research.degraded_reason(prepared.research),
            "depth": Depth.L1.value,
            "requested_depth": prepared.requested_depth or doc.get("requested_depth", ""),
        }
    rt.metrics.stage_latency.labels("critique").observe(time.perf_counter() - started)
    for _, each in calls:
        rt.metrics.critiques.labels(each.profile, each.depth, str(each.degraded).lower()).inc()
    doc = critique_commit.checked(
        rt, doc, prepared.request.min_pass_confidence, prepared.output_hash
    )
    change = (
        await _change_ratio(prepared.revised_from, prepared.request.output)
        if prepared.revised_from is not None
        else None
    )
    verdict = critique_commit.Verdict(
        run_id, round, attempt, retry, previous_signature, evaluation_passed, doc, change
    )
    outcome = await critique_commit.decide(rt, verdict, prepared, result, calls, section_record)
    return outcome.record()


critique = read_back(CritiqueOutcome)(critique_step)  # the outcome, typed
