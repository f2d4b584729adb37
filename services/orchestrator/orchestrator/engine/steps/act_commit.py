"""The second half of the act step: the rules that read the Actor's new version (the diff
lock, sourced claims, citations), then one transaction that bills its calls, writes the
round, and applies the shrink and repeat rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from orchestrator.engine import difflock, discipline, guard, research, settled
from orchestrator.engine.policy import Stop, after_output, output_hash, shrank, shrink_ratio
from orchestrator.engine.runtime import Runtime
from orchestrator.engine.sections import Section
from orchestrator.engine.steps.common import Call, bill_calls, finish_run
from orchestrator.engine.steps.outcomes import ActOutcome, StopInfo
from orchestrator.evaluators.base import EvaluationJob, Evaluator
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.reflections import add_reflection
from orchestrator.readmodel.rounds import insert_round, read_round, update_round
from orchestrator.readmodel.runs import RunChanges, RunState, update_run
from shared.contracts import (
    ActorResult,
    CritiqueRequest,
    DraftRequest,
    Evidence,
    ReviseRequest,
)
from shared.orchestration import Policy, RunStatus, StopReason


@dataclass
class ActInput:
    cancelled: bool
    request: DraftRequest | ReviseRequest | None = None
    policy: Policy | None = None  # parsed once, for the whole step
    previous_output: str = ""
    rollback_note: str | None = None
    previous_critique: dict[str, Any] | None = None
    lock: difflock.LockRules | None = None
    drafts: int = 1  # best of N: with the templates each draft's evaluation and critique use
    critique_template: CritiqueRequest | None = None
    job_template: EvaluationJob | None = None
    evaluator: Evaluator | None = None
    sections: list[Section] | None = None  # revise only these flagged sections
    section_record: list[dict[str, Any]] | None = None
    evidence: list[Evidence] | None = None  # the previous round's research: cite only these
    run: RunState | None = None  # the run as this step read it, once


@dataclass(frozen=True)
class ActStep:
    """The act step's own arguments, as the workflow passed them."""

    run_id: str
    round: int
    stage: str
    attempt: int
    reason: str  # why an earlier attempt was rolled back: shrank, over_correction
    cause: str  # what the over-correction broke: evaluation, reopened_issue
    seen_hashes: list[str]

    @property
    def revising(self) -> bool:
        return self.stage == "revise"


@dataclass
class Version:
    """The new version after the rules that read it, before anything is written."""

    output: str
    digest: str
    shrink: float
    locked: difflock.Locked | None = None
    unsourced: list[discipline.Unsourced] | None = None
    citations: dict[str, Any] | None = None
    citation_note: str = ""


async def revised_version(
    rt: Runtime,
    prepared: ActInput,
    request: DraftRequest | ReviseRequest,
    result: ActorResult,
    stage: str,
) -> Version:
    """Apply the diff lock, check claimed sources and citations of a revision."""
    output = result.output
    revising = stage == "revise"
    locked: difflock.Locked | None = None
    if revising and prepared.lock is not None:
        wheres = [r.where for r in result.responses if r.action.value == "applied" and r.where]
        if prepared.evidence:  # asked to add a reference list: the lock keeps its lines
            wheres += research.reference_lines(output)
        locked = await difflock.enforce_off_loop(
            prepared.lock, prepared.previous_output, output, wheres
        )
        output = locked.output
    answered = [r.model_dump(mode="json") for r in result.responses]
    unsourced: list[discipline.Unsourced] = []
    if isinstance(request, ReviseRequest):  # a claimed source is checked against these
        given = discipline.Sources(request.task, request.evidence, request.knowledge)
        unsourced = discipline.unsourced(prepared.previous_critique, answered, output, given)
    version = Version(
        output,
        output_hash(output),
        shrink_ratio(prepared.previous_output, output) if revising else 0.0,
        locked,
        unsourced,
    )
    if revising and prepared.evidence:
        assert prepared.policy is not None
        report, version.citations = research.check_citations(
            output,
            prepared.evidence,
            prepared.previous_output,
            prepared.policy.require_citations,
            task=request.task,
            flagged=[i.quote for i in discipline.numbered(prepared.previous_critique) if i.quote],
        )
        version.citation_note = report.reflection()
        rt.metrics.citation_checks.labels(str(report.ok).lower()).inc()
    return version


def _round_values(
    result: ActorResult,
    version: Version,
    knowledge: list[str],
    rolled_back: list[dict[str, Any]],
    extra: dict[str, Any],
) -> dict[str, Any]:
    return {
        "output": version.output,
        "output_hash": version.digest,
        "uncertainties": result.uncertainties,
        "actor_usage": result.usage.model_dump(mode="json"),
        "rolled_back": rolled_back or None,
        "responses": [r.model_dump(mode="json") for r in result.responses] or None,
        "actor_knowledge": knowledge,
        "reverted_hunks": (version.locked.reverted if version.locked else None) or None,
        "unlocked_output": result.output if version.output != result.output else None,
        "search_queries": result.search_queries or None,
        "citations": version.citations,
        # a hallucination the revision kept without a supporting source holds back a pass
        "unsourced": [
            {"issue": u.issue.id, "quote": u.issue.quote, "reason": u.reason}
            for u in version.unsourced or []
        ]
        or None,
        **extra,
    }


