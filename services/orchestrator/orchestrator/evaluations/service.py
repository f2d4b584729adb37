"""Storing and reading evaluation summaries; the newest is the one that finished last."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, col, select

from orchestrator.auth.service import Principal
from orchestrator.db import session_scope
from orchestrator.tables import Evaluation, new_id
from shared.errors import NotFound
from shared.evaluations import (
    EVAL_MODES,
    INTERCEPT_DATASET,
    INTERCEPT_MODE,
    EvaluationCreate,
    EvaluationMode,
    EvaluationPublic,
)
from shared.logging import get_logger

log = get_logger("crosscheck.evaluations")
# Newest first: by the time the evaluation finished, then by when it arrived.
NEWEST = (
    col(Evaluation.finished_at).desc(),
    col(Evaluation.created_at).desc(),
    col(Evaluation.id).desc(),
)


def public(row: Evaluation) -> EvaluationPublic:
    return EvaluationPublic(
        id=row.id,
        dataset=row.dataset,
        items=row.items,
        limit=row.item_limit,
        seed=row.seed,
        modes=[EvaluationMode.model_validate(m) for m in row.modes],
        config=dict(row.config or {}),
        commit=row.commit,
        started_at=row.started_at,
        finished_at=row.finished_at,
        published_by=row.published_by,
        published_at=row.created_at,
    )


def _mode_order(mode: dict[str, Any]) -> int:
    return EVAL_MODES.index(mode["mode"])


class EvaluationService:
    def create(
        self, session: Session, body: EvaluationCreate, caller: Principal
    ) -> EvaluationPublic:
        """Keep a summary; its modes in the order single, self, cross."""
        modes = sorted((m.model_dump(mode="json") for m in body.modes), key=_mode_order)
        row = Evaluation(
            id=new_id("eval"),
            dataset=body.dataset,
            items=body.items,
            item_limit=body.limit,
            seed=body.seed,
            modes=modes,
            config=body.config,
            commit=body.commit,
            started_at=body.started_at,
            finished_at=body.finished_at,
            published_by=caller.name,
            published_by_id=caller.id,
        )
        session.add(row)
        session.flush()
        return public(row)

    def listed(
        self,
        session: Session,
        *,
        dataset: str | None,
        limit: int,
        exclude: str | None = None,
        publisher: str | None = None,
    ) -> list[EvaluationPublic]:
        """Newest first: by the time the evaluation finished, then by when it arrived;
        ``publisher`` (a service's token id): only those it published."""
        query = select(Evaluation)
        if publisher is not None:
            query = query.where(col(Evaluation.published_by_id) == publisher)
        if dataset is not None:
            query = query.where(col(Evaluation.dataset) == dataset)
        if exclude is not None:
            query = query.where(col(Evaluation.dataset) != exclude)
        query = query.order_by(*NEWEST).limit(limit)
        return [public(row) for row in session.exec(query)]

    def latest(
        self,
        session: Session,
        *,
        dataset: str | None,
        exclude: str | None = None,
        publisher: str | None = None,
    ) -> EvaluationPublic:
        found = self.listed(session, dataset=dataset, limit=1, exclude=exclude, publisher=publisher)
        if not found:
            what = f" of the dataset {dataset}" if dataset is not None else ""
            if exclude is not None:
                what += f" other than {exclude}"
            command = {
                "humaneval": "humaneval --mode cross",
                INTERCEPT_DATASET: INTERCEPT_DATASET,
            }.get(dataset or "", "text --mode cross")
            raise NotFound(
                f"no evaluation{what} has been published yet: run `crosscheck eval {command}` "
                "against this orchestrator to publish one"
            )
        return found[0]


def intercept_rate(modes: Sequence[Any] | None) -> float | None:
    """The intercept rate of a published intercept evaluation: its critic mode's score."""
    for mode in modes or []:
        if not isinstance(mode, dict) or mode.get("mode") != INTERCEPT_MODE:
            continue
        score = mode.get("score")
        if isinstance(score, int | float) and not isinstance(score, bool):
            return float(score) if math.isfinite(score) else None
    return None


_LATEST_INTERCEPT = (
    select(Evaluation.modes)
    .where(col(Evaluation.dataset) == INTERCEPT_DATASET)
    .order_by(*NEWEST)
    .limit(1)
)


def latest_intercept_rate(engine: sa.Engine) -> float | None:
    """The intercept rate of the newest published intercept evaluation (None: none yet). A
    database it cannot read leaves the gauge out of that scrape, not the whole exposition."""
    try:
        with session_scope(engine) as session:
            modes = session.exec(_LATEST_INTERCEPT).first()
    except SQLAlchemyError as exc:
        log.warning("cannot read the latest intercept rate", error=type(exc).__name__)
        return None
    return intercept_rate(modes)
