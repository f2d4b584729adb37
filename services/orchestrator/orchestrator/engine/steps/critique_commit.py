"""The second half of the critique step: the pass re-checked, then one transaction that
bills the Critic's calls, writes the critique, checks the reviewer's binding points, and
applies the stop rules (or records a retry when the Critic blamed the environment)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlmodel import Session

from orchestrator.engine import discipline, guard, records
from orchestrator.engine.policy import (
    ENVIRONMENT_RETRIES,
    after_critique,
    critic_blames_environment,
    critique_signature,
    environment_stop,
)
from orchestrator.engine.runtime import Runtime
from orchestrator.engine.sections import Section
from orchestrator.engine.steps import requests
from orchestrator.engine.steps.common import as_billed, bill_critiques, finish_run, unit
from orchestrator.engine.steps.outcomes import CritiqueOutcome, StopInfo
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.reflections import add_reflection
from orchestrator.readmodel.rounds import update_round
from orchestrator.readmodel.runs import RunChanges, RunState, load_run, update_run
from shared import verdicts
from shared.contracts import CritiqueRequest, CritiqueResult
from shared.orchestration import Policy, ReviewMode, RunStatus
from shared.verdicts import pass_refusals


@dataclass
class CritiqueInput:
    request: CritiqueRequest
    policy: Policy  # parsed once, for the whole step
    previous_critique: dict[str, Any] | None
    responses: list[dict[str, Any]] | None
    reused: tuple[str, CritiqueResult] | None = None
    parts: list[Section] | None = None
    research: dict[str, Any] | None = None  # this round's research step, if it ran
    requested_depth: str | None = None  # the policy's depth, before research degraded it
    citations_failed: bool = False  # this version's references are not the evidence's
    output_hash: str = ""  # the version critiqued
    revised_from: str | None = None  # the previous version, when this is the Actor's revision
    citations_reason: str = ""  # what the failed check found, for the run's detail
    unsourced: list[dict[str, Any]] | None = None  # flagged claims kept without a source
    given: bool = False  # the version is the text the run's creator gave: a person decides
    run: RunState | None = None  # the run as this step read it, once


@dataclass(frozen=True)
class Verdict:
    """The critique step's arguments and the checked verdict document it got."""

    run_id: str
    round: int
    attempt: int
    retry: int
    previous_signature: str | None
    evaluation_passed: bool | None
    doc: dict[str, Any]
    change: float | None  # how much the Actor's revision changed (None: not one)


def checked(
    rt: Runtime, doc: dict[str, Any], min_confidence: float | None, judged_hash: str
) -> dict[str, Any]:
    """The Critic's pass checked again: a pass listing a major or critical issue, an
    off-profile issue, or too little confidence (when no person is asked) is no pass."""
    refusals = pass_refusals(
        doc, dimensions=doc.get("dimensions") or (), min_confidence=min_confidence
    )
    doc = {**verdicts.refused(doc, refusals), "output_hash": judged_hash}
    if doc.get("refused_pass"):
        rt.metrics.refused_passes.inc()
    return doc


def _record_retry(
    rt: Runtime,
    session: Session,
    v: Verdict,
    run: RunState,
    calls: list[tuple[str, CritiqueResult]],
) -> None:
    changes = RunChanges({})
    bill_critiques(rt, session, run, changes, v.round, calls)
    update_run(session, run, changes)
    append_event(
        session,
        v.run_id,
        "round.critique_retried",
        {
            "round": v.round,
            "attempt": v.retry + 1,
            "error_class": v.doc["error_class"],
            "reflection": v.doc["reflection"][:500],
        },
    )


def _held_back(prepared: CritiqueInput) -> list[str]:
    """Why a pass is held back besides the evaluation: citations, unsourced claims."""
    held = [prepared.citations_reason] if prepared.citations_reason else []
    if prepared.unsourced:
        held.append(
            "claim(s) flagged as hallucinations stayed without a supporting source: "
            + ", ".join(str(u.get("issue")) for u in prepared.unsourced)
        )
    return held


async def decide(
    rt: Runtime,
    v: Verdict,
    prepared: CritiqueInput,
    result: CritiqueResult,
    calls: list[tuple[str, CritiqueResult]],
    section_record: list[dict[str, Any]] | None,
) -> CritiqueOutcome:
    """Record the critique and apply the stop rules, in one transaction."""
    assert prepared.run is not None
    run = as_billed(prepared.run)  # read once, at the start
    environment = critic_blames_environment(v.doc)
    if environment and v.retry < ENVIRONMENT_RETRIES:
        rt.metrics.environment_retries.labels("critic").inc()
        await unit(rt, lambda s: _record_retry(rt, s, v, run, calls))
        return CritiqueOutcome(verdict=v.doc["verdict"], retry=True)
    measured = (
        None
        if environment
        else discipline.adoption(prepared.previous_critique, prepared.responses, v.doc)
    )
    if measured is not None:
        rt.metrics.critic_issues.inc(measured.counted)
        rt.metrics.critic_issues_adopted.inc(measured.adopted)
    adoption = measured.share if measured is not None else None
    return await unit(
        rt,
        lambda s: _commit(
            rt, s, v, prepared, run, result, calls, section_record, adoption, environment
        ),
    )


