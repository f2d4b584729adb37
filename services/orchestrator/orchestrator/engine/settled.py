"""Settled versions: what the trigger rate counts.

A version settles once: when a later round revises it (the Actor's revision, or a person's
edit) or when its run succeeds with it. It was judged when the Critic critiqued it or a person
decided on it (comment, approve, edit, reject) before it settled. A version still in flight,
or the last version of a run that ended otherwise (escalated, failed, cancelled), has not
settled. ``GET /v1/stats`` folds the read model by this rule; the writes below count the same
thing in ``crosscheck_versions_settled_total{judged}`` as it happens.

Each count is taken where the settling row is first written (a round inserted, a run's status
first set to succeeded, a review decided once) and only when that transaction commits, so a
step re-run after a crash, which finds its row written, never counts twice.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy import event
from sqlmodel import Session

from orchestrator.metrics import Metrics
from orchestrator.tables import ReviewItem, table_of
from shared.orchestration import DecisionAction, ReviewStatus, StopReason

# A person's decision on a version that judges it; ``retry`` only asks for more rounds.
JUDGING = frozenset(
    a.value
    for a in (
        DecisionAction.comment,
        DecisionAction.approve,
        DecisionAction.edit,
        DecisionAction.reject,
    )
)

_REVIEWS = table_of(ReviewItem)
_DECISIONS = sa.select(_REVIEWS.c.decision).where(
    _REVIEWS.c.run_id == sa.bindparam("run_id"),
    _REVIEWS.c.round == sa.bindparam("number"),
    _REVIEWS.c.status == ReviewStatus.resolved.value,
)

_metrics: weakref.WeakKeyDictionary[sa.Engine, Metrics] = weakref.WeakKeyDictionary()


def install(engine: sa.Engine, metrics: Metrics) -> None:
    """Count the versions settled through ``engine``'s sessions in ``metrics``."""
    _metrics[engine] = metrics


def uninstall(engine: sa.Engine) -> None:
    _metrics.pop(engine, None)


def judging(decision: Mapping[str, Any] | None) -> bool:
    return str((decision or {}).get("action")) in JUDGING


def judged_by_person(session: Session, run_id: str, number: int) -> bool:
    """Whether a person decided on version ``number`` (a resolved review of that round)."""
    rows = session.execute(_DECISIONS, {"run_id": run_id, "number": number})
    return any(judging(decision) for (decision,) in rows)


def settle(session: Session, *, judged: bool) -> None:
    """Count one settled version when this transaction commits (never when it rolls back)."""
    bind = session.get_bind()
    metrics = _metrics.get(bind if isinstance(bind, sa.Engine) else bind.engine)
    if metrics is None:
        return
    counter = metrics.versions_settled.labels("true" if judged else "false")

    def count(_: Session) -> None:
        counter.inc()

    event.listen(session, "after_commit", count, once=True)


def revised(session: Session, run_id: str, number: int, critique: dict[str, Any] | None) -> None:
    """A later round revised version ``number`` (call once: where that round is inserted)."""
    settle(session, judged=critique is not None or judged_by_person(session, run_id, number))


class Version(Protocol):
    """A round as either read path loads it (the ORM row, or ``RoundState``)."""

    @property
    def number(self) -> int: ...

    @property
    def critique(self) -> dict[str, Any] | None: ...


def shipped(
    session: Session, run_id: str, final: Version | None, *, rounds: int, reason: StopReason
) -> None:
    """The run succeeded with version ``final`` (call once: where its status first becomes
    succeeded). A version a later round revised settled then, and is not counted again; one
    a person approved (or wrote and approved) was judged by that person."""
    if final is None or final.number < rounds:
        return
    judged = (
        reason is StopReason.review_approved
        or final.critique is not None
        or judged_by_person(session, run_id, final.number)
    )
    settle(session, judged=judged)
