"""The Critic's behaviour: a structured verdict, at a chosen depth, under a chosen profile,
whose quotes are checked against the output."""

from __future__ import annotations

import re
from collections.abc import Awaitable
from dataclasses import dataclass, field

from critic.profiles import OTHER_ERROR_TYPE, Profile, ProfileBook, Risk
from shared import deadline
from shared.contracts import (
    BindingCheck,
    Critique,
    CritiqueIssue,
    CritiqueRequest,
    CritiqueResult,
    Depth,
    ErrorClass,
    ModelExchange,
    ReflectionSource,
    Stage,
    Usage,
    Verdict,
)
from shared.errors import AppError, BudgetExceeded, InvalidModelOutput, UpstreamError
from shared.logging import get_logger
from shared.prompting import PromptBook
from shared.providers import ModelCall, ModelProvider
from shared.providers.base import StructuredReply
from shared.replay.journal import CallJournal, journalled
from shared.verdicts import pass_refusals

SCHEMA_NAME = "critique"
MAX_L3_ROUNDS = 2
# What a critique's reply needs, in output tokens: its fixed fields (verdict, confidence,
# reflection, justification, queries), each issue it may list (the span, the suggestion, the
# corrected span) and each reviewer point it checks. A fixed 256 cut three issues off.
CRITIQUE_BASE_TOKENS = 400
ISSUE_TOKENS = 200
POINT_TOKENS = 100
EXPECTED_ISSUES = {Depth.L1: 3, Depth.L2: 5, Depth.L3: 8}


def critique_cap(plan: DepthPlan, ceiling: int, *, points: int, retested: int) -> int:
    """The output-token cap of one critique call: what the depth's issues, the reviewer
    points and the issues an L3 second round re-tests need, within the depth's cap setting
    and the service's (which also bounds the one retry of a reply cut off by its cap)."""
    need = (
        CRITIQUE_BASE_TOKENS
        + ISSUE_TOKENS * (EXPECTED_ISSUES.get(plan.depth, 5) + retested)
        + POINT_TOKENS * points
    )
    return max(1, min(need, plan.max_tokens, ceiling))


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


def refusal_problems(request: CritiqueRequest, value: Critique) -> list[str]:
    """An accepted refusal must name an issue the Actor declined."""
    declined = {d.issue for d in request.declined}
    return [
        f"`accepted_refusals` names {issue!r}, which is not a declined issue; use only the ids "
        f"listed in <declined> ({', '.join(sorted(declined)) or 'none'})"
        for issue in value.accepted_refusals
        if issue not in declined
    ]


MAX_SEARCH_QUERIES = 3


def asks_for_queries(request: CritiqueRequest, depth: Depth) -> bool:
    """Search queries are asked for (and kept) at depth L2, or when the caller runs research."""
    return depth is Depth.L2 or request.research


def search_queries(queries: list[str]) -> list[str]:
    """White space tidied, blanks dropped, at most ``MAX_SEARCH_QUERIES``; the Research
    service's gate judges the rest."""
    tidy = [" ".join(q.split()) for q in queries]
    return [q for q in tidy if q][:MAX_SEARCH_QUERIES]


_EVIDENCE_REF = re.compile(r"^\s*evidence:\s*\[?(\d+)\]?\s*$", re.IGNORECASE)


def evidence_problems(request: CritiqueRequest, value: Critique) -> list[str]:
    """An issue resting on research evidence must name a source the request gave."""
    if not request.evidence:
        return []
    numbers = {e.n for e in request.evidence}
    problems = []
    for i, issue in enumerate(value.issues):
        match = _EVIDENCE_REF.match(issue.evidence_source or "")
        if match and int(match.group(1)) not in numbers:
            problems.append(
                f"issue {i} cites evidence:[{match.group(1)}], which is not one of the numbered "
                f"sources in <evidence> ({', '.join(str(n) for n in sorted(numbers))})"
            )
    return problems