def _commit(
    rt: Runtime,
    session: Session,
    v: Verdict,
    prepared: CritiqueInput,
    run: RunState,
    result: CritiqueResult,
    calls: list[tuple[str, CritiqueResult]],
    section_record: list[dict[str, Any]] | None,
    adoption: float | None,
    environment: bool,
) -> CritiqueOutcome:
    run_id, round, doc, policy = v.run_id, v.round, v.doc, prepared.policy
    signature = critique_signature(doc)
    changes = RunChanges({})
    bill_critiques(rt, session, run, changes, round, calls)
    update_round(
        session,
        run_id,
        round,
        {
            "critique": doc,
            "critic_usage": result.usage.model_dump(mode="json"),
            "adoption": adoption,
            **({"sections": section_record} if section_record is not None else {}),
        },
    )
    reopened = guard.check_reopened(
        session, run_id, round, v.attempt, policy, doc, bool(run.binding_points)
    )
    if reopened is not None and reopened.kept is None:
        update_run(session, run, changes)
        # rolled back: the workflow re-asks the Actor
        return CritiqueOutcome(
            signature=signature, verdict=doc["verdict"], reopened=reopened.issues
        )
    if reopened is not None and reopened.critique is not None:
        doc = reopened.critique  # the previous version stays, with its critique
        signature = critique_signature(doc)
        rt.metrics.over_corrections.labels("reopened_issue", "previous").inc()
    elif reopened is not None:
        rt.metrics.over_corrections.labels("reopened_issue", "current").inc()
    unmet = _binding_checks(session, run, changes, round, doc)
    if not environment and (doc["verdict"] != "pass" or v.evaluation_passed is False):
        add_reflection(session, run_id, round, "critic", requests.critic_reflection(doc))
    append_event(
        session,
        run_id,
        "round.critique",
        {
            "round": round,
            "verdict": doc["verdict"],
            "confidence": doc["confidence"],
            "issues": len(doc["issues"]),
            "error_class": doc["error_class"],
            **({"refused_pass": len(doc["refused_pass"])} if doc.get("refused_pass") else {}),
        },
    )
    decision = {
        **doc,
        "signature": signature,
        "run_tokens": changes.tokens(run),
        "run_cost": changes.cost(run),
    }
    stop = environment_stop(round, v.retry + 1) if environment else None
    stop = stop or after_critique(
        policy,
        round=round,
        critique=decision,
        # invalid citations, or a flagged claim kept without a source, hold back a pass like
        # a failed evaluation
        evaluation_passed=False
        if prepared.citations_failed or prepared.unsourced
        else v.evaluation_passed,
        previous_signature=v.previous_signature,
        human_rounds=run.human_rounds,
        unmet_points=unmet if run.binding_points else [],
        unmet_attempts=run.binding_attempts + 1 if run.binding_points and unmet else 0,
        change_ratio=v.change,
    )
    held_back = _held_back(prepared)
    if stop is not None and stop.status is RunStatus.escalated and held_back:
        # the person deciding sees why a pass was held back, not only that none came
        held = "the critic passed it, but" if doc["verdict"] == "pass" else "also,"
        why = f"round {round}: {held} its " + "; its ".join(held_back)
        stop = replace(stop, detail=f"{stop.detail}; {why}" if stop.detail else why)
    # a pass the critic is unsure of, or of a text the run's creator gave: a person decides
    # whether it ships, and before anyone revises
    ask = "low_confidence" if _unsure(policy, doc) else "critiqued" if prepared.given else None
    if stop is not None and stop.status is RunStatus.succeeded and ask:
        stop = None
    paused = False
    if stop is not None:
        update_run(session, run, changes)
        stop = finish_run(rt, session, run_id, stop, round)
    elif ask:
        paused = True
        update_run(session, run, changes)
        records.pause_for_review(session, load_run(session, run_id), round, reason=ask)
    else:
        update_run(session, run, changes, status=RunStatus.revising, event={"round": round + 1})
    return CritiqueOutcome(
        stop=StopInfo.of(stop), signature=signature, verdict=doc["verdict"], paused=paused
    )


def _unsure(policy: Policy, doc: dict[str, Any]) -> bool:
    return (
        policy.review is ReviewMode.on_low_confidence
        and doc["confidence"] < policy.review_confidence_threshold
    )


def _binding_checks(
    session: Session,
    run: RunState,
    changes: RunChanges,
    round: int,
    doc: dict[str, Any],
) -> list[str]:
    """The Critic's check of the reviewer's binding points: the points it found unmet (a
    reflection for the next revision); all met closes them."""
    unmet = [c["point"] for c in doc["binding_checks"] if not c["satisfied"]]
    if not run.binding_points:
        return unmet
    if not unmet:
        changes.values.update(binding_points=None, binding_attempts=0)
    else:
        changes.values["binding_attempts"] = run.binding_attempts + 1
        text = requests.unmet_points_reflection(unmet)
        add_reflection(session, run.id, round, "critic", text)
    append_event(
        session,
        run.id,
        "round.binding_checks",
        {"round": round, "points": len(doc["binding_checks"]), "unmet": len(unmet)},
    )
    return unmet
