"""Runs: one row per run, read and written here only (with its ``run.status`` events).

The steps read a run once, as a ``RunState`` (``read_run``: one Core select of the columns
they use), and write what they collected as one UPDATE (``update_run``, adding the cost of
their calls to the totals in SQL); the ORM's unit of work
(identity map, attribute events, flush ordering) cost more CPU than the SQL itself on every
step. The rarer paths (finishing, a review decision, a cancel) load the ORM row
(``load_run``) and change it in the same transaction; a Core read sees those changes only
after a flush.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, or_, select

from orchestrator.readmodel.events import append_event, hold_event_lock
from orchestrator.readmodel.rows import change
from orchestrator.tables import Run, table_of, utcnow
from shared.errors import NotFound
from shared.orchestration import RunStatus

RUNS = table_of(Run)

_RUN_COLUMNS = (
    RUNS.c.id,
    RUNS.c.status,
    RUNS.c.kind,
    RUNS.c.task,
    RUNS.c.entry_point,
    RUNS.c.evaluator,
    RUNS.c.policy,
    RUNS.c.cancel_requested,
    RUNS.c.rounds,
    RUNS.c.input_tokens,
    RUNS.c.output_tokens,
    RUNS.c.cost_usd,
    RUNS.c.lessons_used,
    RUNS.c.actor_knowledge,
    RUNS.c.actor_notes,
    RUNS.c.critic_notes,
    RUNS.c.tags,
    RUNS.c.binding_points,
    RUNS.c.binding_attempts,
    RUNS.c.human_rounds,
    RUNS.c.locked,
    RUNS.c.critique_depth,
    RUNS.c.created_by,
)
_SELECT_RUN = sa.select(*_RUN_COLUMNS).where(RUNS.c.id == sa.bindparam("run_id"))


@dataclass(frozen=True)
class RunState:
    """What a step needs to know about its run (a read, not a live ORM object)."""

    id: str
    status: str
    kind: str
    task: str
    entry_point: str | None
    evaluator: str
    policy: dict[str, Any]
    cancel_requested: bool
    rounds: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    lessons_used: list[str] | None
    actor_knowledge: list[str] | None
    actor_notes: list[dict[str, Any]] | None
    critic_notes: list[dict[str, Any]] | None
    tags: list[str] | None
    binding_points: list[str] | None
    binding_attempts: int
    human_rounds: int
    locked: list[str] | None
    critique_depth: str | None = None
    created_by: str = ""  # the token that started it: whose lessons its prompts may get


@dataclass
class RunChanges:
    """Column updates a step collects and writes in one UPDATE at the end. What its calls
    cost is added to the run's totals in SQL (``input_tokens = input_tokens + ...``), so the
    write keeps whatever was billed since the step read the run (a failed call billed by the
    retry loop), and the step reads its run once."""

    values: dict[str, Any]
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def bill(self, usage: dict[str, Any]) -> None:
        self.input_tokens += int(usage.get("input_tokens", 0))
        self.output_tokens += int(usage.get("output_tokens", 0))
        self.cost_usd += float(usage.get("cost_usd") or 0.0)

    @property
    def billed(self) -> bool:
        return bool(self.input_tokens or self.output_tokens or self.cost_usd)

    def tokens(self, run: RunState) -> int:
        """The run's tokens with these calls' (``run``: as read, plus what was billed since)."""
        return run.input_tokens + run.output_tokens + self.input_tokens + self.output_tokens

    def cost(self, run: RunState) -> float:
        return round(run.cost_usd + self.cost_usd, 8)

    def add(self, other: RunChanges) -> None:
        """Tally what ``other`` billed too (its column values are not taken)."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cost_usd += other.cost_usd

    def on(self, run: RunState) -> RunState:
        """``run`` as read, with what these changes billed added to its totals (the run a
        step's budget rules see when calls were billed since it read the run)."""
        if not self.billed:
            return run
        return replace(
            run,
            input_tokens=run.input_tokens + self.input_tokens,
            output_tokens=run.output_tokens + self.output_tokens,
            cost_usd=self.cost(run),
        )


UPDATE_RUN = RUNS.update().where(RUNS.c.id == sa.bindparam("_id"))
# the same, adding a step's billed calls to the totals in SQL
_UPDATE_BILLED = UPDATE_RUN.values(
    input_tokens=RUNS.c.input_tokens + sa.bindparam("_input_tokens", type_=sa.Integer),
    output_tokens=RUNS.c.output_tokens + sa.bindparam("_output_tokens", type_=sa.Integer),
    cost_usd=RUNS.c.cost_usd + sa.bindparam("_cost_usd", type_=sa.Float),
)
_SELECT_FULL_RUN = sa.select(RUNS).where(RUNS.c.id == sa.bindparam("run_id"))


def read_run(session: Session, run_id: str) -> RunState:
    """What a step needs to know about its run, in one Core select."""
    row = session.connection().execute(_SELECT_RUN, {"run_id": run_id}).first()
    if row is None:
        raise NotFound(f"run {run_id} does not exist")
    return RunState(**row._asdict())


def state_of(run: Run) -> RunState:
    """An ORM-loaded run as the ``RunState`` a step carries to its commit (no read)."""
    return RunState(**{f.name: getattr(run, f.name) for f in fields(RunState)})


def read_full_run(session: Session, run_id: str) -> dict[str, Any]:
    """Every column of the run, as a dict (finishing a run without the ORM)."""
    row = session.connection().execute(_SELECT_FULL_RUN, {"run_id": run_id}).first()
    if row is None:
        raise NotFound(f"run {run_id} does not exist")
    return row._asdict()


