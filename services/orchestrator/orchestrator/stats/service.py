"""Stats over the read model, portable across SQLite and Postgres.

The queries are the read model's (``readmodel/aggregates.py``); this module folds their
rows. Counts are plain ``GROUP BY`` queries. Per-provider figures need fields inside the
``model_calls.usage`` JSON and percentiles, which the two dialects spell differently, so
they are folded in Python over one streamed select of the newest ``MAX_CALLS`` calls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlmodel import Session

from orchestrator.engine import settled
from orchestrator.readmodel import aggregates
from orchestrator.tables import utcnow
from shared.errors import BadRequest
from shared.orchestration import (
    ADOPTION_BAND,
    AgreementStats,
    IssueAgreementStats,
    JudgementVerdict,
    ProviderStats,
    RoundsBucket,
    RunStatus,
    StatsPublic,
    StopReason,
)

MAX_CALLS = 100_000


def normalize_since(since: datetime | None) -> datetime | None:
    """UTC, aware; a time without an offset is taken as UTC."""
    if since is None:
        return None
    if since.tzinfo is None:
        return since.replace(tzinfo=UTC)
    try:
        return since.astimezone(UTC)
    except OverflowError as exc:
        raise BadRequest(f"since is out of range once converted to UTC: {since}") from exc


def percentile(ordered: Sequence[float], share: float) -> float:
    """Linear interpolation between closest ranks of sorted values (0.0 when empty)."""
    if not ordered:
        return 0.0
    position = share * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class _Fold:
    models: set[str] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: int = 0

    def add(self, usage: dict[str, Any], latency_ms: float) -> None:
        if usage.get("model"):
            self.models.add(str(usage["model"]))
        self.latencies.append(float(latency_ms or 0.0))
        self.input_tokens += int(usage.get("input_tokens") or 0)
        self.output_tokens += int(usage.get("output_tokens") or 0)
        cost = usage.get("cost_usd")
        if cost is None:
            self.unpriced += 1
        else:
            self.cost_usd += float(cost)

    def public(self, provider: str, role: str) -> ProviderStats:
        ordered = sorted(self.latencies)
        total = sum(ordered)
        return ProviderStats(
            provider=provider,
            role=role,
            models=sorted(self.models),
            calls=len(ordered),
            latency_ms_total=round(total, 3),
            latency_ms_avg=round(total / len(ordered), 3) if ordered else 0.0,
            latency_ms_p50=round(percentile(ordered, 0.50), 3),
            latency_ms_p95=round(percentile(ordered, 0.95), 3),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=round(self.cost_usd, 8),
            unpriced_calls=self.unpriced,
        )


class StatsService:
    def __init__(self, max_calls: int = MAX_CALLS) -> None:
        self.max_calls = max_calls

    def compute(
        self, session: Session, since: datetime | None, owner: str | None = None
    ) -> StatsPublic:
        """Over every run, or over the runs ``owner`` (a service's token id) started."""
        since = normalize_since(since)
        scope = aggregates.RunScope(since, owner)  # every query below reads (or joins) runs
        by_status = aggregates.runs_by_status(session, scope)
        by_stop = aggregates.runs_by_stop_reason(session, scope)
        buckets = [
            RoundsBucket(rounds=rounds, runs=count)
            for rounds, count in aggregates.finished_runs_by_rounds(session, scope)
        ]
        # a round's adoption: the share of the previous critique's issues the critique of
        # its revision did not raise again, on the same span or dimension, whatever the
        # Actor answered (engine/discipline.py); a person's edit is not measured
        mean, samples = aggregates.adoption_mean(session, scope)

        folds: dict[tuple[str, str], _Fold] = {}
        calls = 0
        truncated = False
        for role, usage, latency_ms in aggregates.newest_calls(session, scope, self.max_calls + 1):
            if calls == self.max_calls:
                truncated = True
                break
            calls += 1
            doc: dict[str, Any] = dict(usage or {})
            key = (str(doc.get("provider") or "unknown"), role)
            folds.setdefault(key, _Fold()).add(doc, latency_ms)

        agreement: dict[tuple[str, str], list[int]] = {}
        people: set[tuple[str, int]] = set()  # versions a person judged (the trigger rate)
        for run_id, number, decision, critic_info, policy in aggregates.resolved_reviews(
            session, scope
        ):
            if settled.judging(decision):
                people.add((run_id, number))
            agreed = (decision or {}).get("agreed_with_critic")
            if agreed is None:
                continue
            provider = str((critic_info or {}).get("provider") or "unknown")
            profile = str((policy or {}).get("profile") or "default")
            tally = agreement.setdefault((provider, profile), [0, 0])
            tally[0] += 1
            tally[1] += int(bool(agreed))

        by_issue = judgement_agreement(session, scope)
        reflection = self._reflection(session, scope, people)
        guarded = self._over_corrections(session, scope)
        adoption = round(mean, 6) if samples and mean is not None else None
        return StatsPublic(
            **reflection,
            **guarded,
            adoption_in_band=None
            if adoption is None
            else ADOPTION_BAND[0] <= adoption <= ADOPTION_BAND[1],
            since=since,
            generated_at=utcnow(),
            runs_total=sum(by_status.values()),
            runs_by_status=dict(sorted(by_status.items())),
            runs_by_stop_reason=dict(sorted(by_stop.items())),
            rounds_per_run=buckets,
            adoption_rate=adoption,
            adoption_rounds=samples,
            model_calls=calls,
            model_calls_truncated=truncated,
            providers=[
                fold.public(provider, role) for (provider, role), fold in sorted(folds.items())
            ],
            critic_agreement=[
                AgreementStats(
                    provider=provider,
                    profile=profile,
                    decisions=total,
                    agreed=agreed,
                    overruled=total - agreed,
                    rate=round(agreed / total, 4),
                )
                for (provider, profile), (total, agreed) in sorted(agreement.items())
            ],
            critic_issue_agreement=[
                IssueAgreementStats(
                    profile=profile,
                    error_type=error_type,
                    dimension=dimension,
                    judged=total,
                    agreed=agreed,
                    dismissed=total - agreed,
                    rate=round(agreed / total, 4),
                )
                for (profile, error_type, dimension), (total, agreed) in sorted(by_issue.items())
            ],
        )

    @staticmethod
    def _over_corrections(session: Session, scope: aggregates.RunScope) -> dict[str, Any]:
        """The over-correction rate: revised rounds the guard rolled back at least once."""
        revisions = guarded = 0
        for (record,) in aggregates.revisions_guarded(session, scope):
            revisions += 1
            guarded += int(record is not None)
        return {
            "revisions": int(revisions),
            "over_corrections": int(guarded),
            "over_correction_rate": round(guarded / revisions, 6) if revisions else None,
        }

    @staticmethod
    def _reflection(
        session: Session, scope: aggregates.RunScope, people: set[tuple[str, int]]
    ) -> dict[str, Any]:
        """Trigger and degraded-critique rates, folded over the rounds of the period's runs.

        The trigger rate counts settled versions (``engine/settled.py``): revised by a later
        round (rounds are numbered 1..``runs.rounds``) or shipped by a succeeded run; judged
        when critiqued, decided on by a person, or approved as the version that shipped.
        """
        versions = judged = critiqued = critiques = degraded = 0
        by_depth: dict[str, int] = {}
        rows = aggregates.rounds_with_outcome(session, scope)
        for run_id, number, critique, status, stop_reason, final_round, last in rows:
            if critique is not None:
                critiques += 1
                degraded += int(bool(critique.get("degraded")))
                depth = str(critique.get("depth") or "unknown")
                by_depth[depth] = by_depth.get(depth, 0) + 1
            shipped = status == RunStatus.succeeded.value and number == final_round
            if number >= last and not shipped:
                continue  # in flight, or the last version of a run that did not succeed
            versions += 1
            critiqued += int(critique is not None)
            judged += int(
                critique is not None
                or (run_id, number) in people
                or (shipped and stop_reason == StopReason.review_approved.value)
            )
        return {
            "versions": versions,
            "versions_judged": judged,
            "versions_critiqued": critiqued,
            "trigger_rate": round(judged / versions, 6) if versions else None,
            "critiques": critiques,
            "critiques_degraded": degraded,
            "degraded_rate": round(degraded / critiques, 6) if critiques else None,
            "critiques_by_depth": dict(sorted(by_depth.items())),
        }


def judgement_agreement(
    session: Session, scope: aggregates.RunScope
) -> dict[tuple[str, str, str], list[int]]:
    """(profile, error type, dimension) -> [judged, agreed], over the runs ``scope`` keeps."""
    tally: dict[tuple[str, str, str], list[int]] = {}
    for verdict, error_type, dimension, policy in aggregates.judgements_with_policy(session, scope):
        profile = str((policy or {}).get("profile") or "default")
        counts = tally.setdefault((profile, error_type, dimension), [0, 0])
        counts[0] += 1
        counts[1] += int(verdict == JudgementVerdict.agree.value)
    return tally
