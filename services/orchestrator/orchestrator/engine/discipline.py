"""Revision discipline: numbered critic issues, the Actor's point-by-point answers, and
what the loop reads from them (declined issues for the Critic, adoption, open major issues,
claims flagged as hallucinations that a revision left unsourced).

Pure functions over the JSON the steps store (``rounds.critique``, ``rounds.responses``), so
a recovered workflow decides the same again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from shared.contracts import MAX_ISSUES, DeclinedIssue, RevisionIssue, Severity

BLOCKING = frozenset({Severity.major.value, Severity.critical.value})
HALLUCINATION = "hallucination"
_SPACE = re.compile(r"\s+")


def _squash(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def quote_present(quote: str, output: str) -> bool:
    """Whether a quoted span is still in the output (up to runs of white space)."""
    return quote in output or _squash(quote) in _squash(output)


def issue_id(index: int) -> str:
    """The id of the critique's ``index``-th issue (0-based): ``i1``, ``i2``, ..."""
    return f"i{index + 1}"


def numbered(critique: dict[str, Any] | None) -> list[RevisionIssue]:
    """The critique's issues as the Actor must answer them, ids in the critique's order."""
    if not critique:
        return []
    hallucination = critique.get("error_class") == HALLUCINATION
    return [
        RevisionIssue(
            id=issue_id(n),
            severity=issue["severity"],
            dimension=str(issue.get("dimension", "")),
            quote=issue.get("quote"),
            suggestion=str(issue.get("suggestion", "")),
            error_type=str(issue.get("error_type") or "other"),
            corrected_text=issue.get("corrected_text"),
            hallucination=hallucination and bool(issue.get("quote")),
        )
        for n, issue in enumerate(critique.get("issues", [])[:MAX_ISSUES])
    ]


def answers(responses: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The Actor's answers to critic issues, by issue id (the first answer wins)."""
    found: dict[str, dict[str, Any]] = {}
    for response in responses or []:
        key = response.get("issue")
        if key and key not in found:
            found[key] = response
    return found


def applied(answer: dict[str, Any] | None) -> bool:
    return answer is not None and answer.get("action") == "applied"


def declined(
    critique: dict[str, Any] | None, responses: list[dict[str, Any]] | None
) -> list[DeclinedIssue]:
    """The issues the Actor declined, with its reasons, for the next critique."""
    by_id = answers(responses)
    out = []
    for issue in numbered(critique):
        answer = by_id.get(issue.id)
        if answer is not None and answer.get("action") == "declined":
            out.append(
                DeclinedIssue(
                    issue=issue.id,
                    quote=issue.quote,
                    suggestion=issue.suggestion,
                    reason=str(answer.get("reason") or ""),
                )
            )
    return out


def unsourced(
    critique: dict[str, Any] | None, responses: list[dict[str, Any]] | None, output: str
) -> list[RevisionIssue]:
    """Hallucination issues whose quoted claim is still in the revision although the Actor's
    answer names no source for it."""
    by_id = answers(responses)
    return [
        issue
        for issue in numbered(critique)
        if issue.hallucination
        and issue.quote
        and quote_present(issue.quote, output)
        and not str((by_id.get(issue.id) or {}).get("source") or "").strip()
    ]


def unsourced_note(round: int, issues: list[RevisionIssue]) -> str:
    lines = [
        f"Round {round} kept claims the critic flagged as hallucinations, without a source. "
        "Remove or correct each, or name its source in your answer's `source`:"
    ]
    lines += [f'- [{i.id}] "{(i.quote or "")[:300]}": {i.suggestion[:300]}' for i in issues]
    return "\n".join(lines)


def open_blocking(
    critique: dict[str, Any] | None,
    responses: list[dict[str, Any]] | None,
    unsourced_ids: set[str] | frozenset[str] = frozenset(),
) -> list[str]:
    """The major or critical issues of the previous critique this revision left open: not
    answered ``applied``, or flagged as a hallucination the revision neither removed nor
    sourced."""
    by_id = answers(responses)
    return [
        issue.id
        for issue in numbered(critique)
        if issue.severity.value in BLOCKING
        and (not applied(by_id.get(issue.id)) or issue.id in unsourced_ids)
    ]


def _raised_again(issue: RevisionIssue, current: list[dict[str, Any]]) -> bool:
    """Whether the next critique raises ``issue`` again: an issue on the same span (quote) or
    of the same dimension. A re-raise on revised text quotes new text, so the span alone
    would miss it."""
    quote = _squash(issue.quote or "")
    dimension = issue.dimension.strip().lower()
    for found in current:
        if quote and _squash(str(found.get("quote") or "")) == quote:
            return True
        if dimension and str(found.get("dimension") or "").strip().lower() == dimension:
            return True
    return False


@dataclass(frozen=True)
class Adoption:
    """How a revision took up the previous critique: ``adopted`` of ``counted`` issues
    (declined issues whose refusal the Critic accepted are not counted)."""

    adopted: int
    counted: int

    @property
    def share(self) -> float | None:
        return round(self.adopted / self.counted, 4) if self.counted else None


def adoption(
    previous: dict[str, Any] | None,
    responses: list[dict[str, Any]] | None,
    current: dict[str, Any],
) -> Adoption | None:
    """An issue is adopted when the critique of the revised version does not raise it again
    (an issue on the same span or of the same dimension), whatever the Actor answered: a
    revision that says ``applied`` and leaves the fault is not adoption. A refusal the Critic
    accepted is neither adopted nor counted. ``None`` when there is nothing to measure: no
    previous issues (the caller passes none for a person's edit)."""
    issues = numbered(previous)
    if not issues:
        return None
    by_id = answers(responses)
    raised_now = list(current.get("issues") or [])
    accepted = set(current.get("accepted_refusals") or [])
    adopted = counted = 0
    for issue in issues:
        answer = by_id.get(issue.id)
        if answer is not None and answer.get("action") == "declined" and issue.id in accepted:
            continue
        counted += 1
        adopted += int(not _raised_again(issue, raised_now))
    return Adoption(adopted, counted)