def known_evidence(issue: CritiqueIssue, request: CritiqueRequest) -> CritiqueIssue:
    """Keep the promise that ``evidence:[n]`` names a source the request gave: with evidence
    given, a number still unknown after the repair is dropped (set to null), as an inexact
    quote is."""
    match = _EVIDENCE_REF.match(issue.evidence_source or "")
    if not request.evidence or match is None:
        return issue
    if int(match.group(1)) in {e.n for e in request.evidence}:
        return issue
    return issue.model_copy(update={"evidence_source": None})


@dataclass(frozen=True)
class DepthPlan:
    """What one depth may spend: its output-token cap and its latency budget."""

    depth: Depth
    max_tokens: int
    budget_s: float


class DepthTable:
    """The concrete depths (L1, L2, L3) and how ``auto`` picks one."""

    AUTO_BY_RISK = {Risk.low: Depth.L1, Risk.medium: Depth.L2, Risk.high: Depth.L3}
    ORDER = (Depth.L1, Depth.L2, Depth.L3)

    def __init__(self, plans: dict[Depth, DepthPlan]) -> None:
        self.plans = plans

    def __getitem__(self, depth: Depth) -> DepthPlan:
        return self.plans[depth]

    def resolve(self, requested: Depth, profile: Profile, budget_s: float | None) -> Depth:
        """``auto``: the profile's risk sets the deepest depth, and the caller's latency
        budget steps it down to the deepest one whose own budget fits (L1 at least)."""
        if requested is not Depth.auto:
            return requested
        depth = self.AUTO_BY_RISK[profile.risk]
        while budget_s is not None and depth is not Depth.L1 and self[depth].budget_s > budget_s:
            depth = self.ORDER[self.ORDER.index(depth) - 1]
        return depth


@dataclass
class _Spent:
    """Tokens, cost and time of every model call behind one critique."""

    usage: Usage | None = None
    exchanges: list[ModelExchange] | None = None
    journal: CallJournal | None = None  # a keyed critique's calls, replayed by a retry
    clamped: list[str] = field(default_factory=list)  # advisory values brought into range

    def failed(self, exc: AppError) -> None:
        """Count the calls behind a failed model request (their usage rides on the error)."""
        usage = exc.extra.get("usage")
        if usage is not None:
            exchanges = exc.extra.get("exchanges") or []
            self.add(
                Usage.model_validate(usage), [ModelExchange.model_validate(e) for e in exchanges]
            )

    def add(self, usage: Usage, exchanges: list[ModelExchange]) -> None:
        self.exchanges = [*(self.exchanges or []), *exchanges]
        if self.usage is None:
            self.usage = usage
            return
        cost = (
            None
            if self.usage.cost_usd is None or usage.cost_usd is None
            else self.usage.cost_usd + usage.cost_usd
        )
        self.usage = self.usage.model_copy(
            update={
                "input_tokens": self.usage.input_tokens + usage.input_tokens,
                "output_tokens": self.usage.output_tokens + usage.output_tokens,
                "cost_usd": cost,
                "latency_ms": self.usage.latency_ms + usage.latency_ms,
                "attempts": self.usage.attempts + usage.attempts,
                "cut_off_calls": self.usage.cut_off_calls + usage.cut_off_calls,
            }
        )


