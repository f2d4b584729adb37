"""Read-only queries over many runs at once: the stats page's counts and the dataset export's
pages. They live here with every other read of runs, rounds and model calls; what the rows
are folded into (rates, tallies, JSONL records) stays with the capability that shows them.

Each query keeps to the runs a ``RunScope`` selects (created since a moment, started by one
token). The long ones stream (``yield_per``): iterate them once and let them close.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import func
from sqlmodel import Session, col, select

from orchestrator.tables import CriticJudgement, ModelCall, ReviewItem, Round, Run
from shared.orchestration import FINAL_STATUSES, ReviewStatus

_STREAM = {"yield_per": 1000}
_FINISHED = [s.value for s in FINAL_STATUSES]


@dataclass(frozen=True)
class RunScope:
    """Which runs an aggregate counts: created at or after ``since``, started by ``owner``
    (a service's token id); None: no bound."""

    since: datetime | None = None
    owner: str | None = None

    def where(self) -> list[sa.ColumnElement[bool]]:
        clauses: list[sa.ColumnElement[bool]] = []
        if self.since is not None:
            clauses.append(col(Run.created_at) >= self.since)
        if self.owner is not None:
            clauses.append(col(Run.created_by) == self.owner)
        return clauses


def _stream(session: Session, query: Any) -> Iterator[Any]:
    rows = session.execute(query, execution_options=_STREAM)
    try:
        yield from rows
    finally:
        rows.close()


def runs_by_status(session: Session, scope: RunScope) -> dict[str, int]:
    query = select(Run.status, func.count()).where(*scope.where()).group_by(Run.status)
    return {str(status): int(count) for status, count in session.exec(query)}


def runs_by_stop_reason(session: Session, scope: RunScope) -> dict[str, int]:
    query = (
        select(Run.stop_reason, func.count())
        .where(col(Run.stop_reason).is_not(None), *scope.where())
        .group_by(Run.stop_reason)
    )
    return {str(reason): int(count) for reason, count in session.exec(query)}


def finished_runs_by_rounds(session: Session, scope: RunScope) -> list[tuple[int, int]]:
    """(rounds, finished runs with that many), fewest rounds first."""
    query = (
        select(Run.rounds, func.count())
        .where(col(Run.status).in_(_FINISHED), *scope.where())
        .group_by(col(Run.rounds))
        .order_by(col(Run.rounds))
    )
    return [(int(rounds), int(count)) for rounds, count in session.exec(query)]


def adoption_mean(session: Session, scope: RunScope) -> tuple[float | None, int]:
    """The mean of the rounds' measured adoption, and how many rounds have one."""
    mean, samples = session.exec(
        select(func.avg(Round.adoption), func.count(col(Round.adoption)))
        .join(Run, col(Run.id) == col(Round.run_id))
        .where(col(Round.adoption).is_not(None), *scope.where())
    ).one()
    return (None if mean is None else float(mean)), int(samples)


def newest_calls(session: Session, scope: RunScope, limit: int) -> Iterator[Any]:
    """(role, usage, latency_ms) of the model calls, newest first, at most ``limit``."""
    return _stream(
        session,
        sa.select(col(ModelCall.role), col(ModelCall.usage), col(ModelCall.latency_ms))
        .join(Run, col(Run.id) == col(ModelCall.run_id))
        .where(*scope.where())
        .order_by(col(ModelCall.id).desc())
        .limit(limit),
    )


def resolved_reviews(session: Session, scope: RunScope) -> Iterator[Any]:
    """(run id, round, decision, the run's critic_info, the run's policy) of every resolved
    review item."""
    return _stream(
        session,
        sa.select(
            col(ReviewItem.run_id),
            col(ReviewItem.round),
            col(ReviewItem.decision),
            col(Run.critic_info),
            col(Run.policy),
        )
        .join(Run, col(Run.id) == col(ReviewItem.run_id))
        .where(col(ReviewItem.status) == ReviewStatus.resolved.value, *scope.where()),
    )


def judgements_with_policy(session: Session, scope: RunScope) -> Iterator[Any]:
    """(verdict, error type, dimension, the run's policy) of every judgement of an issue."""
    return _stream(
        session,
        sa.select(
            col(CriticJudgement.verdict),
            col(CriticJudgement.error_type),
            col(CriticJudgement.dimension),
            col(Run.policy),
        )
        .join(Run, col(Run.id) == col(CriticJudgement.run_id))
        .where(*scope.where()),
    )


def revisions_guarded(session: Session, scope: RunScope) -> Iterator[Any]:
    """(over_correction,) of every round the Actor revised (JSON null and SQL NULL: None)."""
    return _stream(
        session,
        sa.select(col(Round.over_correction))
        .join(Run, col(Run.id) == col(Round.run_id))
        .where(col(Round.number) > 1, col(Round.provenance) == "actor", *scope.where()),
    )


def rounds_with_outcome(session: Session, scope: RunScope) -> Iterator[Any]:
    """(run id, number, critique, run status, stop reason, final round, run's rounds) of
    every round."""
    return _stream(
        session,
        sa.select(
            col(Round.run_id),
            col(Round.number),
            col(Round.critique),
            col(Run.status),
            col(Run.stop_reason),
            col(Run.final_round),
            col(Run.rounds),
        )
        .join(Run, col(Run.id) == col(Round.run_id))
        .where(*scope.where()),
    )


def decided_items(
    session: Session,
    *,
    after: int,
    limit: int,
    since: datetime | None,
    until: datetime | None,
    owner: str | None,
) -> list[tuple[ReviewItem, Run]]:
    """A page of resolved review items with their runs, in the order they were filed
    (``seq`` above ``after``), resolved within [since, until), of runs ``owner`` started."""
    query = (
        select(ReviewItem, Run)
        .join(Run, col(Run.id) == col(ReviewItem.run_id))
        .where(
            col(ReviewItem.status) == ReviewStatus.resolved.value,
            col(ReviewItem.seq) > after,
        )
    )
    if since is not None:
        query = query.where(col(ReviewItem.resolved_at) >= since)
    if until is not None:
        query = query.where(col(ReviewItem.resolved_at) < until)
    if owner is not None:
        query = query.where(col(Run.created_by) == owner)
    query = query.order_by(col(ReviewItem.seq)).limit(limit)
    return [(item, run) for item, run in session.exec(query)]


def rounds_by_run(session: Session, run_ids: set[str]) -> dict[str, list[Round]]:
    """Every round of these runs, in order, per run."""
    rounds: dict[str, list[Round]] = {}
    query = select(Round).where(col(Round.run_id).in_(run_ids)).order_by(col(Round.number))
    for row in session.exec(query):
        rounds.setdefault(row.run_id, []).append(row)
    return rounds
