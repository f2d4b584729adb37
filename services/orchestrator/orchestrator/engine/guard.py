"""Revision discipline around the act step: the diff lock's inputs and the over-correction
guard.

A revision over-corrects when it turns a passing evaluation into a failing one (the previous
version passed its evaluator, this one fails) or reopens an issue the previous critique had
closed (raised in round N-2, gone in N-1, raised again in N). The workflow rolls such a
revision back and re-asks the Actor once, with an evaluator reflection that says what broke;
when the re-asked revision breaks it again, the better of the two versions stays (a passing
evaluation wins; else fewer and less severe critic issues: :func:`keep_better` after an
evaluation, :func:`check_reopened` inside the critique step) and the round records
``over_correction``. Every decision reads step results or the database inside a
step, so a recovered workflow decides the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dbos import DBOS
from sqlmodel import Session

from orchestrator.engine import difflock, records, store
from orchestrator.engine.runtime import Runtime, current
from orchestrator.events.repository import append_event, appended_types
from orchestrator.tables import utcnow
from shared.orchestration import Policy, RunStatus

SEVERITY_WEIGHT = {"critical": 100, "major": 10, "minor": 1}


# ------------------------------------------------------------------------ diff lock


def lock_rules(
    run: store.RunState,
    policy: Policy,
    previous: store.RoundState,
    reflections: list[store.ReflectionRow],
    round: int,
) -> difflock.LockRules:
    """What bounds round ``round``'s revision of ``previous``. A person's open points or
    comments on the previous version, or its failed evaluation, leave it unbounded: either
    may ask for a change anywhere (locked regions still hold)."""
    human = any(r.source == "human" and r.round >= round - 1 for r in reflections)
    failed = bool(previous.evaluation) and not (previous.evaluation or {}).get("passed")
    unbounded = bool(run.binding_points) or human or failed
    quotes = difflock.critique_quotes(previous.critique, previous.output, unbounded=unbounded)
    return difflock.LockRules(enabled=policy.diff_lock, quotes=quotes, locked=run.locked or [])


def record_reverted(
    rt: Runtime,
    session: Session,
    run_id: str,
    round: int,
    attempt: int,
    locked: difflock.Locked,
) -> None:
    """The ``round.reverted`` event (counts only: the hunks are on the round)."""
    reasons = [h["reason"] for h in locked.reverted]
    for reason in set(reasons):
        rt.metrics.reverted_hunks.labels(reason).inc(reasons.count(reason))
    store.append_event(
        session,
        run_id,
        "round.reverted",
        {
            "round": round,
            "attempt": attempt,
            "hunks": locked.hunks,
            "reverted": len(reasons),
            "outside_flagged": reasons.count("outside_flagged"),
            "locked": reasons.count("locked"),
        },
    )


# ------------------------------------------------------------------------ over-correction


def regressed(policy: Policy, previous_evaluation: dict[str, Any] | None, passed: bool) -> bool:
    """This version fails an evaluation the previous version passed (and the guard is on)."""
    return (
        policy.over_correction_guard
        and not passed
        and bool(previous_evaluation)
        and bool((previous_evaluation or {}).get("passed"))
    )


def regression_note(round: int, summary: str) -> str:
    return (
        f"Your revision in round {round} broke an evaluation the previous version passed and "
        f"was rolled back. What broke:\n{summary[:2000]}\n"
        "Revise the previous version again: keep everything that made it pass and change "
        "only what the reflections ask for."
    )


def issue_weight(critique: dict[str, Any] | None) -> int:
    """Fewer and less severe issues weigh less (a critical outweighs many minors)."""
    return sum(
        SEVERITY_WEIGHT.get(i.get("severity", "minor"), 1)
        for i in (critique or {}).get("issues", [])
    )


def better(previous: store.RoundState, current: dict[str, Any]) -> str:
    """``previous`` or ``current``: a passing evaluation wins, else the lighter critique."""
    before = bool((previous.evaluation or {}).get("passed"))
    now = bool((current.get("evaluation") or {}).get("passed"))
    if before != now:
        return "previous" if before else "current"
    if current.get("critique") is None or previous.critique is None:
        return "previous"  # the current version is not critiqued yet: the one we know wins
    return (
        "current"
        if issue_weight(current["critique"]) < issue_weight(previous.critique)
        else "previous"
    )


@DBOS.step(name="crosscheck.keep_better")
async def keep_better(
    run_id: str, round: int, attempt: int, reason: str, pause_after: bool
) -> dict[str, Any]:
    """The re-asked revision over-corrected again: keep the better version for this round
    and record ``over_correction`` on it. Returns the kept version's evaluation result."""
    rt = current()

    def work(session: Session) -> tuple[dict[str, Any], frozenset[str]]:
        previous = store.load_round(session, run_id, round - 1)
        row = records.load_round(session, run_id, round)
        assert previous is not None
        assert row is not None
        kept = better(previous, {"evaluation": row.evaluation, "critique": row.critique})
        record = {
            "reason": reason,
            "rollbacks": 2,
            "kept": kept,
            "kept_round": round - 1 if kept == "previous" else round,
            "summary": str((row.evaluation or {}).get("summary", ""))[:500],
        }
        if kept == "previous":
            row.rolled_back = [
                *(row.rolled_back or []),
                {"attempt": attempt, "output": row.output, "reason": reason},
            ]
            row.output, row.output_hash = previous.output, previous.output_hash
            row.evaluation = previous.evaluation
        row.over_correction = record
        row.updated_at = utcnow()
        session.add(row)
        append_event(session, run_id, "round.over_correction", {"round": round, **record})
        session.flush()
        run = records.load_run(session, run_id)
        paused = False
        if not RunStatus(run.status).final:
            if pause_after:
                from orchestrator.engine.steps import pause_for_review

                pause_for_review(session, run, round)
                paused = True
            else:
                records.set_status(session, run, RunStatus.critiquing, round=round)
        passed = bool((row.evaluation or {}).get("passed")) if row.evaluation else None
        result = {"passed": passed, "kept": kept, "paused": paused}
        return result, appended_types(session)

    result, types = await rt.db.run(work)
    rt.hub.notify(types)
    rt.metrics.over_corrections.labels(reason, str(result["kept"])).inc()
    return result


