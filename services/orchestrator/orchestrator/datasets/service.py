"""Reviewed runs as datasets: JSONL records people train and evaluate with.

Every record comes from a review item a person decided (its run, its rounds, the Critic's
critique and the reviewer's judgements of it); nothing else is read, so no token, key or
model exchange can end up in a file. Items are read in pages of ``PAGE`` so a long export
streams without holding the whole history.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from orchestrator.readmodel import aggregates
from orchestrator.reviews import judgements
from orchestrator.tables import CriticJudgement, ReviewItem, Round, Run
from shared.orchestration import DecisionAction, ExportKind, ReviewStatus

PAGE = 200
ISSUE_FIELDS = (
    "dimension",
    "severity",
    "error_type",
    "quote",
    "suggestion",
    "corrected_text",
    "evidence_source",
)
# the decisions that reject the version they were made on (a person wanted it otherwise)
REJECTING = {DecisionAction.comment.value, DecisionAction.reject.value, DecisionAction.edit.value}


@dataclass(frozen=True)
class ExportFilter:
    since: datetime | None = None  # decided at or after
    until: datetime | None = None  # decided before
    profile: str | None = None
    tag: str | None = None
    decision: DecisionAction | None = None
    owner: str | None = None  # a service's token id: its own runs only

    def keeps(self, item: ReviewItem, run: Run) -> bool:
        if self.profile is not None and profile_of(run) != self.profile:
            return False
        if self.tag is not None and self.tag not in (run.tags or []):
            return False
        action = (item.decision or {}).get("action")
        return self.decision is None or action == self.decision.value


def profile_of(run: Run) -> str:
    return str((run.policy or {}).get("profile") or "default")


def _meta(item: ReviewItem, run: Run, **extra: Any) -> dict[str, Any]:
    decision = item.decision or {}
    return {
        "run_id": run.id,
        "review_id": item.id,
        "round": item.round,
        "task_kind": run.kind,
        "profile": profile_of(run),
        "tags": list(run.tags or []),
        "review_kind": item.kind,
        "decision": decision.get("action"),
        "reviewer": decision.get("author") or "",
        "decided_at": item.resolved_at.isoformat() if item.resolved_at else None,
        **extra,
    }


def _edited(rounds: list[Round], item: ReviewItem) -> Round | None:
    """The version a person's edit on ``item`` made."""
    return next(
        (
            r
            for r in rounds
            if r.provenance == "human" and (r.review or {}).get("review_id") == item.id
        ),
        None,
    )


def _approved(item: ReviewItem, rounds: list[Round]) -> Round | None:
    """The version a person approved or edited on this item, if it did either."""
    action = (item.decision or {}).get("action")
    if action == DecisionAction.approve.value:
        return next((r for r in rounds if r.number == item.round), None)
    if action == DecisionAction.edit.value:
        return _edited(rounds, item)
    return None


