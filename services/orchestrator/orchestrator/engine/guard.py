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

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from dbos import DBOS
from sqlmodel import Session

from orchestrator.engine import difflock, records
from orchestrator.engine.policy import output_hash
from orchestrator.engine.runtime import Runtime, current
from orchestrator.readmodel.events import append_event, appended_types
from orchestrator.readmodel.reflections import ReflectionRow
from orchestrator.readmodel.rounds import (
    RoundState,
    load_round,
    read_round,
    update_round,
)
from orchestrator.readmodel.rows import change
from orchestrator.readmodel.runs import RunState, load_run, set_status
from orchestrator.tables import Round, Run
from shared.orchestration import Policy, RunStatus

SEVERITY_WEIGHT = {"critical": 100, "major": 10, "minor": 1}


# ------------------------------------------------------------------------ diff lock


def lock_rules(
    run: RunState,
    policy: Policy,
    previous: RoundState,
    reflections: list[ReflectionRow],
    round: int,
) -> difflock.LockRules:
    """What bounds round ``round``'s revision of ``previous``. A person's open points or
    comments on the previous version, or its failed evaluation, leave it unbounded: either
    may ask for a change anywhere (locked regions still hold)."""
    human = any(r.source == "human" and r.round >= round - 1 for r in reflections)
    failed = bool(previous.evaluation) and not (previous.evaluation or {}).get("passed")
    unbounded = bool(run.binding_points) or human or failed
    quotes = difflock.critique_quotes(previous.critique, previous.output, unbounded=unbounded)
    return difflock.LockRules(
        enabled=policy.diff_lock, quotes=quotes, locked=run.locked or [], kind=run.kind
    )


def record_reverted(
    rt: Runtime,
    session: Session,
    run_id: str,
    round: int,
    attempt: int,
    locked: difflock.Locked,
) -> None:
    """The ``round.reverted`` event (counts by reason only: the hunks are on the round), and
    ``round.lock_overridden`` when the locked version broke and the revision ships instead."""
    reasons = [h["reason"] for h in locked.reverted if not h.get("overridden")]
    for reason in set(reasons):
        rt.metrics.reverted_hunks.labels(reason).inc(reasons.count(reason))
    if reasons:
        append_event(
            session,
            run_id,
            "round.reverted",
            {
                "round": round,
                "attempt": attempt,
                "hunks": locked.hunks,
                "reverted": len(reasons),
                **{reason: reasons.count(reason) for reason in difflock.REASONS},
            },
        )
    if locked.overridden:
        restored = sum(1 for h in locked.reverted if h.get("overridden"))
        _lock_overridden(
            session,
            run_id,
            round,
            attempt,
            difflock.UNPARSABLE,
            locked.overridden,
            restored,
            output_hash(locked.output),
        )


def _lock_overridden(
    session: Session,
    run_id: str,
    round: int,
    attempt: int,
    reason: str,
    detail: str,
    restored: int,
    digest: str,
) -> None:
    """The event: which version went on instead (its hash), why, and how many reverts the
    decision undid."""
    append_event(
        session,
        run_id,
        "round.lock_overridden",
        {
            "round": round,
            "attempt": attempt,
            "reason": reason,
            "detail": detail,
            "restored": restored,
            "output_hash": digest,
        },
    )


@dataclass(frozen=True)
class LockOverride:
    """The Actor's revision ships instead of its locked version, which failed tests the
    revision passes."""

    output: str
    evaluation: dict[str, Any]  # the revision's, with the hash of the version it evaluated
    detail: str


def unlocked_candidate(session: Session, run: Run, row: Round) -> str | None:
    """What to evaluate when this round's locked version fails: the Actor's revision as
    written, the run's locked regions still reverted (they hold whatever the tests say).
    None when the lock did not change the revision, or that is the round's version."""
    unlocked = row.unlocked_output
    if not unlocked or unlocked == row.output or row.number < 2:
        return None
    previous = read_round(session, run.id, row.number - 1)
    if previous is None:
        return None
    rules = difflock.LockRules(enabled=False, locked=run.locked or [], kind=run.kind)
    candidate = difflock.enforce(rules, previous.output, unlocked, []).output
    return None if candidate == row.output else candidate


