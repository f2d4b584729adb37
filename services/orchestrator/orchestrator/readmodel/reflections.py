"""Reflections: what the Actor is told to take into its next revision (the Critic's
critique, an evaluator's failure, a person's comment), read and written here only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from orchestrator.tables import Reflection, table_of, utcnow

REFLECTIONS = table_of(Reflection)
_INSERT_REFLECTION = REFLECTIONS.insert()


@dataclass(frozen=True)
class ReflectionRow:
    round: int
    source: str
    author: str
    content: str
    created_at: Any


_SELECT_REFLECTIONS = (
    sa.select(
        REFLECTIONS.c.round,
        REFLECTIONS.c.source,
        REFLECTIONS.c.author,
        REFLECTIONS.c.content,
        REFLECTIONS.c.created_at,
    )
    .where(REFLECTIONS.c.run_id == sa.bindparam("run_id"))
    .order_by(REFLECTIONS.c.round, REFLECTIONS.c.id)
)


def read_reflections(
    session: Session, run_id: str, source: str | None = None
) -> list[ReflectionRow]:
    query = _SELECT_REFLECTIONS
    if source is not None:
        query = query.where(REFLECTIONS.c.source == source)
    rows = session.connection().execute(query, {"run_id": run_id})
    return [ReflectionRow(**row._asdict()) for row in rows]


def add_reflection(
    session: Session, run_id: str, round: int, source: str, content: str, author: str = ""
) -> None:
    session.connection().execute(
        _INSERT_REFLECTION,
        {
            "run_id": run_id,
            "round": round,
            "source": source,
            "author": author,
            "content": content,
            "created_at": utcnow(),
        },
    )


def all_reflections(session: Session, run_id: str) -> list[Reflection]:
    query = select(Reflection).where(Reflection.run_id == run_id)
    return list(session.exec(query.order_by(col(Reflection.round), col(Reflection.id))))
