"""Pure builders of what the steps send and write: the Actor's revision request, the
Critic's request, and the reflections the loop adds. No database, no peers: the steps load
the values and pass them in."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from orchestrator.engine import discipline, gate
from orchestrator.readmodel.reflections import ReflectionRow
from orchestrator.readmodel.rounds import RoundState
from orchestrator.readmodel.runs import RunState
from shared.contracts import (
    MAX_EVIDENCE,
    CritiqueRequest,
    DeclinedIssue,
    Evaluation,
    Evidence,
    KnowledgeNote,
    ReflectionSource,
    ReviseRequest,
    TaskKind,
    Unverified,
)
from shared.contracts import Reflection as ReflectionDTO
from shared.orchestration import Policy

# A note the act step adds to a revision request has a fixed time: the request must be the
# same bytes when a step cut off after the call runs again (the Actor replays only those).
NOTE_TIME = datetime(2000, 1, 1, tzinfo=UTC)
RETRY_NOTE = (
    "A person asked for another revision of round {round}. Improve it where the task is not "
    "fully met; keep everything that is correct."
)
SHRANK_NOTE = (
    "Your last revision was more than {threshold:.0%} shorter than the previous version and "
    "was rolled back. Revise the previous version again and keep all of its correct content; "
    "only change what the reflections ask for."
)
MAX_REFLECTIONS = 50  # in one revision request; a person's always among them


def reflections_of(rows: list[ReflectionRow]) -> list[ReflectionDTO]:
    return [
        ReflectionDTO(
            source=ReflectionSource(r.source),
            content=r.content,
            author=r.author,
            created_at=r.created_at,
        )
        for r in rows
    ]


def note(content: str) -> ReflectionDTO:
    return ReflectionDTO(source=ReflectionSource.evaluator, content=content, created_at=NOTE_TIME)


def binding_first(reflections: list[ReflectionDTO], limit: int) -> list[ReflectionDTO]:
    """A person's word first, then the latest of the rest: a long run must never push a
    reviewer's reflection out of the request."""
    human = [r for r in reflections if r.source is ReflectionSource.human][-limit:]
    rest = [r for r in reflections if r.source is not ReflectionSource.human]
    return human + rest[len(rest) - (limit - len(human)) :] if limit > len(human) else human


def rollback_note(policy: Policy, round: int, attempt: int, guard_note: str | None) -> str | None:
    """Why a re-asked revision's previous attempt was rolled back (None: a first attempt)."""
    if attempt == 1:
        return None
    return guard_note or SHRANK_NOTE.format(threshold=policy.shrink_threshold)


def revise_request(
    run: RunState,
    previous: RoundState,
    reflections: list[ReflectionDTO],
    knowledge: list[KnowledgeNote],
    evidence: list[Evidence],
    unverified: list[Unverified],
    round: int,
) -> ReviseRequest:
    """The Actor's request to revise ``previous`` by the reflections so far (``reflections``
    holds any rollback note already)."""
    if not reflections:
        # a person asked for another round of a version nothing criticised (a retry after
        # a pass that could not ship, say): the revision still needs a reflection to follow
        reflections = [note(RETRY_NOTE.format(round=round - 1))]
    return ReviseRequest(
        task=run.task,
        kind=TaskKind(run.kind),
        entry_point=run.entry_point,
        previous_output=previous.output,
        reflections=binding_first(reflections, MAX_REFLECTIONS),
        knowledge=knowledge,
        binding_points=run.binding_points or [],
        issues=discipline.numbered(previous.critique),
        evidence=evidence[:MAX_EVIDENCE],
        unverified=unverified,
    )


def critique_request(
    run: RunState,
    policy: Policy,
    output: str,
    round: int,
    evaluation: Evaluation | None,
    human: list[ReflectionRow],
    knowledge: list[KnowledgeNote],
    declined: list[DeclinedIssue] | None = None,
) -> CritiqueRequest:
    """The Critic's request for one version; ``human``: the reviewers' reflections so far."""
    return CritiqueRequest(
        task=run.task,
        kind=TaskKind(run.kind),
        output=output,
        round=round,
        evaluation=evaluation,
        reflections=reflections_of(human),
        binding_points=run.binding_points or [],
        profile=policy.profile,
        depth=policy.depth,
        knowledge=knowledge,
        declined=declined or [],
        min_pass_confidence=gate.min_pass_confidence(policy),
        latency_budget_s=policy.latency_budget_s,
    )


def critic_reflection(doc: dict[str, Any]) -> str:
    """The reflection a critique leaves for the next revision: its summary and each issue."""
    lines = [doc["reflection"]] + [
        f"- [{i['severity']}] {i['dimension']}: {i['suggestion']}"
        + (f' (on: "{i["quote"][:200]}")' if i.get("quote") else "")
        for i in doc["issues"]
    ]
    if doc.get("refused_pass"):
        lines.append("The critic's pass was not accepted: " + "; ".join(doc["refused_pass"]))
    return "\n".join(lines)[:8000]


def unmet_points_reflection(unmet: list[str]) -> str:
    return "This version does not yet apply the reviewer's binding points:\n" + "\n".join(
        f"- {point}" for point in unmet
    )
