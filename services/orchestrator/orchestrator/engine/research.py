"""Research in the loop: before a round's critique, the claims that need checking are
searched, and the evidence goes to the Critic and to the next revision.

Queries come from the previous critique (its ``queries`` for the claims the Critic could not
verify) and from the version itself (the Actor's ``search_queries``, the ``[UNCERTAIN: ...]``
markers of its output, then its ``uncertainties``), in that order; they are deduplicated
(also against what earlier rounds searched) and capped here, and the Research service's own
gate judges the rest. Each round's evidence is the previous round's, whose numbers never
change (what a version cites stays valid), plus the new sources numbered on. The step is
durable and idempotent: the round keeps what it found (``rounds[].research``), and a step
that runs again after a crash, or a second critique of the same round, reuses it instead of
searching again.

Research never stalls a run: a service that is not configured, unreachable, failing or over
``ORCHESTRATOR_RESEARCH_BUDGET_S`` makes the round ``degraded`` (each query in
``failed_queries`` with the reason), and the critique then runs at L1, marked degraded. The
queries that failed reach every later revision (``unverified``), which must say that their
claims could not be verified; the Actor's uncertainties also reach the Critic, to be checked
especially.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import sqlalchemy as sa
from dbos import DBOS
from sqlmodel import Session

from orchestrator.engine.runtime import current
from orchestrator.readmodel.events import append_event
from orchestrator.readmodel.rounds import ROUNDS, all_rounds, read_round, update_round
from orchestrator.readmodel.runs import read_run
from orchestrator.tracing import traced_step
from shared.citations import CitationReport, validate_citations
from shared.contracts import (
    MAX_EVIDENCE,
    MAX_QUERY_CHARS,
    MAX_REASON_CHARS,
    MAX_UNCERTAINTIES,
    MAX_UNCERTAINTY_CHARS,
    MAX_UNVERIFIED,
    Depth,
    Evidence,
    FailedQuery,
    ResearchRequest,
    ResearchResult,
    ResearchStatus,
    Unverified,
    normalise_query,
)
from shared.orchestration import Policy
from shared.research_client import ResearchClient

MAX_QUERIES = 3  # sent per research step (the service's own cap is RESEARCH_MAX_QUERIES)
_MARKER = re.compile(r"\[UNCERTAIN:\s*([^\]\n]+?)\s*\]", re.IGNORECASE)
_SPACE = re.compile(r"\s+")
_REFERENCE = re.compile(r"^\s*\[\d{1,4}\]:?\s*\S*(?:https?|file)://", re.IGNORECASE)
_HEADING = re.compile(
    r"^\s*(?:#+\s*)?\**(?:references|sources|citations|bibliography|works cited)\**:?\s*$",
    re.IGNORECASE,
)
NOT_CONFIGURED = "no research service is configured (ORCHESTRATOR_RESEARCH_URL is empty)"


def degraded(queries: list[str], reason: str) -> ResearchResult:
    return ResearchResult(
        status=ResearchStatus.degraded,
        failed_queries=[FailedQuery(query=q, reason=reason) for q in queries],
    )


class BudgetedResearch:
    """The Research service's client under the orchestrator's time budget: past
    ``budget_s`` the step goes on without evidence, every query failed with the reason."""

    def __init__(self, client: ResearchClient, budget_s: float) -> None:
        self.client = client
        self.budget_s = budget_s

    async def research(self, request: ResearchRequest) -> ResearchResult:
        try:
            async with asyncio.timeout(self.budget_s):
                return await self.client.research(request)
        except TimeoutError:
            return degraded(
                request.queries,
                f"research took longer than the orchestrator's {self.budget_s:g} s budget "
                "(ORCHESTRATOR_RESEARCH_BUDGET_S)",
            )

    async def aclose(self) -> None:
        await self.client.aclose()


def research_on(policy: Policy, configured: bool, depth: str | None = None) -> bool:
    """``policy.research``: true on at any depth, false off, null on when a research service
    is configured and the critique's ``depth`` (``runs.critique_depth``, resolved from the
    profile when the run was created) is L2 or L3. A run whose depth was not resolved (the
    Critic's profiles were unavailable then) researches when ``policy.depth`` is L2."""
    if policy.research is not None:
        return policy.research
    if depth is not None:
        return configured and depth in (Depth.L2.value, Depth.L3.value)
    return configured and policy.depth is Depth.L2


def markers(output: str) -> list[str]:
    """The text of each ``[UNCERTAIN: ...]`` marker of an output, in order."""
    return [m.group(1) for m in _MARKER.finditer(output)]


def collect_queries(*groups: list[str], searched: list[str] | None = None) -> list[str]:
    """The queries of ``groups`` in order, tidied, without blanks or duplicates (after case,
    spacing and edge punctuation) and without those ``searched`` in earlier rounds (their
    evidence is carried on), each cut to the wire limit, at most ``MAX_QUERIES``."""
    seen: set[str] = {normalise_query(q) for q in searched or []}
    out: list[str] = []
    for group in groups:
        for raw in group:
            query = _SPACE.sub(" ", raw).strip()[:MAX_QUERY_CHARS]
            key = normalise_query(query)
            if not key or key in seen:
                continue
            seen.add(key)
            out.append(query)
            if len(out) == MAX_QUERIES:
                return out
    return out


def for_critic(uncertainties: list[str] | None) -> list[str]:
    """A version's uncertainties as the Critic receives them: tidied, without blanks or
    duplicates, each cut to ``MAX_UNCERTAINTY_CHARS``, at most ``MAX_UNCERTAINTIES``."""
    seen: set[str] = set()
    out: list[str] = []
    for raw in uncertainties or []:
        text = _SPACE.sub(" ", raw).strip()[:MAX_UNCERTAINTY_CHARS]
        key = normalise_query(text)
        if key and key not in seen:
            seen.add(key)
            out.append(text)
    return out[:MAX_UNCERTAINTIES]


_EARLIER_RESEARCH = (
    sa.select(ROUNDS.c.research)
    .where(
        ROUNDS.c.run_id == sa.bindparam("run_id"),
        ROUNDS.c.number < sa.bindparam("number"),
    )
    .order_by(ROUNDS.c.number)
)


def unverified_before(session: Session, run_id: str, round: int) -> list[Unverified]:
    """The queries that failed in the research of the rounds before ``round``, with their
    reasons, once each: their claims could not be verified (a failed query is not searched
    again), so every later revision is told, at most ``MAX_UNVERIFIED``."""
    rows = session.connection().execute(_EARLIER_RESEARCH, {"run_id": run_id, "number": round})
    seen: set[str] = set()
    out: list[Unverified] = []
    for (found,) in rows:
        for failed in (found or {}).get("failed_queries") or []:
            query = _SPACE.sub(" ", str(failed.get("query") or "")).strip()
            key = normalise_query(query)
            if not key or key in seen:
                continue
            seen.add(key)
            reason = str(failed.get("reason") or "no reason given")
            out.append(Unverified(query=query[:MAX_QUERY_CHARS], reason=reason[:MAX_REASON_CHARS]))
            if len(out) == MAX_UNVERIFIED:
                return out
    return out


def merge(earlier: list[Evidence], found: list[Evidence]) -> list[Evidence]:
    """The evidence of earlier rounds keeps its numbers (what the versions already cite);
    sources found now with a URL not seen yet follow, numbered on, up to ``MAX_EVIDENCE``."""
    merged = list(earlier[:MAX_EVIDENCE])
    urls = {e.url for e in merged}
    for item in found:
        if len(merged) >= MAX_EVIDENCE:
            break
        if item.url in urls:
            continue
        urls.add(item.url)
        merged.append(item.model_copy(update={"n": len(merged) + 1}))
    return merged


def record(queries: list[str], result: ResearchResult, earlier: list[Evidence]) -> dict[str, Any]:
    """What the round keeps (``rounds[].research``), the shape the console reads: the
    evidence is the previous round's plus what this step found."""
    return {
        "status": result.status.value,
        "queries": queries,
        "evidence": [e.model_dump(mode="json") for e in merge(earlier, result.evidence)],
        "failed_queries": [f.model_dump(mode="json") for f in result.failed_queries],
    }


def evidence_of(research: dict[str, Any] | None) -> list[Evidence]:
    if not research:
        return []
    return [Evidence.model_validate(e) for e in research.get("evidence") or []]


def is_degraded(research: dict[str, Any] | None) -> bool:
    return research is not None and research.get("status") == ResearchStatus.degraded.value


def degraded_reason(research: dict[str, Any]) -> str:
    failed = research.get("failed_queries") or []
    first = str(failed[0].get("reason")) if failed else "no reason given"
    return f"research degraded, {len(failed)} failed query(ies): {first[:300]}"


def reference_lines(output: str) -> list[str]:
    """The lines of an output's reference list (``[n] URL`` and a heading above them): the
    diff lock keeps them, as a revision given evidence is asked to add them."""
    return [line for line in output.splitlines() if _REFERENCE.match(line) or _HEADING.match(line)]


def check_citations(
    output: str,
    evidence: list[Evidence],
    previous: str,
    require: bool,
    *,
    task: str = "",
    flagged: list[str] | None = None,
) -> tuple[CitationReport, dict[str, Any]]:
    """The citation check of a revision against the evidence it was given (each ``[n]``
    bound to evidence ``n``'s URL; names known from the task and the evidence; ``flagged``:
    the previous critique's quotes), and what the round keeps of it (``rounds[].citations``)."""
    report = validate_citations(
        output,
        {e.n: e.url for e in evidence},
        previous=previous,
        require_citations=require,
        task=task,
        sources=[text for e in evidence for text in (e.snippet, e.distilled or "") if text],
        flagged=flagged or [],
    )
    kept = {
        "ok": report.ok,
        "cited": report.cited,
        "problems": [p.model_dump(mode="json") for p in report.problems],
    }
    return report, kept


def citations_reason(citations: dict[str, Any] | None) -> str:
    """What a round's failed citation check found, in a line for the run's ``detail``
    ("" when the check passed or did not run)."""
    if not citations or citations.get("ok", True):
        return ""
    problems = [str(p.get("message") or p.get("kind")) for p in citations.get("problems") or []]
    shown = "; ".join(m[:200] for m in problems[:3]) or "no problem recorded"
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return f"citations failed the check: {shown}{more}"


@DBOS.step(name="crosscheck.research")
@traced_step
async def research(run_id: str, round: int) -> dict[str, Any]:
    """Search for this round's claims before its critique, and keep the evidence on the
    round; a round that has it already (a step run again, a second critique) reuses it."""
    rt = current()

    def prepare(session: Session) -> tuple[str, list[str], list[Evidence]] | dict[str, Any]:
        run = read_run(session, run_id)
        row = read_round(session, run_id, round)
        assert row is not None, "research needs the round's version"
        if row.research is not None:
            return row.research
        previous = read_round(session, run_id, round - 1)
        asked = list((previous.critique or {}).get("queries") or []) if previous else []
        own = [*(row.search_queries or []), *markers(row.output), *(row.uncertainties or [])]
        earlier = evidence_of(previous.research) if previous else []
        searched = [
            q
            for r in all_rounds(session, run_id)
            if r.number < round and r.research
            for q in r.research.get("queries") or []
        ]
        return run.task, collect_queries(asked, own, searched=searched), earlier

    prepared = await rt.db.run(prepare)
    if isinstance(prepared, dict):
        return _summary(prepared)
    task, queries, earlier = prepared
    if not queries:
        result = ResearchResult(status=ResearchStatus.ok)
    elif rt.research is None:
        result = degraded(queries, NOT_CONFIGURED)
    else:
        result = await rt.research.research(ResearchRequest(task=task, queries=queries))
    found = record(queries, result, earlier)

    def commit(session: Session) -> dict[str, Any]:
        row = read_round(session, run_id, round)
        assert row is not None
        if row.research is not None:  # written by an earlier run of this step
            return row.research
        update_round(session, run_id, round, {"research": found})
        append_event(
            session,
            run_id,
            "research.completed",
            {
                "round": round,
                "status": found["status"],
                "queries": len(found["queries"]),
                "evidence": len(found["evidence"]),
                "failed_queries": len(found["failed_queries"]),
            },
        )
        return found

    kept = await rt.db.run(commit)
    rt.hub.notify(frozenset({"research.completed"}))
    if kept is found:
        rt.metrics.research_steps.labels(found["status"]).inc()
        rt.metrics.research_evidence.inc(len(found["evidence"]) - len(earlier))
    return _summary(kept)


def _summary(found: dict[str, Any]) -> dict[str, Any]:
    """The step's recorded result: counts only (the evidence is on the round)."""
    return {
        "status": found["status"],
        "evidence": len(found.get("evidence") or []),
        "failed_queries": len(found.get("failed_queries") or []),
    }
