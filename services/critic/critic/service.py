"""The Critic's behaviour: a structured verdict whose quotes are checked against the output."""

from __future__ import annotations

import re

from critic.rubrics import RUBRICS
from shared.contracts import (
    BindingCheck,
    Critique,
    CritiqueIssue,
    CritiqueRequest,
    CritiqueResult,
    ReflectionSource,
    Stage,
)
from shared.logging import get_logger
from shared.prompting import PromptBook
from shared.providers import ModelCall, ModelProvider

SCHEMA_NAME = "critique"
log = get_logger("crosscheck.critic")
_SPACE = re.compile(r"\s+")


def _squash(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def quote_found(quote: str, output: str) -> bool:
    """A quote counts when it is a span of the output, up to runs of white space."""
    return quote in output or _squash(quote) in _squash(output)


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def binding_checks(points: list[str], value: Critique, output: str) -> list[BindingCheck]:
    """One check per reviewer point, in the points' order. A point the Critic did not check
    (even after the repair) counts as not satisfied; a quote not in the output is dropped."""
    checks = []
    for point in points:
        found = next((c for c in value.binding_checks if _same(c.point, point)), None)
        if found is None:
            checks.append(BindingCheck(point=point, satisfied=False, quote=None))
            continue
        quote = found.quote if found.quote and quote_found(found.quote, output) else None
        checks.append(BindingCheck(point=point, satisfied=found.satisfied, quote=quote))
    return checks


class CriticService:
    def __init__(
        self, provider: ModelProvider, *, model: str, temperature: float, max_tokens: int
    ) -> None:
        self.provider = provider
        self.prompts = PromptBook("critic")
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens

    async def critique(self, request: CritiqueRequest) -> CritiqueResult:
        binding = [r for r in request.reflections if r.source is ReflectionSource.human]
        advisory = [r for r in request.reflections if r.source is not ReflectionSource.human]
        call = ModelCall(
            stage=Stage.critique,
            model=self.model,
            temperature=self.temperature,
            system=self.prompts.render("system.j2", rubric=RUBRICS[request.kind]),
            user=self.prompts.render(
                "critique.j2",
                round=request.round,
                task=request.task,
                kind=request.kind.value,
                evaluation=request.evaluation,
                reflections=request.reflections,
                binding=binding,
                advisory=advisory,
                points=request.binding_points,
                output=request.output,
            ),
            max_tokens=self.max_tokens,
        )

        def check(value: Critique) -> list[str]:
            problems = [
                f"issue {i} quotes text that is not in the candidate output: {issue.quote!r}; "
                "copy the span exactly, or use null"
                for i, issue in enumerate(value.issues)
                if issue.quote and not quote_found(issue.quote, request.output)
            ]
            checked = [c.point for c in value.binding_checks]
            problems += [
                f"`binding_checks` has no entry for the reviewer point {point!r}: add one that "
                "copies the point exactly, says whether this version satisfies it, and quotes "
                "the span that shows it"
                for point in request.binding_points
                if not any(_same(point, seen) for seen in checked)
            ]
            return problems

        reply = await self.provider.structured(call, Critique, SCHEMA_NAME, check=check)
        issues = [self._verified(issue, request.output) for issue in reply.value.issues]
        return CritiqueResult(
            **reply.value.model_dump(exclude={"issues", "binding_checks"}),
            issues=issues,
            binding_checks=binding_checks(request.binding_points, reply.value, request.output),
            usage=reply.usage,
            exchanges=reply.exchanges,
        )

    @staticmethod
    def _verified(issue: CritiqueIssue, output: str) -> CritiqueIssue:
        """Keep the promise that a quote is a span of the output: drop quotes that are not."""
        if issue.quote and not quote_found(issue.quote, output):
            log.info("dropping a quote the critic did not copy from the output")
            return issue.model_copy(update={"quote": None})
        return issue
