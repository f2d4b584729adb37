"""Best of N: round 1 drafts N answers in parallel, scores each, and keeps the best.

Every draft is evaluated (tests or schema, when the run has an evaluator) and critiqued;
they are ranked by the evaluation first (passing beats not evaluated beats failing), then
the Critic's verdict (pass > revise > escalate), then fewer critical, then fewer major
issues; ties go to the earlier draft. All of it runs inside the ``act`` step, each call
with its own idempotency key (``{run}:1:actor:d{k}``, ``{run}:1:evaluator:d{k}``,
``{run}:1:critic:d{k}``), so a recovered step gets every finished call replayed by its peer
instead of repeated. Round 1's evaluate and critique steps then reuse the chosen draft's
evaluation and critique instead of asking again.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from orchestrator.engine.policy import output_hash
from orchestrator.engine.research import for_critic
from orchestrator.evaluators.base import EvaluationJob, Evaluator
from shared.contracts import ActorResult, CritiqueRequest, CritiqueResult, DraftRequest, Evaluation

T = TypeVar("T")
Retry = Callable[[str, Callable[[], Awaitable[T]]], Awaitable[T]]

# Drafts are spread evenly around the Actor's default draft temperature (0.7), STEP apart,
# clamped to [0, 2]: N=2 -> 0.55, 0.85; N=3 -> 0.4, 0.7, 1.0; N=5 -> 0.1 ... 1.3.
CENTER_TEMPERATURE = 0.7
STEP = 0.3
_VERDICT_RANK = {"pass": 0, "revise": 1, "escalate": 2}


def temperatures(n: int) -> list[float | None]:
    """One temperature per draft; a single draft keeps the Actor's configured one (None)."""
    if n <= 1:
        return [None]
    middle = (n - 1) / 2
    spread = (CENTER_TEMPERATURE + (k - middle) * STEP for k in range(n))
    return [round(min(2.0, max(0.0, t)), 2) for t in spread]


@dataclass
class Candidate:
    index: int
    temperature: float | None
    key: str
    result: ActorResult
    critic_key: str
    evaluation: dict[str, Any] | None = None
    critique: CritiqueResult | None = None

    @property
    def passed(self) -> bool | None:
        return None if self.evaluation is None else bool(self.evaluation["passed"])

    def issues_by_severity(self) -> dict[str, int]:
        counts = {"critical": 0, "major": 0, "minor": 0}
        for issue in self.critique.issues if self.critique else []:
            counts[issue.severity.value] += 1
        return counts

    def rank(self) -> tuple[int, int, int, int, int]:
        """Lower is better."""
        evaluation = {True: 0, None: 1, False: 2}[self.passed]
        verdict = _VERDICT_RANK[self.critique.verdict.value] if self.critique else 3
        issues = self.issues_by_severity()
        return evaluation, verdict, issues["critical"], issues["major"], self.index


def choose(candidates: list[Candidate]) -> Candidate:
    return min(candidates, key=Candidate.rank)


async def make(
    request: DraftRequest,
    n: int,
    *,
    run_id: str,
    draft: Callable[[DraftRequest, str], Awaitable[ActorResult]],
    critique: Callable[[CritiqueRequest, str], Awaitable[CritiqueResult]],
    critique_template: CritiqueRequest,
    evaluator: Evaluator | None,
    job_template: EvaluationJob,
    retry: Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[Any]],
) -> list[Candidate]:
    """Draft, evaluate and critique N candidates concurrently. A draft whose peer refused
    it is left out; when every draft failed, the first failure is raised."""

    async def one(index: int, temperature: float | None) -> Candidate:
        key = f"{run_id}:1:actor:d{index}"
        ask = request.model_copy(update={"temperature": temperature})
        result: ActorResult = await retry("actor", lambda: draft(ask, key))
        candidate = Candidate(index, temperature, key, result, f"{run_id}:1:critic:d{index}")
        if evaluator is not None:
            job = dataclasses.replace(job_template, output=result.output)
            ekey = f"{run_id}:1:evaluator:d{index}"
            outcome = await retry("sandbox", lambda: evaluator.evaluate(job, key=ekey))
            candidate.evaluation = outcome.as_dict()
        evaluation = (
            Evaluation(
                passed=bool(candidate.evaluation["passed"]),
                summary=str(candidate.evaluation["summary"])[:8000],
            )
            if candidate.evaluation is not None
            else None
        )
        judge = critique_template.model_copy(
            update={
                "output": result.output,
                "evaluation": evaluation,
                "uncertainties": for_critic(result.uncertainties),
            }
        )
        candidate.critique = await retry("critic", lambda: critique(judge, candidate.critic_key))
        return candidate

    outcomes = await asyncio.gather(
        *(one(k, t) for k, t in enumerate(temperatures(n))), return_exceptions=True
    )
    candidates = [o for o in outcomes if isinstance(o, Candidate)]
    if not candidates:
        failure = next(o for o in outcomes if isinstance(o, BaseException))
        raise failure
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome  # cancellation and the like are not a draft's failure
    return candidates


def trajectory(candidates: list[Candidate], chosen: Candidate) -> list[dict[str, Any]]:
    """What round 1 keeps of every draft (the ``drafts`` field)."""
    entries = []
    for c in candidates:
        critic_usage = c.critique.usage if c.critique else None
        cost = (c.result.usage.cost_usd or 0.0) + (
            (critic_usage.cost_usd or 0.0) if critic_usage else 0.0
        )
        entries.append(
            {
                "index": c.index,
                "temperature": c.temperature,
                "output": c.result.output,
                "output_hash": output_hash(c.result.output),
                "passed": c.passed,
                "evaluation": c.evaluation,
                "verdict": c.critique.verdict.value if c.critique else None,
                "issues_by_severity": c.issues_by_severity(),
                "critique": (
                    c.critique.model_dump(mode="json", exclude={"usage", "exchanges"})
                    if c.critique
                    else None
                ),
                "usage": {
                    "actor": c.result.usage.model_dump(mode="json"),
                    "critic": critic_usage.model_dump(mode="json") if critic_usage else None,
                },
                "cost_usd": round(cost, 8),
                "chosen": c is chosen,
                "critic_key": c.critic_key,
            }
        )
    return entries


def _chosen(drafts: list[dict[str, Any]] | None, digest: str) -> dict[str, Any] | None:
    entry = next((d for d in drafts or [] if d.get("chosen")), None)
    return entry if entry is not None and entry["output_hash"] == digest else None


def chosen_evaluation(drafts: list[dict[str, Any]] | None, digest: str) -> dict[str, Any] | None:
    """The chosen draft's evaluation, when the round still holds that draft."""
    entry = _chosen(drafts, digest)
    return entry["evaluation"] if entry is not None else None


def chosen_critique(
    drafts: list[dict[str, Any]] | None, digest: str
) -> tuple[str, CritiqueResult] | None:
    """The chosen draft's critique and its call key, when the round still holds that draft."""
    entry = _chosen(drafts, digest)
    if entry is None or entry["critique"] is None:
        return None
    usage = entry["usage"]["critic"]
    result = CritiqueResult.model_validate({**entry["critique"], "usage": usage})
    return str(entry["critic_key"]), result