def commit(
    rt: Runtime,
    session: Session,
    step: ActStep,
    prepared: ActInput,
    run: RunState,
    policy: Policy,
    result: ActorResult,
    version: Version,
    calls: list[Call],
    extra: dict[str, Any],
    revised_sections: list[dict[str, Any]] | None,
) -> ActOutcome:
    run_id, round, attempt, revising = step.run_id, step.round, step.attempt, step.revising
    changes = RunChanges({"rounds": max(run.rounds, round)})
    points_open = bool(run.binding_points)
    bill_calls(rt, session, run, changes, round, calls)
    if revised_sections is not None:
        update_round(session, run_id, round - 1, {"sections": revised_sections})
    row = read_round(session, run_id, round)
    rolled_back = list(row.rolled_back or []) if row else []
    if row is not None and attempt > 1 and row.output != version.output:
        rolled_back.append({"attempt": attempt - 1, "output": row.output, "reason": step.reason})
    if prepared.rollback_note and row is not None and attempt > 1:
        add_reflection(session, run_id, round, "evaluator", prepared.rollback_note)
    assert prepared.request is not None
    received = [n.id for n in prepared.request.knowledge]  # what this call's Actor was given
    values = _round_values(result, version, received, rolled_back, extra)
    if row is None and revising and points_open:
        changes.values["human_rounds"] = run.human_rounds + 1  # a person asked for it
    if revising and attempt == 1:
        rt.metrics.revisions.inc()
    elif revising and step.reason == "over_correction":
        rt.metrics.over_corrections.labels(step.cause, "rolled_back").inc()
        values["over_correction"] = {"reason": step.cause, "rollbacks": 1, "kept": "retry"}
    out: dict[str, Any] = {
        "output_hash": version.digest,
        "shrink": version.shrink,
        "run_tokens": changes.tokens(run),
        "run_cost": changes.cost(run),
    }
    stop: Stop | None = None
    too_short = False
    if revising and shrank(policy, out):
        if attempt == 1:
            too_short = True
        else:
            # Still too short after the re-ask: keep the previous version, ask a person.
            values["rolled_back"] = [
                *rolled_back,
                {"attempt": attempt, "output": version.output, "reason": "shrank"},
            ]
            previous = read_round(session, run_id, round - 1)
            assert previous is not None
            values["output"], values["output_hash"] = previous.output, previous.output_hash
            values["unlocked_output"] = None
            stop = Stop(
                RunStatus.escalated,
                StopReason.output_shrank,
                detail=f"round {round} shrank by {version.shrink:.0%} twice; "
                f"kept round {round - 1}",
            )
    if row is None:
        insert_round(session, run_id, round, values)
        if revising:  # the version it revises settles (once: a re-run finds the row)
            settled.revised(session, run_id, round - 1, prepared.previous_critique)
    else:
        update_round(session, run_id, round, values)
    if version.locked is not None and version.locked.reverted:
        guard.record_reverted(rt, session, run_id, round, attempt, version.locked)
    append_event(
        session,
        run_id,
        "round.output",
        {
            "round": round,
            "stage": step.stage,
            "attempt": attempt,
            "output_hash": version.digest,
            "chars": len(version.output),
            "uncertainties": result.uncertainties,
        },
    )
    if not too_short:
        _facts(session, run_id, round, version)
    if stop is None and not too_short:
        stop = after_output(
            policy, round=round, seen_hashes=step.seen_hashes, out=out, points_open=points_open
        )
    if stop is not None:
        update_run(session, run, changes)
        stop = finish_run(rt, session, run_id, stop, round)
    elif too_short:
        update_run(session, run, changes)
    else:
        nxt = RunStatus.evaluating if run.evaluator != "none" else RunStatus.critiquing
        update_run(session, run, changes, status=nxt, event={"round": round})
    return ActOutcome(
        stop=StopInfo.of(stop),
        output_hash=version.digest,
        shrink=version.shrink,
        shrank=too_short,
        policy=policy,
        evaluator=run.evaluator,
        research=research.research_on(policy, bool(rt.settings.research_url), run.critique_depth),
        run_tokens=out["run_tokens"],
        run_cost=out["run_cost"],
    )


def _facts(session: Session, run_id: str, round: int, version: Version) -> None:
    """Facts about the new version, like a failed test: the next revision must fix them."""
    if version.unsourced:  # remove or source the claim
        add_reflection(
            session, run_id, round, "evaluator", discipline.unsourced_note(round, version.unsourced)
        )
        append_event(
            session,
            run_id,
            "round.unsourced_claims",
            {"round": round, "issues": [i.id for i in version.unsourced]},
        )
    if version.citation_note:  # fix its references
        add_reflection(session, run_id, round, "evaluator", version.citation_note[:8000])
