"""Rounds: one row per version of a run's output, read and written here only.

The steps read and write them as Core statements (``read_round``, ``insert_round``,
``update_round``): the ORM's unit of work cost more CPU than the SQL on every round. The
rarer paths (finishing, a person's edit, escalation context) use the ORM rows
(``load_round``, ``all_rounds``, ``add_round``) in the same transaction; a Core read sees
an ORM change only after a flush.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from orchestrator.tables import Round, table_of, utcnow
from shared.orchestration import GIVEN_PROVENANCE

ROUNDS = table_of(Round)


@dataclass(frozen=True)
class RoundState:
    number: int
    output: str
    output_hash: str
    evaluation: dict[str, Any] | None
    critique: dict[str, Any] | None
    rolled_back: list[dict[str, Any]] | None
    responses: list[dict[str, Any]] | None = None
    drafts: list[dict[str, Any]] | None = None
    sections: list[dict[str, Any]] | None = None
    search_queries: list[str] | None = None
    research: dict[str, Any] | None = None
    citations: dict[str, Any] | None = None
    provenance: str = "actor"  # "human": a reviewer's edit
    uncertainties: list[str] | None = None
    unsourced: list[dict[str, Any]] | None = None


_INSERT_ROUND = ROUNDS.insert()
_UPDATE_ROUND = ROUNDS.update().where(
    ROUNDS.c.run_id == sa.bindparam("_run_id"), ROUNDS.c.number == sa.bindparam("_number")
)
_SELECT_ROUND = sa.select(
    ROUNDS.c.number,
    ROUNDS.c.output,
    ROUNDS.c.output_hash,
    ROUNDS.c.evaluation,
    ROUNDS.c.critique,
    ROUNDS.c.rolled_back,
    ROUNDS.c.responses,
    ROUNDS.c.drafts,
    ROUNDS.c.sections,
    ROUNDS.c.search_queries,
    ROUNDS.c.research,
    ROUNDS.c.citations,
    ROUNDS.c.provenance,
    ROUNDS.c.uncertainties,
    ROUNDS.c.unsourced,
).where(ROUNDS.c.run_id == sa.bindparam("run_id"), ROUNDS.c.number == sa.bindparam("number"))


def read_round(session: Session, run_id: str, number: int) -> RoundState | None:
    row = session.connection().execute(_SELECT_ROUND, {"run_id": run_id, "number": number}).first()
    return RoundState(**row._asdict()) if row is not None else None


def insert_round(session: Session, run_id: str, number: int, values: dict[str, Any]) -> None:
    now = utcnow()
    params = {"run_id": run_id, "number": number, "created_at": now, "updated_at": now}
    session.connection().execute(_INSERT_ROUND, {**params, **values})


def update_round(session: Session, run_id: str, number: int, values: dict[str, Any]) -> None:
    params = {"_run_id": run_id, "_number": number, "updated_at": utcnow()}
    session.connection().execute(_UPDATE_ROUND, {**params, **values})


def load_round(session: Session, run_id: str, number: int) -> Round | None:
    """The round as an ORM row (for paths that change several of its columns)."""
    return session.exec(select(Round).where(Round.run_id == run_id, Round.number == number)).first()


def all_rounds(session: Session, run_id: str) -> list[Round]:
    return list(
        session.exec(select(Round).where(Round.run_id == run_id).order_by(col(Round.number)))
    )


def critiques(session: Session, wanted: set[tuple[str, int]]) -> dict[tuple[str, int], Any]:
    """The critiques of the given (run, round) pairs, in one query (missing: not stored)."""
    if not wanted:
        return {}
    query = select(Round.run_id, Round.number, Round.critique).where(
        col(Round.run_id).in_({run_id for run_id, _ in wanted}),
        col(Round.number).in_({number for _, number in wanted}),
    )
    return {(r, n): c for r, n, c in session.exec(query) if (r, n) in wanted}


def given_first_rounds(session: Session, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """For the runs whose round 1 is a text their creator gave: that round's review record."""
    query = select(Round.run_id, Round.review).where(
        col(Round.run_id).in_(run_ids), Round.number == 1, Round.provenance == GIVEN_PROVENANCE
    )
    return {run_id: dict(review or {}) for run_id, review in session.exec(query)}


def add_round(
    session: Session,
    run_id: str,
    number: int,
    output: str,
    output_hash: str,
    *,
    provenance: str,
    review: dict[str, Any],
) -> None:
    """A version written by someone other than the Actor: a person's edit (provenance
    ``human``) or the text a run's creator gave (``given``); ``review`` says who and how."""
    session.add(
        Round(
            run_id=run_id,
            number=number,
            output=output,
            output_hash=output_hash,
            provenance=provenance,
            review=review,
        )
    )