class CriticService:
    def __init__(
        self,
        provider: ModelProvider,
        *,
        model: str,
        temperature: float,
        max_tokens: int,
        profiles: ProfileBook,
        depths: DepthTable,
    ) -> None:
        self.provider = provider
        self.prompts = PromptBook("critic")
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.profiles = profiles
        self.depths = depths

    async def critique(
        self, request: CritiqueRequest, journal: CallJournal | None = None
    ) -> CritiqueResult:
        """Judge ``request.output``. With a ``journal`` (a keyed request), each model call is
        journalled as it returns, so a retry after this process died pays for none twice.
        A critique that fails after calling the model says what those calls cost: the
        error's ``usage`` (rendered in the error body), for the caller to bill."""
        spent = _Spent(journal=journal)
        try:
            return await self._critique(request, spent)
        except AppError as exc:
            if spent.usage is not None:
                exc.extra["usage"] = spent.usage.model_dump(mode="json")
                exc.extra["exchanges"] = [e.model_dump(mode="json") for e in spent.exchanges or []]
            raise

    async def _critique(self, request: CritiqueRequest, spent: _Spent) -> CritiqueResult:
        profile = self.profiles.choose(request.profile, request.kind)
        requested = request.depth or profile.default_depth
        # the deepest depth whose budget fits the run's latency budget and the step's deadline
        budgets = [b for b in (request.latency_budget_s, deadline.remaining()) if b is not None]
        depth = self.depths.resolve(requested, profile, min(budgets) if budgets else None)
        degraded_reason: str | None = None
        try:
            value, rounds = await self._at_depth(request, profile, depth, spent)
        except (UpstreamError, InvalidModelOutput) as exc:
            if depth is Depth.L1:
                raise
            degraded_reason = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.warning(
                "critique degraded to L1",
                profile=profile.name,
                depth=depth.value,
                reason=degraded_reason,
            )
            value, rounds = await self._at_depth(request, profile, Depth.L1, spent)
        assert spent.usage is not None
        issues = [
            known_evidence(self._verified(issue, request.output, profile), request)
            for issue in value.issues
        ]
        declined = {d.issue for d in request.declined}
        asked = asks_for_queries(request, Depth.L1 if degraded_reason else depth)
        # still no pass after the repair re-ask: it counts as `revise`, and says why
        refusals = pass_refusals(
            {**value.model_dump(mode="json"), "issues": [i.model_dump() for i in issues]},
            dimensions=profile.dimension_names,
            min_confidence=request.min_pass_confidence,
        )
        if refusals:
            log.info("a pass that is no pass counts as revise", profile=profile.name)
            value = value.model_copy(
                update={
                    "verdict": Verdict.revise,
                    "error_class": ErrorClass.logic
                    if value.error_class is ErrorClass.none
                    else value.error_class,
                }
            )
        return CritiqueResult(
            **value.model_dump(
                exclude={"issues", "binding_checks", "accepted_refusals", "queries"}
            ),
            issues=issues,
            dimensions=profile.dimension_names,
            refused_pass=refusals,
            queries=search_queries(value.queries) if asked else [],
            accepted_refusals=[i for i in dict.fromkeys(value.accepted_refusals) if i in declined],
            binding_checks=binding_checks(request.binding_points, value, request.output),
            usage=spent.usage,
            exchanges=spent.exchanges or [],
            profile=profile.name,
            risk=profile.risk.value,
            depth=(Depth.L1 if degraded_reason else depth).value,
            requested_depth=requested.value,
            degraded=degraded_reason is not None,
            degraded_reason=degraded_reason,
            rounds=rounds,
            knowledge_used=[note.id for note in request.knowledge],
            clamped=spent.clamped,
        )

    async def _at_depth(
        self, request: CritiqueRequest, profile: Profile, depth: Depth, spent: _Spent
    ) -> tuple[Critique, int]:
        """One critique at ``depth`` within its latency budget; L3 takes a second round to
        re-test the issues of the first one."""
        plan = self.depths[depth]
        left = deadline.remaining()
        by_deadline = left is not None and left < plan.budget_s
        try:
            async with deadline.timeout(plan.budget_s):
                value = await self._ask(request, profile, plan, spent, first_round=None)
                if depth is Depth.L3 and value.issues and MAX_L3_ROUNDS > 1:
                    return await self._ask(request, profile, plan, spent, value.issues), 2
        except TimeoutError:
            # final, not worth a retry of the same request: BudgetExceeded
            if by_deadline:
                raise BudgetExceeded(
                    f"the critique at depth {depth.value} ran past its caller's deadline "
                    f"({max(left or 0.0, 0.0):.0f} s were left of it)"
                ) from None
            raise BudgetExceeded(
                f"the critique at depth {depth.value} took longer than its "
                f"{plan.budget_s:g} s budget"
            ) from None
        return value, 1

    async def _ask(
        self,
        request: CritiqueRequest,
        profile: Profile,
        plan: DepthPlan,
        spent: _Spent,
        first_round: list[CritiqueIssue] | None,
    ) -> Critique:
        binding = [r for r in request.reflections if r.source is ReflectionSource.human]
        advisory = [r for r in request.reflections if r.source is not ReflectionSource.human]
        call = ModelCall(
            stage=Stage.critique,
            model=self.model,
            temperature=self.temperature,
            system=self.prompts.render(
                "system.j2", profile=profile, depth_template=f"depth_{plan.depth.value}.j2"
            ),
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
                first_round=first_round,
                knowledge=request.knowledge,
                declined=request.declined,
                output=request.output,
                evidence=request.evidence,
                uncertainties=request.uncertainties,
                ask_queries=asks_for_queries(request, plan.depth),
            ),
            max_tokens=critique_cap(
                plan,
                self.max_tokens,
                points=len(request.binding_points),
                retested=len(first_round or []),
            ),
            max_tokens_ceiling=self.max_tokens,
        )
        needs_evidence = plan.depth is not Depth.L1
        known_types = profile.error_type_names

        def check(value: Critique) -> list[str]:
            problems = [
                f"issue {i} quotes text that is not in the candidate output: {issue.quote!r}; "
                "copy the span exactly, or use null"
                for i, issue in enumerate(value.issues)
                if issue.quote and not quote_found(issue.quote, request.output)
            ]
            problems += [
                f"issue {i} has error_type {issue.error_type!r}; use one of "
                + ", ".join(known_types)
                for i, issue in enumerate(value.issues)
                if issue.error_type not in known_types
            ]
            if needs_evidence:
                problems += [
                    f"issue {i} names no `evidence_source`; at depth {plan.depth.value} every "
                    "issue says what it rests on (task, evaluation, output, knowledge:<id>, "
                    "evidence:<ref>)"
                    for i, issue in enumerate(value.issues)
                    if not (issue.evidence_source or "").strip()
                ]
            problems += value.record_problems()
            problems += [
                f"`verdict` is pass, but {reason}: answer `revise` with the issues, or "
                "`pass` only when none is left"
                for reason in pass_refusals(
                    value.model_dump(mode="json"),
                    dimensions=profile.dimension_names,
                    min_confidence=request.min_pass_confidence,
                )
            ]
            problems += refusal_problems(request, value)
            problems += evidence_problems(request, value)
            checked = [c.point for c in value.binding_checks]
            problems += [
                f"`binding_checks` has no entry for the reviewer point {point!r}: add one that "
                "copies the point exactly, says whether this version satisfies it, and quotes "
                "the span that shows it"
                for point in request.binding_points
                if not any(_same(point, seen) for seen in checked)
            ]
            return problems

        def ask() -> Awaitable[StructuredReply[Critique]]:
            return self.provider.structured(call, Critique, SCHEMA_NAME, check=check)

        try:
            reply, cut_off = await journalled(spent.journal, call, Critique, ask)
            for usage in cut_off:  # tries a dead process sent: paid for, never answered
                spent.add(usage, [])
        except AppError as exc:
            spent.failed(exc)
            raise
        spent.add(reply.usage, reply.exchanges)
        spent.clamped += reply.clamped
        broken = reply.value.record_problems()
        if broken:
            raise InvalidModelOutput(
                f"the critic model '{self.model}' broke the reflection record, even after one "
                f"repair request: {broken[0]}"
            )
        return reply.value

    @staticmethod
    def _verified(issue: CritiqueIssue, output: str, profile: Profile) -> CritiqueIssue:
        """Keep the promise that a quote is a span of the output (drop quotes that are not)
        and that an error type is the profile's (else `other`)."""
        update: dict[str, object] = {}
        if issue.quote and not quote_found(issue.quote, output):
            log.info("dropping a quote the critic did not copy from the output")
            update.update(quote=None, original_text=None)
        if issue.error_type not in profile.error_type_names:
            update["error_type"] = OTHER_ERROR_TYPE
        return issue.model_copy(update=update) if update else issue
