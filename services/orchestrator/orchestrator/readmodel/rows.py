"""Changing a run or round row that a rarer path loaded through the ORM (the steps write
through Core instead: ``runs.update_run``, ``rounds.insert_round`` and ``update_round``)."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from orchestrator.tables import Round, Run, utcnow


def change(session: Session, row: Run | Round, **values: Any) -> None:
    """Set these columns of ``row`` and stamp its ``updated_at`` (flushed with the unit of
    work): the one way a loaded run or round is changed (finishing a run, a person's
    decision, a cancel, a round's evaluation or guard record)."""
    for column, value in values.items():
        setattr(row, column, value)
    row.updated_at = utcnow()
    session.add(row)