def load_run(session: Session, run_id: str) -> Run:
    """The run as an ORM row (for paths that change several of its columns)."""
    run = session.exec(select(Run).where(Run.id == run_id)).first()
    if run is None:
        raise NotFound(f"run {run_id} does not exist")
    return run


_INSERT_RUN = RUNS.insert()


def active_run_ids(session: Session) -> list[str]:
    """Runs not finished and not waiting for a person: each should have a workflow."""
    waiting = [s.value for s in RunStatus if s.final or s is RunStatus.awaiting_review]
    return list(session.exec(select(Run.id).where(col(Run.status).not_in(waiting))))


def traceparent_of(session: Session, run_id: str) -> str | None:
    """The W3C traceparent the run's creator sent (None: none, or no such run)."""
    return session.exec(select(Run.traceparent).where(Run.id == run_id)).first()


def created_with_key(session: Session, created_by: str, key: str) -> Run | None:
    """The run this caller created with this Idempotency-Key, if any."""
    query = select(Run).where(Run.created_by == created_by, Run.idempotency_key == key)
    return session.exec(query).first()


def newest_runs(
    session: Session,
    scope: sa.ColumnElement[bool] | None,
    status: RunStatus | None,
    needle: str,
    before: int | None,
    limit: int,
) -> list[Run]:
    """Runs newest first: within ``scope`` (``visibility.visible_runs``), of ``status``,
    whose id is ``needle`` or whose task contains it, created before the cursor ``before``."""
    query = select(Run)
    if scope is not None:
        query = query.where(scope)
    if status is not None:
        query = query.where(Run.status == status.value)
    if needle:
        # LIKE wildcards in the search are literal characters (autoescape).
        query = query.where(
            or_(col(Run.id) == needle, col(Run.task).icontains(needle, autoescape=True))
        )
    if before is not None:
        query = query.where(col(Run.seq) < before)
    return list(session.exec(query.order_by(col(Run.seq).desc()).limit(limit)))


def tasks_of(session: Session, run_ids: set[str]) -> dict[str, str]:
    """Each run's task, in one query (for pages that list many runs' items)."""
    if not run_ids:
        return {}
    query = select(Run.id, Run.task).where(col(Run.id).in_(run_ids))
    return dict(session.exec(query).all())


def insert_run(session: Session, run: Run) -> None:
    """Store a new run with its ``run.created`` event: two plain INSERTs (the ORM's unit of
    work cost more than the SQL on every run's creation). ``run`` stays detached."""
    session.connection().execute(_INSERT_RUN, run.model_dump(exclude={"seq"}))
    append_event(session, run.id, "run.created", {"status": run.status, "kind": run.kind})


def detached(values: dict[str, Any]) -> Run:
    """A run row built from ``read_full_run`` values, never added to a session (what the
    webhooks of a run finished in Core statements read)."""
    return Run(**values)


def set_status(session: Session, run: Run, status: RunStatus, **data: Any) -> None:
    """Move an ORM-loaded run to ``status`` with its ``run.status`` event (no-op if there)."""
    if run.status == status.value:
        return
    append_event(session, run.id, "run.status", {"status": status.value, **data})
    change(session, run, status=status.value)


def finished(session: Session, run: Run, **values: Any) -> None:
    """Record how a run ended (``final_round``, ``final_output``, ``shipped_by``,
    ``stop_reason``, ``error_class``, ``detail``), stamped ``finished_at`` now."""
    change(session, run, **values, finished_at=utcnow())


def reopened(session: Session, run: Run, status: RunStatus, **event: Any) -> None:
    """A finished or paused run carries on (a person's decision): how it ended is cleared
    and it moves to ``status``."""
    change(
        session,
        run,
        stop_reason=None,
        error_class=None,
        detail=None,
        final_output=None,
        final_round=None,
        finished_at=None,
    )
    set_status(session, run, status, **event)


def flag_cancel(session: Session, run: Run, by: str) -> None:
    """Ask a run to stop: its ``run.cancel_requested`` event first (and with it the event
    lock), then the run's row, as a step writes them."""
    append_event(session, run.id, "run.cancel_requested", {"by": by})
    change(session, run, cancel_requested=True)


def write_columns(
    session: Session, run_id: str, values: dict[str, Any], statement: sa.Update = UPDATE_RUN
) -> None:
    """One UPDATE of the given columns (taking the event lock first, as every run write)."""
    hold_event_lock(session)  # before the run's row: see readmodel.events.hold_event_lock
    session.connection().execute(statement, {"_id": run_id, "updated_at": utcnow(), **values})


def update_run(
    session: Session,
    run: RunState,
    changes: RunChanges,
    *,
    status: RunStatus | None = None,
    event: dict[str, Any] | None = None,
) -> None:
    """Write the collected changes; a status change also appends its ``run.status`` event."""
    values = dict(changes.values)
    if status is not None and status.value != run.status:
        values["status"] = status.value
        append_event(session, run.id, "run.status", {"status": status.value, **(event or {})})
    if changes.billed:
        values.update(
            _input_tokens=changes.input_tokens,
            _output_tokens=changes.output_tokens,
            _cost_usd=round(changes.cost_usd, 8),
        )
        write_columns(session, run.id, values, _UPDATE_BILLED)
    elif values:
        write_columns(session, run.id, values)
