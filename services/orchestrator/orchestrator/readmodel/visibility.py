"""What a caller may see: the one statement of the visibility rules.

Admins see every run; a service token the runs it created; a reviewer the runs that are or
were in review (any review item, open or settled). Events follow the runs they belong to.
A run the caller may not see answers exactly as one that does not exist (404)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session, col, select

from orchestrator.auth.service import Principal
from orchestrator.tables import ReviewItem, Run, table_of
from shared.errors import Forbidden, NotFound
from shared.orchestration import Role

_REVIEWS = table_of(ReviewItem)
_RUNS = table_of(Run)


def in_review() -> sa.ColumnElement[bool]:
    """Runs a person has been asked to look at (any review item, open or settled)."""
    return sa.exists().where(col(ReviewItem.run_id) == col(Run.id))


def events_in_review(run_id: sa.ColumnElement[str | None]) -> sa.ColumnElement[bool]:
    """Events of runs that are or were in review (``run_id``: the events' column)."""
    return sa.exists().where(_REVIEWS.c.run_id == run_id)


def visible_runs(principal: Principal) -> sa.ColumnElement[bool] | None:
    """Which runs a caller may see: admins every run, a service the runs it created, a
    reviewer the runs that are or were in review. None: no restriction."""
    if principal.role is Role.admin:
        return None
    if principal.role is Role.service:
        return col(Run.created_by) == principal.id
    return in_review()


def visible_reviews(principal: Principal | None) -> sa.ColumnElement[bool] | None:
    """Which review items a caller may list: a service the items of its own runs; a
    reviewer and an admin every item (the queue is a reviewer's work). None: no restriction."""
    if principal is None or principal.role is not Role.service:
        return None
    own = sa.select(_RUNS.c.id).where(_RUNS.c.created_by == principal.id)
    return col(ReviewItem.run_id).in_(own)


def may_see_review(principal: Principal | None, run: Run) -> bool:
    """Whether a caller may see one review item of ``run`` (``visible_reviews``, for one)."""
    return principal is None or principal.role is not Role.service or run.created_by == principal.id


def check_event_scope(session: Session, principal: Principal, run_id: str | None) -> bool:
    """Events follow run visibility (``visible_runs``): a service reads the events of one
    of its own runs (``run_id``), a reviewer those of runs in review, an admin all. Another
    run's ``run_id`` is a 404. True: keep only the events of runs in review (a reviewer
    reading every run's events)."""
    if principal.role is Role.admin:
        return False
    if run_id is not None:
        load_visible(session, principal, run_id)
        return False
    if principal.role is Role.service:
        raise Forbidden("a service token reads the events of its own runs: pass run_id")
    return True


def load_visible(session: Session, principal: Principal, run_id: str) -> Run:
    """The run, or 404 when it does not exist or the caller may not see it (alike)."""
    query = select(Run).where(Run.id == run_id)
    scope = visible_runs(principal)
    if scope is not None:
        query = query.where(scope)
    run = session.exec(query).first()
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run