# ------------------------------------------------------------------------ reopened issues


def _issue_key(issue: dict[str, Any]) -> tuple[str, str]:
    return str(issue.get("dimension", "")), str(issue.get("quote") or issue.get("suggestion", ""))


def reopened_issues(
    before_last: dict[str, Any] | None, last: dict[str, Any] | None, now: dict[str, Any]
) -> list[str]:
    """Issues of ``now`` that ``before_last`` raised and ``last`` no longer did (the same
    dimension and quote, or suggestion when there is no quote)."""
    if not before_last or not last:
        return []
    closed = {_issue_key(i) for i in before_last.get("issues", [])} - {
        _issue_key(i) for i in last.get("issues", [])
    }
    return [
        f"[{i.get('severity', '')}] {i.get('dimension', '')}: {i.get('suggestion', '')}"
        + (f' (on: "{str(i["quote"])[:200]}")' if i.get("quote") else "")
        for i in now.get("issues", [])
        if _issue_key(i) in closed
    ]


def reopened_note(round: int, issues: list[str]) -> str:
    return (
        f"Your revision in round {round} reopened issues the previous critique had closed "
        "and was rolled back. Reopened:\n" + "\n".join(issues)[:2000] + "\n"
        "Revise the previous version again: keep the fixes it already had and change only "
        "what the reflections ask for."
    )


@dataclass
class Reopened:
    issues: list[str]
    kept: str | None = None  # the second time: "previous" or "current"
    critique: dict[str, Any] | None = None  # the kept previous version's critique


def check_reopened(
    session: Session,
    run_id: str,
    round: int,
    attempt: int,
    policy: Policy,
    doc: dict[str, Any],
    points_open: bool,
) -> Reopened | None:
    """Inside the critique step: did this version reopen a closed issue? The first time the
    workflow re-asks; the second time the better version is kept here and recorded."""
    if not policy.over_correction_guard or points_open or round < 3 or doc["verdict"] == "pass":
        return None
    previous = store.load_round(session, run_id, round - 1)
    before_last = store.load_round(session, run_id, round - 2)
    if previous is None or before_last is None:
        return None
    issues = reopened_issues(before_last.critique, previous.critique, doc)
    if not issues:
        return None
    if attempt == 1:
        return Reopened(issues)
    row = store.load_round(session, run_id, round)
    assert row is not None
    kept = better(previous, {"evaluation": row.evaluation, "critique": doc})
    record = {
        "reason": "reopened_issue",
        "rollbacks": 2,
        "kept": kept,
        "kept_round": round - 1 if kept == "previous" else round,
        "summary": "\n".join(issues)[:500],
    }
    values: dict[str, Any] = {"over_correction": record}
    if kept == "previous":
        values.update(
            output=previous.output,
            output_hash=previous.output_hash,
            evaluation=previous.evaluation,
            critique=previous.critique,
            rolled_back=[
                *(row.rolled_back or []),
                {"attempt": attempt, "output": row.output, "reason": "over_correction"},
            ],
        )
    store.update_round(session, run_id, round, values)
    store.append_event(session, run_id, "round.over_correction", {"round": round, **record})
    return Reopened(issues, kept, previous.critique if kept == "previous" else None)