def _test_statuses(evaluation: dict[str, Any]) -> dict[str, str] | None:
    tests = evaluation.get("tests")
    if not isinstance(tests, list) or not tests:
        return None
    return {
        str(t.get("id") or t.get("name")): str(t.get("status"))
        for t in tests
        if isinstance(t, dict)
    }


def unlocked_better(locked: dict[str, Any], unlocked: dict[str, Any]) -> str | None:
    """Why the unlocked revision's evaluation beats the locked version's failing one: it
    passes, or it fails a strict subset of the same tests (per-test results); else None."""
    if locked.get("passed"):
        return None
    if unlocked.get("passed"):
        return "The locked version failed its evaluation and the Actor's revision passes it"
    before, after = _test_statuses(locked), _test_statuses(unlocked)
    if before is None or after is None or before.keys() != after.keys():
        return None
    ok = ("passed", "skipped")
    failing = {name for name, status in before.items() if status not in ok}
    still = {name for name, status in after.items() if status not in ok}
    if still < failing:
        return (
            f"The locked version failed {len(failing)} test(s) and the Actor's revision fails "
            f"{len(still)} of them and no other"
        )
    return None


async def prefer_unlocked(
    evaluation: dict[str, Any],
    candidate: str | None,
    evaluate: Callable[[str], Awaitable[dict[str, Any]]],
) -> LockOverride | None:
    """A locked version that failed its evaluation: evaluate the unlocked revision too, and
    ship it when its evaluation is better (see :func:`unlocked_better`)."""
    if candidate is None or evaluation.get("passed"):
        return None
    other = await evaluate(candidate)
    why = unlocked_better(evaluation, other)
    if why is None:
        return None
    detail = f"{why}: the revision ships as written, locked regions still reverted."
    return LockOverride(candidate, {**other, "output_hash": output_hash(candidate)}, detail)


def apply_override(session: Session, row: Round, attempt: int, override: LockOverride) -> None:
    """The round's version becomes the unlocked revision; its undone reverts say why."""
    reverted = row.reverted_hunks or []
    change(
        session,
        row,
        output=override.output,
        output_hash=output_hash(override.output),
        reverted_hunks=difflock.mark_overridden(reverted, difflock.FAILED_TESTS, override.detail),
    )
    restored = sum(1 for h in reverted if h.get("reason") != difflock.LOCKED)
    _lock_overridden(
        session,
        row.run_id,
        row.number,
        attempt,
        difflock.FAILED_TESTS,
        override.detail,
        restored,
        row.output_hash,
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


def better(previous: RoundState, current: dict[str, Any]) -> str:
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
        previous = read_round(session, run_id, round - 1)
        row = load_round(session, run_id, round)
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
        values: dict[str, Any] = {"over_correction": record}
        if kept == "previous":
            values.update(
                rolled_back=[
                    *(row.rolled_back or []),
                    {"attempt": attempt, "output": row.output, "reason": reason},
                ],
                output=previous.output,
                output_hash=previous.output_hash,
                evaluation=previous.evaluation,
            )
        change(session, row, **values)
        append_event(session, run_id, "round.over_correction", {"round": round, **record})
        session.flush()
        run = load_run(session, run_id)
        paused = False
        if not RunStatus(run.status).final:
            if pause_after:
                records.pause_for_review(session, run, round)
                paused = True
            else:
                set_status(session, run, RunStatus.critiquing, round=round)
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
    previous = read_round(session, run_id, round - 1)
    before_last = read_round(session, run_id, round - 2)
    if previous is None or before_last is None:
        return None
    issues = reopened_issues(before_last.critique, previous.critique, doc)
    if not issues:
        return None
    if attempt == 1:
        return Reopened(issues)
    row = read_round(session, run_id, round)
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
    update_round(session, run_id, round, values)
    append_event(session, run_id, "round.over_correction", {"round": round, **record})
    return Reopened(issues, kept, previous.critique if kept == "previous" else None)