class DatasetExporter:
    """Reads decided review items page by page, each page in a session of its own."""

    def __init__(self, engine: sa.Engine, page: int = PAGE) -> None:
        self.engine = engine
        self.page = page

    def records(self, kind: ExportKind, filters: ExportFilter) -> Iterator[dict[str, Any]]:
        after = 0
        while True:
            with Session(self.engine) as session:
                batch = self._items(session, filters, after)
                if not batch:
                    return
                after = batch[-1][0].seq or after
                yield from self._page(session, kind, filters, batch)
            if len(batch) < self.page:
                return

    def _items(
        self, session: Session, filters: ExportFilter, after: int
    ) -> list[tuple[ReviewItem, Run]]:
        return aggregates.decided_items(
            session,
            after=after,
            limit=self.page,
            since=filters.since,
            until=filters.until,
            owner=filters.owner,
        )

    def _page(
        self,
        session: Session,
        kind: ExportKind,
        filters: ExportFilter,
        batch: list[tuple[ReviewItem, Run]],
    ) -> Iterator[dict[str, Any]]:
        kept = [(item, run) for item, run in batch if item.decision and filters.keeps(item, run)]
        if not kept:
            return
        run_ids = {run.id for _, run in kept}
        rounds = aggregates.rounds_by_run(session, run_ids)
        if kind is ExportKind.chat:
            for item, run in kept:
                yield from self._chat(item, run, rounds.get(run.id, []))
        elif kind is ExportKind.preference:
            people = self._approvals(session, run_ids, rounds)
            for item, run in kept:
                yield from self._preference(item, run, rounds.get(run.id, []), people)
        else:
            judged = judgements.by_review(session, {item.id for item, _ in kept})
            for item, run in kept:
                yield from self._critique(item, run, rounds.get(run.id, []), judged)

    @staticmethod
    def _chat(item: ReviewItem, run: Run, rounds: list[Round]) -> Iterator[dict[str, Any]]:
        version = _approved(item, rounds)
        if version is None:
            return
        yield {
            "messages": [
                {"role": "user", "content": run.task},
                {"role": "assistant", "content": version.output},
            ],
            # who wrote it: "actor" (a model), "human" (a person's edit), "given" (the run's
            # creator's text, approved by a person)
            **_meta(item, run, output_round=version.number, output_provenance=version.provenance),
        }

    @staticmethod
    def _approvals(
        session: Session, run_ids: set[str], rounds: dict[str, list[Round]]
    ) -> dict[str, list[tuple[int, Round]]]:
        """Per run, the versions people approved or edited, with the deciding item's seq."""
        out: dict[str, list[tuple[int, Round]]] = {}
        query = (
            select(ReviewItem)
            .where(
                col(ReviewItem.run_id).in_(run_ids),
                col(ReviewItem.status) == ReviewStatus.resolved.value,
            )
            .order_by(col(ReviewItem.seq))
        )
        for item in session.exec(query):
            version = _approved(item, rounds.get(item.run_id, []))
            if version is not None:
                out.setdefault(item.run_id, []).append((item.seq or 0, version))
        return out

    @staticmethod
    def _preference(
        item: ReviewItem,
        run: Run,
        rounds: list[Round],
        people: dict[str, list[tuple[int, Round]]],
    ) -> Iterator[dict[str, Any]]:
        """A version a person commented on, rejected or edited, against the next version a
        person approved or edited in the same run (an edit: the edit itself)."""
        action = (item.decision or {}).get("action")
        if action not in REJECTING:
            return
        rejected = next((r for r in rounds if r.number == item.round), None)
        if rejected is None:
            return
        later = [v for seq, v in people.get(run.id, []) if seq >= (item.seq or 0)]
        chosen = later[0] if later else None
        if chosen is None or chosen.output == rejected.output:
            return
        yield {
            "prompt": run.task,
            "chosen": chosen.output,
            "rejected": rejected.output,
            **_meta(
                item,
                run,
                chosen_round=chosen.number,
                rejected_round=rejected.number,
                comment=(item.decision or {}).get("comment"),
            ),
        }

    @staticmethod
    def _critique(
        item: ReviewItem,
        run: Run,
        rounds: list[Round],
        judged: dict[str, list[CriticJudgement]],
    ) -> Iterator[dict[str, Any]]:
        critiqued = next(
            (
                r
                for n in (item.round, item.round - 1)
                for r in rounds
                if r.number == n and r.critique
            ),
            None,
        )
        if critiqued is None or critiqued.critique is None:
            return
        critique = critiqued.critique
        words = {j.issue: j for j in judged.get(item.id, []) if j.round == critiqued.number}
        issues = []
        for index, issue in enumerate(critique.get("issues") or []):
            judgement = words.get(index)
            issues.append(
                {
                    "index": index,
                    **{name: issue.get(name) for name in ISSUE_FIELDS},
                    "judgement": None
                    if judgement is None
                    else {"verdict": judgement.verdict, "reason": judgement.reason},
                }
            )
        yield {
            "prompt": run.task,
            "output": critiqued.output,
            "verdict": critique.get("verdict"),
            "confidence": critique.get("confidence"),
            "reflection": critique.get("reflection") or "",
            "issues": issues,
            **_meta(
                item,
                run,
                critiqued_round=critiqued.number,
                agreed_with_critic=(item.decision or {}).get("agreed_with_critic"),
            ),
        }
