"""Storing and reading evaluation summaries; the newest is the one that finished last."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, col, select

from orchestrator.auth.service import Principal
from orchestrator.tables import Evaluation, new_id
from shared.errors import NotFound
from shared.evaluations import EVAL_MODES, EvaluationCreate, EvaluationMode, EvaluationPublic


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
        self, session: Session, *, dataset: str | None, limit: int
    ) -> list[EvaluationPublic]:
        """Newest first: by the time the evaluation finished, then by when it arrived."""
        query = select(Evaluation)
        if dataset is not None:
            query = query.where(col(Evaluation.dataset) == dataset)
        query = query.order_by(
            col(Evaluation.finished_at).desc(),
            col(Evaluation.created_at).desc(),
            col(Evaluation.id).desc(),
        ).limit(limit)
        return [public(row) for row in session.exec(query)]

    def latest(self, session: Session, *, dataset: str | None) -> EvaluationPublic:
        found = self.listed(session, dataset=dataset, limit=1)
        if not found:
            what = f" of the dataset {dataset}" if dataset is not None else ""
            command = dataset if dataset in ("text", "humaneval") else "text"
            raise NotFound(
                f"no evaluation{what} has been published yet: run `crosscheck eval {command} "
                "--mode cross` against this orchestrator to publish one"
            )
        return found[0]
