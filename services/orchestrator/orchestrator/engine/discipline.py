"""Revision discipline: numbered critic issues, the Actor's point-by-point answers, and
what the loop reads from them (declined issues for the Critic, adoption,
claims flagged as hallucinations that a revision left unsourced).

A claim flagged as a hallucination stays open until the revision removes it or the answer's
``source`` names a real source that supports it: a source of the evidence this revision was
given (``[n]``, ``evidence:[n]``, ``evidence n`` or its URL), a knowledge entry the Actor
received for this call (``knowledge:<id>``) or a span of the task (``task: "<exact span>"``,
at least :data:`MIN_TASK_SPAN_WORDS` words). The source is checked, not trusted: every
number and every name of the claimed span must appear in the named sources' text.

Pure functions over the JSON the steps store (``rounds.critique``, ``rounds.responses``), so
a recovered workflow decides the same again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from shared.citations import COMMON_WORDS, NUMBER_WORDS
from shared.contracts import (
    MAX_ISSUES,
    DeclinedIssue,
    Evidence,
    KnowledgeNote,
    RevisionIssue,
)

HALLUCINATION = "hallucination"
# A task span shorter than this names a subject, not a fact ("the Moon", "in 1969"): too
# little to back a claim. Three words hold a subject, a verb and what is said of it.
MIN_TASK_SPAN_WORDS = 3
SOURCE_FORMS = (
    "`[n]` or `evidence:[n]` (a source of the <evidence> you were given) or its URL, "
    "`knowledge:<id>` (an entry of the <knowledge> you were given), or "
    f'`task: "<exact words of the task>"` (at least {MIN_TASK_SPAN_WORDS} words)'
)
_SPACE = re.compile(r"\s+")
_TASK_SPAN = re.compile(r"task\s*:\s*(?:\"([^\"]*)\"|“([^”]*)”)", re.IGNORECASE)
_EVIDENCE_NUMBER = re.compile(
    r"(?:evidence\s*:?\s*)?\[(\d{1,4})\]|evidence\s*:?\s*#?(\d{1,4})\b", re.IGNORECASE
)
_KNOWLEDGE = re.compile(r"knowledge\s*:\s*([^\s,;\]\)\"'“”]+)", re.IGNORECASE)
_URL = re.compile(r"(?:https?|file)://[^\s<>\"'\])]+")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_WORD = re.compile(r"[^\W\d_]+")
_MARKER = re.compile(r"\[\d{1,4}\]")
_SMALL = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
# number words as digits, so "two tides" and "2 tides" state the same number ("one" is no
# number word here: mostly a pronoun)
_VALUES = {w: str(i) for i, w in enumerate(_SMALL) if w != "one"} | {
    w: str(20 + 10 * i) for i, w in enumerate(_TENS)
}


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


@dataclass(frozen=True)
class Sources:
    """What a revision could name as a hallucinated claim's source: the task, the evidence
    it was given and the knowledge entries its Actor received."""

    task: str = ""
    evidence: Sequence[Evidence] = ()
    knowledge: Sequence[KnowledgeNote] = ()


@dataclass(frozen=True)
class Unsourced:
    """A hallucination issue the revision left open, and why its source was refused."""

    issue: RevisionIssue
    reason: str

    @property
    def id(self) -> str:
        return self.issue.id


@dataclass
class _Named:
    texts: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def _numbers(text: str) -> set[str]:
    """The numbers of a text (citation markers aside), comparable across ways of writing
    them: digits without thousands separators, "two" as "2", "million" as it is spelled."""
    bare = _MARKER.sub(" ", text)
    found = {m.group(0).replace(",", "") for m in _NUMBER.finditer(bare)}
    for word in (w.casefold() for w in _WORD.findall(bare)):
        if word in NUMBER_WORDS or word in _VALUES:
            found.add(_VALUES.get(word, word))
    return found


def _names(text: str) -> set[str]:
    """The capitalised words of a claim past its first word, casefolded."""
    words = _WORD.findall(text)
    return {
        w.casefold()
        for w in words[1:]
        if len(w) > 1 and w[0].isupper() and w.casefold() not in COMMON_WORDS
    }


def _named_sources(source: str, sources: Sources) -> _Named:
    """The texts of the sources ``source`` names, and why each other one was refused."""
    named = _Named()
    rest = source
    for match in _TASK_SPAN.finditer(source):
        span = _squash(match.group(1) if match.group(1) is not None else match.group(2))
        rest = rest.replace(match.group(0), " ")
        if len(span.split()) < MIN_TASK_SPAN_WORDS:
            named.refused.append(
                f'the task span "{span[:100]}" is under {MIN_TASK_SPAN_WORDS} words: '
                "too short to support a claim"
            )
        elif span not in _squash(sources.task):
            named.refused.append(f'"{span[:100]}" does not occur in the task')
        else:
            named.texts.append(span)
    by_url = {e.url: e for e in sources.evidence}
    for url in (u.rstrip(".,;:") for u in _URL.findall(rest)):
        rest = rest.replace(url, " ")
        item = by_url.get(url)
        if item is None:
            named.refused.append(f"{url} is not a URL of the evidence this revision was given")
        else:
            named.texts.append(_evidence_text(item))
    by_number = {e.n: e for e in sources.evidence}
    for match in _EVIDENCE_NUMBER.finditer(rest):
        n = int(match.group(1) or match.group(2))
        item = by_number.get(n)
        if item is None:
            given = ", ".join(f"[{k}]" for k in sorted(by_number)) or "none"
            named.refused.append(f"evidence [{n}] was not given to this revision (given: {given})")
        else:
            named.texts.append(_evidence_text(item))
    by_id = {note.id: note for note in sources.knowledge}
    for match in _KNOWLEDGE.finditer(rest):
        key = match.group(1).rstrip(".,;:")
        note = by_id.get(key)
        if note is None:
            named.refused.append(f"knowledge:{key} is no entry this revision's Actor received")
        else:
            named.texts.append(f"{note.title}\n{note.body}")
    return named


def _evidence_text(item: Evidence) -> str:
    return "\n".join(t for t in (item.title, item.snippet, item.distilled or "") if t)


def source_refusal(claim: str, source: str, sources: Sources) -> str | None:
    """Why ``source`` does not support ``claim`` (``None`` when it does): it names nothing
    real, or the named sources lack a number or a name of the claim."""
    if not source.strip():
        return "the answer names no source"
    named = _named_sources(source, sources)
    if named.refused:
        return "; ".join(named.refused)
    if not named.texts:
        return f"{source.strip()[:100]!r} names no source in an accepted form"
    text = "\n".join(named.texts)
    missing = sorted(_numbers(claim) - _numbers(text))
    if missing:
        return "the named source does not state " + ", ".join(missing)
    folded = text.casefold()
    absent = sorted(n for n in _names(claim) if n not in folded)
    if absent:
        return "the named source does not mention " + ", ".join(absent)
    return None


def unsourced(
    critique: dict[str, Any] | None,
    responses: list[dict[str, Any]] | None,
    output: str,
    sources: Sources | None = None,
) -> list[Unsourced]:
    """Hallucination issues whose quoted claim is still in the revision although the Actor's
    answer names no real source that supports it."""
    by_id = answers(responses)
    given = sources or Sources()
    out = []
    for issue in numbered(critique):
        if not (issue.hallucination and issue.quote and quote_present(issue.quote, output)):
            continue
        source = str((by_id.get(issue.id) or {}).get("source") or "")
        reason = source_refusal(issue.quote, source, given)
        if reason is not None:
            out.append(Unsourced(issue, reason))
    return out


def unsourced_note(round: int, items: list[Unsourced]) -> str:
    lines = [
        f"Round {round} kept claims the critic flagged as hallucinations, without a source "
        "that supports them. Remove or correct each, or name its source in your answer's "
        f"`source`: {SOURCE_FORMS}; every number and name of the claim must appear in that "
        "source."
    ]
    lines += [
        f'- [{u.issue.id}] "{(u.issue.quote or "")[:300]}": {u.issue.suggestion[:300]} '
        f"(source refused: {u.reason[:300]})"
        for u in items
    ]
    return "\n".join(lines)


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
